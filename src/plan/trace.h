#pragma once

// Job traces for `bmas plan`: the jobs a cluster was given, replayed instead of a cohort's
// training model. Two formats:
//  - csv: a header line, then `submit_s,user,gpus,duration_s[,partition]` per job (the header
//    names the columns, partition last and optional; an empty partition is the cluster's
//    default one);
//  - alibaba-v2023: the pod list of Alibaba's public GPU trace cluster-trace-gpu-v2023
//    (tests/data/README.md). Pods that ask for GPUs become jobs: submitted at creation_time,
//    running from scheduled_time to deletion_time, with a whole GPU for a fraction of one. The
//    trace names no users: a job's user is its pod's QoS class (LS, BE, Burstable,
//    Guaranteed). Pods that never ran (no scheduled_time) and pods without GPUs are left out
//    and counted.
// Fields are split on ',' and quoting is not supported: both formats are numbers and plain
// names. A malformed line is a ConfigError naming the file and the line.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bmas::plan {

struct TraceJob {
  double submit_s = 0;  // seconds from the trace's start
  std::string user;
  int gpus = 0;           // >= 1
  double duration_s = 0;  // how long it runs once started; >= 0
  std::string partition;  // "" = the cluster's default partition
  double time_limit_s = 0;  // what it asked Slurm for (csv time_limit_s); 0 = not known
};

enum class TraceFormat { kCsv, kAlibabaV2023 };

// "csv" or "alibaba-v2023"; nullopt for any other name.
std::optional<TraceFormat> ParseTraceFormat(std::string_view name);
std::string_view TraceFormatName(TraceFormat format);

struct Trace {
  std::vector<TraceJob> jobs;  // by submit time; jobs submitted at once keep the file's order
  int64_t rows = 0;            // data lines read (the header and empty lines not counted)
  // alibaba-v2023 only:
  int64_t never_ran = 0;   // GPU pods without a scheduled_time, left out
  int64_t cpu_only = 0;    // pods with num_gpu = 0, left out
  int64_t rounded_up = 0;  // jobs that asked for part of a GPU and were given a whole one
};

// Reads a trace from `text`; `source` names it in errors. Throws ConfigError
// "<source>:<line>: <what is wrong>".
Trace ParseTrace(std::string_view text, TraceFormat format, const std::string& source);

// Reads the trace file `path`. Throws ConfigError, naming the file, when it cannot be read.
Trace ReadTrace(const std::string& path, TraceFormat format);

}  // namespace bmas::plan
