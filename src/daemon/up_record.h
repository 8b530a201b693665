#pragma once

// What a running `bmas up` started, written to <state>/run/up.json as it changes: read by
// `bmas up --status`, by `bmas slurm down` and `bmas lxd down` (which refuse what a running up
// owns), and by the next `bmas up`, which stops what a dead one left running.

#include <sys/types.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace bmas {

struct UpRecord {
  struct Part {
    std::string name;
    pid_t pid = 0;
    unsigned long long start_ticks = 0;  // with pid: this process and no later one
    std::string url;
    std::string log;
    std::string state;      // "running", "restarting", "down"
    long long restart_at = 0;  // unix seconds, while "restarting"
    int restarts = 0;
    std::string last_exit;  // "" when it never died
  };
  pid_t pid = 0;  // the bmas up
  unsigned long long start_ticks = 0;
  long long since = 0;  // unix seconds
  std::string state_dir;
  bool owns_slurm = false;  // the local Slurm is its own: it stops it
  bool owns_lxd = false;
  std::vector<Part> parts;
};

// run/up.json in `state_dir`, replaced whole (a reader never sees half of one).
Result<void> WriteUpRecord(const std::string& state_dir, const UpRecord& record);
// NotFound when no bmas up has run there since the last clean stop.
Result<UpRecord> ReadUpRecord(const std::string& state_dir);
void RemoveUpRecord(const std::string& state_dir);

// Whether the process `pid` that started at `start_ticks` still runs.
bool StillRuns(pid_t pid, unsigned long long start_ticks);

// The bmas up that runs with `state_dir`, if one does.
std::optional<UpRecord> RunningUp(const std::string& state_dir);

// For `bmas slurm down` and `bmas lxd down` (`part` "slurm" or "lxd"): the refusal when a
// running bmas up owns that part, "" when the command may go on.
std::string RefuseWhatUpOwns(const std::string& state_dir, std::string_view part,
                             std::string_view command);

// When the last bmas up of `state_dir` died and left parts running (no bmas up runs): stops
// them and returns what it did, one line each, and the record (for what it owned). nullopt when
// there was nothing left behind.
std::optional<std::pair<UpRecord, std::string>> StopStaleRun(const std::string& state_dir);

// `bmas up --status [--json]`: what runs, restarts and why. 0 while a bmas up runs, else 1.
int PrintUpStatus(const std::string& state_dir, bool json);

}  // namespace bmas
