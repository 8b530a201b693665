#include "plan/jobs_report.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "common/json_object.h"

namespace bmas::plan {
namespace {

double NearestRank(const std::vector<double>& sorted, double q) {
  const auto n = static_cast<double>(sorted.size());
  const auto rank = static_cast<size_t>(std::max(1.0, std::ceil(q * n)));
  return sorted[std::min(rank, sorted.size()) - 1];
}

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void WriteStats(JsonWriter& w, const Stats& s) {
  w.StartObject();
  Member(w, "count", s.count);
  w.Key("mean");
  w.Double(s.mean);
  w.Key("p50");
  w.Double(s.p50);
  w.Key("p95");
  w.Double(s.p95);
  w.Key("p99");
  w.Double(s.p99);
  w.EndObject();
}

std::string StatsLine(const Stats& s) {
  return fmt::format("mean {:.1f}  p50 {:.1f}  p95 {:.1f}  p99 {:.1f}", s.mean, s.p50, s.p95,
                     s.p99);
}

}  // namespace

Stats Summarize(std::vector<double> samples) {
  Stats s;
  s.count = static_cast<int64_t>(samples.size());
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(s.count);
  s.p50 = NearestRank(samples, 0.50);
  s.p95 = NearestRank(samples, 0.95);
  s.p99 = NearestRank(samples, 0.99);
  return s;
}

JobsReport ReportJobs(const Cluster& cluster, const std::vector<SimJob>& jobs,
                      const SlurmModelResult& result) {
  JobsReport r;
  r.count = static_cast<int64_t>(jobs.size());
  r.total_gpus = PhysicalGpuCount(cluster);
  std::vector<double> waits, completions;
  std::map<int, std::vector<double>> by_gpus, completion_by_gpus;
  double first_submit = jobs.empty() ? 0 : jobs.front().submit.count();
  for (size_t i = 0; i < jobs.size() && i < result.jobs.size(); ++i) {
    const SimJob& job = jobs[i];
    const SimJobResult& out = result.jobs[i];
    first_submit = std::min(first_submit, job.submit.count());
    r.requeues += out.requeues;
    if (!out.started) {
      ++r.cannot_run;
      if (r.first_error.empty()) r.first_error = out.error;
      continue;
    }
    ++r.started;
    const double wait = (out.start - job.submit).count();
    waits.push_back(wait);
    completions.push_back((out.end - job.submit).count());
    by_gpus[job.gpus].push_back(wait);
    completion_by_gpus[job.gpus].push_back((out.end - job.submit).count());
  }
  r.wait_s = Summarize(std::move(waits));
  r.completion_s = Summarize(std::move(completions));
  r.makespan_s = r.started > 0 ? result.makespan.count() - first_submit : 0;
  if (r.makespan_s > 0 && r.total_gpus > 0) {
    r.allocated_fraction = result.gpu_seconds_allocated / (r.total_gpus * r.makespan_s);
  }
  for (auto& [gpus, w] : by_gpus) r.wait_by_gpus[gpus] = Summarize(std::move(w));
  for (auto& [gpus, c] : completion_by_gpus) r.completion_by_gpus[gpus] = Summarize(std::move(c));
  return r;
}

std::string JobsVerdict(const JobsReport& r) {
  std::string v = fmt::format(
      "{} jobs on {} GPUs: wait p95 {:.0f} s (p50 {:.0f} s), all done in {:.1f} h, GPUs "
      "allocated {:.0f}% of that time",
      r.started, r.total_gpus, r.wait_s.p95, r.wait_s.p50, r.makespan_s / 3600,
      r.allocated_fraction * 100);
  if (r.cannot_run > 0) {
    v += fmt::format("; {} job(s) could not run on this cluster ({})", r.cannot_run,
                     r.first_error);
  }
  return v + ".";
}

std::string JobsPlanJson(const JobsReport& r, const SimInfo& sim) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  w.Key("verdict");
  const std::string verdict = JobsVerdict(r);
  w.String(verdict.c_str(), static_cast<rapidjson::SizeType>(verdict.size()));
  w.Key("jobs");
  w.StartObject();
  Member(w, "count", r.count);
  Member(w, "started", r.started);
  Member(w, "cannot_run", r.cannot_run);
  Member(w, "requeues", r.requeues);
  w.Key("wait_s");
  WriteStats(w, r.wait_s);
  w.Key("completion_s");
  WriteStats(w, r.completion_s);
  w.Key("makespan_s");
  w.Double(r.makespan_s);
  w.Key("by_gpus");
  w.StartArray();
  for (const auto& [gpus, s] : r.wait_by_gpus) {
    w.StartObject();
    Member(w, "gpus", gpus);
    w.Key("wait_s");
    WriteStats(w, s);
    w.Key("completion_s");
    WriteStats(w, r.completion_by_gpus.at(gpus));
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.Key("inference");
  w.Null();
  w.Key("gpus");
  w.StartObject();
  Member(w, "total", r.total_gpus);
  w.Key("allocated_fraction");
  w.Double(r.allocated_fraction);
  w.Key("inference_fraction");
  w.Double(0);
  w.Key("training_fraction");
  w.Double(r.allocated_fraction);
  w.EndObject();
  w.Key("cost");
  w.Null();
  w.Key("sim");
  w.StartObject();
  w.Key("wall_s");
  w.Double(sim.wall_s);
  w.Key("simulated_s");
  w.Double(sim.simulated_s);
  Member(w, "events", sim.events);
  w.Key("calibration");
  w.StartObject();
  w.Key("launch_delay_s");
  w.Double(sim.launch_delay_s.value);
  Member(w, "launch_delay_source", sim.launch_delay_s.source);
  w.Key("backfill_interval_s");
  w.Double(sim.backfill_interval_s.value);
  Member(w, "backfill_interval_source", sim.backfill_interval_s.source);
  Member(w, "time_limits", sim.time_limits);
  w.EndObject();
  w.EndObject();
  w.EndObject();
  return buf.GetString();
}

std::string JobsPlanText(const JobsReport& r, const SimInfo& sim) {
  std::string out = JobsVerdict(r) + "\n\n";
  out += fmt::format("jobs          {} ({} ran, {} requeued by preemption)\n", r.count, r.started,
                     r.requeues);
  out += fmt::format("wait (s)      {}\n", StatsLine(r.wait_s));
  out += fmt::format("completion (s) {}\n", StatsLine(r.completion_s));
  for (const auto& [gpus, s] : r.wait_by_gpus) {
    out += fmt::format("  wait, {:>2} GPU job(s), {} of them: {}\n", gpus, s.count, StatsLine(s));
  }
  out += fmt::format("makespan      {:.0f} s\n", r.makespan_s);
  out += fmt::format("GPUs          {} ; allocated {:.1f}% of the makespan\n", r.total_gpus,
                     r.allocated_fraction * 100);
  out += fmt::format("simulation    {:.0f} s simulated in {:.3f} s wall, {} events\n",
                     sim.simulated_s, sim.wall_s, sim.events);
  out += fmt::format("model         launch delay {:.2f} s ({}); backfill every {:g} s ({}); time "
                     "limits: {}\n",
                     sim.launch_delay_s.value, sim.launch_delay_s.source,
                     sim.backfill_interval_s.value, sim.backfill_interval_s.source,
                     sim.time_limits);
  return out;
}

}  // namespace bmas::plan
