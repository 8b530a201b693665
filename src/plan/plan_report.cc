#include "plan/plan_report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "common/json_object.h"
#include "engine/calibrate.h"
#include "plan/workload.h"

namespace bmas::plan {
namespace {

constexpr double kEndless = std::numeric_limits<double>::infinity();
constexpr double kHoursPerYear = 8766;  // 365.25 days
constexpr double kHoursPerMonth = kHoursPerYear / 12;

double Quantile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t k = static_cast<size_t>(std::max(1.0, std::ceil(q * v.size()))) - 1;
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

// At most `points` [value, fraction] points of the empirical CDF of `v`.
std::vector<std::pair<double, double>> Cdf(std::vector<double> v, size_t points = 200) {
  std::vector<std::pair<double, double>> out;
  if (v.empty()) return out;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  for (size_t i = 1; i <= points; ++i) {
    const size_t k = std::max<size_t>(1, (i * n + points - 1) / points);
    const double x = v[k - 1];
    if (!out.empty() && out.back().first == x) {
      out.back().second = static_cast<double>(k) / n;
    } else {
      out.emplace_back(x, static_cast<double>(k) / n);
    }
  }
  return out;
}

std::string DayHour(int hour) {
  static const char* kDays[] = {"Monday", "Tuesday", "Wednesday", "Thursday",
                                "Friday", "Saturday", "Sunday"};
  return fmt::format("{} {:02d}:00", kDays[(hour / 24) % 7], hour % 24);
}

std::string Money(const std::string& currency, double v) {
  return currency == "USD" ? fmt::format("${:.0f}", v) : fmt::format("{:.0f} {}", v, currency);
}

CostReport PriceIt(const Scenario& s, const PlanReport& r, int total_gpus, int nodes,
                 double member_hours_per_week) {
  const Costs& c = s.costs;
  CostReport out;
  out.currency = c.currency;
  const double per_year = nodes * c.node_price / c.amortisation_years +
                          nodes * c.node_power_kw * c.pue * c.price_per_kwh * kHoursPerYear +
                          c.staff_per_year;
  out.cluster_per_month = per_year / 12;
  const double delivered = r.allocated_fraction * total_gpus * kHoursPerYear;
  if (delivered > 0) out.per_gpu_hour = per_year / delivered;
  if (r.users > 0) {
    out.per_user_month = out.cluster_per_month / r.users;
    // The cloud on demand bills the GPU-hours the users were given, and nothing idle.
    out.cloud_on_demand_per_user_month =
        delivered / 12 * c.cloud_on_demand_per_gpu_hour / r.users;
    // Reserved capacity is paid every hour: as many GPUs as this cluster has.
    out.cloud_reserved_per_user_month =
        total_gpus * kHoursPerMonth * c.cloud_reserved_per_gpu_hour / r.users;
    // A GPU per user: its price over the same years, and its power while its owner works.
    out.gpu_per_user_per_user_month =
        c.gpu_per_user_price / c.amortisation_years / 12 +
        c.gpu_per_user_power_kw * member_hours_per_week * (kHoursPerMonth / 168) * c.price_per_kwh;
  }
  return out;
}

}  // namespace

EngineCalibration CalibrateProfile(const engine::Profile& p) {
  EngineCalibration c;
  c.profile = p.name;
  if (p.name != "llama-3.1-8b-h100") return c;
  c.reference = "NVIDIA NIM, Llama-3.1-8B-Instruct on one H100";
  c.worst_error = engine::WorstRelativeError(
      engine::Calibrate(SchedulerConfigOf(p), p.time, engine::LlamaH100Reference()));
  return c;
}

MigReport ReportMig(const Cluster& cluster, const PlanRun& run, int users) {
  MigReport m;
  for (const Node& n : cluster.nodes) {
    if (n.gpu_group.empty()) {
      for (int g = 0; g < n.gpus.count; ++g) m.sliced_gpus += MigLayoutOf(n.gpus, g) != nullptr;
    } else if (n.layout_index == 0) {
      ++m.flexible_gpus;
    }
  }
  std::vector<double> waits;
  for (size_t i = 0; i < run.jobs.size(); ++i) {
    const SimJobResult& res = run.slurm.jobs[i];
    if (!res.started || run.jobs[i].mig_profile.empty()) continue;
    if (res.gres.empty()) {
      ++m.fell_back;
    } else {
      waits.push_back((res.start - run.jobs[i].submit).count());
    }
  }
  m.slice_wait_s = Summarize(waits);
  m.layout_changes = static_cast<int64_t>(run.slurm.layout_changes.size());
  m.users_per_gpu = run.total_gpus > 0 ? static_cast<double>(users) / run.total_gpus : 0;
  return m;
}

PlanReport BuildPlanReport(const Scenario& s, const PlanRun& run) {
  PlanReport r;
  const Cluster& cluster = *s.cluster;
  for (const Cohort& c : s.cohorts) r.users += c.count;
  r.jobs = ReportJobs(cluster, run.jobs, run.slurm);
  const int hours = static_cast<int>(std::ceil(run.horizon_s / 3600));

  // Jobs per cohort, and each hour's wait p95.
  std::vector<std::vector<double>> hour_waits(hours);
  std::vector<std::vector<double>> waits(s.cohorts.size()), completions(s.cohorts.size());
  std::vector<double> gpu_hours(s.cohorts.size(), 0);
  std::vector<double> all_waits;
  for (size_t i = 0; i < run.jobs.size(); ++i) {
    const SimJob& j = run.jobs[i];
    const SimJobResult& res = run.slurm.jobs[i];
    const double wait = res.started ? (res.start - j.submit).count() : kEndless;
    const size_t h = static_cast<size_t>(j.submit.count() / 3600);
    if (h < hour_waits.size()) hour_waits[h].push_back(wait);
    if (!res.started) continue;
    all_waits.push_back(wait);
    const int c = run.job_cohort[i];
    if (c < 0) continue;
    waits[c].push_back(wait);
    completions[c].push_back((res.end - j.submit).count());
    gpu_hours[c] += res.gpu_equivalents * (res.end - res.start).count() / 3600;
  }
  r.mig = ReportMig(cluster, run, r.users);
  for (size_t c = 0; c < s.cohorts.size(); ++c) {
    if (waits[c].empty()) continue;
    r.jobs_by_cohort.push_back(
        {s.cohorts[c].name, Summarize(waits[c]), Summarize(completions[c]), gpu_hours[c]});
  }

  // Inference per cohort, and each hour's TTFT.
  const InferenceResult& inf = run.inference;
  std::vector<std::vector<double>> hour_ttfts(hours);
  std::vector<std::vector<double>> ttft(s.cohorts.size()), itl(s.cohorts.size()),
      e2e(s.cohorts.size());
  std::vector<int64_t> requests(s.cohorts.size(), 0);
  std::vector<double> all_ttft, all_itl, all_e2e;
  for (const RequestRecord& q : inf.requests) {
    ++r.requests;
    ++requests[q.cohort];
    const size_t h = static_cast<size_t>(q.sent / 3600);
    const bool ok = !q.failed && q.ttft >= 0;
    if (h < hour_ttfts.size()) hour_ttfts[h].push_back(ok ? q.ttft : kEndless);
    if (q.failed) {
      ++r.failed;
      continue;
    }
    if (q.e2e >= 0) ++r.completed;
    if (!ok) continue;
    ttft[q.cohort].push_back(q.ttft);
    all_ttft.push_back(q.ttft);
    if (q.itl >= 0) {
      itl[q.cohort].push_back(q.itl);
      all_itl.push_back(q.itl);
    }
    if (q.e2e >= 0) {
      e2e[q.cohort].push_back(q.e2e);
      all_e2e.push_back(q.e2e);
    }
  }
  for (size_t c = 0; c < s.cohorts.size(); ++c) {
    if (requests[c] == 0) continue;
    r.inference_by_cohort.push_back({s.cohorts[c].name, requests[c], Summarize(ttft[c]),
                                     Summarize(itl[c]), Summarize(e2e[c])});
  }
  r.ttft_s = Summarize(all_ttft);
  r.itl_s = Summarize(all_itl);
  r.e2e_s = Summarize(all_e2e);
  r.tokens_served = inf.tokens_served;
  r.preemptions = inf.preemptions;
  r.resumed_streams = inf.resumed_streams;
  r.replicas_max = inf.replicas_max;
  r.inference_gpu_hours = inf.gpu_seconds / 3600;

  // Hours: GPUs by path and the SLOs.
  double inference_s = 0, training_s = 0;
  int met = 0;
  for (int h = 0; h < hours; ++h) {
    HourPoint p;
    const double span = std::min(3600.0, run.horizon_s - h * 3600.0);
    if (h < static_cast<int>(inf.gpu_seconds_by_hour.size())) p.inference = inf.gpu_seconds_by_hour[h] / span;
    if (h < static_cast<int>(run.training_gpu_seconds_by_hour.size())) {
      p.training = run.training_gpu_seconds_by_hour[h] / span;
    }
    inference_s += p.inference * span;
    training_s += p.training * span;
    p.idle = std::max(0.0, run.total_gpus - p.inference - p.training);
    const bool has_requests = !hour_ttfts[h].empty();
    const bool has_jobs = !hour_waits[h].empty();
    if (has_requests || has_jobs) {
      bool ok = true;
      if (has_requests) {
        const double p95 = Quantile(hour_ttfts[h], 0.95);
        p.ttft_p99_s = Quantile(hour_ttfts[h], 0.99);
        ok = ok && p95 <= s.slo.ttft_p95_s && p.ttft_p99_s <= s.slo.ttft_p99_s;
      }
      if (has_jobs) {
        p.wait_s = Summarize(hour_waits[h]);
        p.wait_p95_s = Quantile(hour_waits[h], 0.95);
        ok = ok && p.wait_p95_s <= s.slo.job_wait_p95_s;
      }
      p.slo_met = ok;
      ++r.hours_with_load;
      met += ok;
    }
    r.timeline.push_back(p);
  }
  const double capacity = run.total_gpus * run.horizon_s;
  r.inference_fraction = capacity > 0 ? inference_s / capacity : 0;
  r.training_fraction = capacity > 0 ? training_s / capacity : 0;
  r.allocated_fraction = r.inference_fraction + r.training_fraction;
  r.busy_fraction = capacity > 0 ? (training_s + inf.busy_gpu_seconds) / capacity : 0;
  r.slo_hours_met_fraction = r.hours_with_load > 0 ? static_cast<double>(met) / r.hours_with_load : 1;
  r.met = run.error.empty() && r.slo_hours_met_fraction >= s.slo.hours_met_fraction;
  r.ttft_cdf = Cdf(all_ttft);
  r.wait_cdf = Cdf(all_waits);

  // Costs.
  double member_hours = 0;  // per member per week, averaged over the users
  for (const Cohort& c : s.cohorts) {
    double seconds = 0;
    for (double t = 0; t < kWeekSeconds; t += 60) seconds += ActiveFraction(c, t) * 60;
    member_hours += seconds / 3600 * c.count;
  }
  if (r.users > 0) member_hours /= r.users;
  r.cost = PriceIt(s, r, run.total_gpus, HostCount(cluster), member_hours);
  r.sim = SimInfo{run.wall_s, run.horizon_s, run.events};

  // The verdict: the share of hours, the worst hour and what would help, the cost.
  int worst = -1;
  double worst_ratio = 0;
  for (int h = 0; h < hours; ++h) {
    const HourPoint& p = r.timeline[h];
    if (!p.slo_met || *p.slo_met) continue;
    const double ratio = std::max(p.ttft_p99_s / s.slo.ttft_p99_s, p.wait_p95_s / s.slo.job_wait_p95_s);
    if (worst < 0 || ratio > worst_ratio) {
      worst = h;
      worst_ratio = ratio;
    }
  }
  std::string v = fmt::format("{} users on {} GPUs {} the SLOs in {:.0f}% of hours with load (target {:.0f}%)",
                              r.users, run.total_gpus, r.met ? "meet" : "do not meet",
                              100 * r.slo_hours_met_fraction, 100 * s.slo.hours_met_fraction);
  if (!run.error.empty()) v = fmt::format("The scenario cannot run: {}", run.error);
  if (worst >= 0) {
    const HourPoint& p = r.timeline[worst];
    const bool ttft_worse = p.ttft_p99_s / s.slo.ttft_p99_s >= p.wait_p95_s / s.slo.job_wait_p95_s;
    v += ttft_worse
             ? fmt::format("; the worst, {}, has TTFT p99 {} against {:.0f} s", DayHour(worst),
                           std::isfinite(p.ttft_p99_s) ? fmt::format("{:.1f} s", p.ttft_p99_s)
                                                       : std::string("requests failing"),
                           s.slo.ttft_p99_s)
             : fmt::format("; the worst, {}, has job wait p95 {} against {:.0f} s", DayHour(worst),
                           std::isfinite(p.wait_p95_s) ? fmt::format("{:.0f} s", p.wait_p95_s)
                                                       : std::string("jobs never starting"),
                           s.slo.job_wait_p95_s);
  }
  v += fmt::format("; inference TTFT p95 {:.2f} s over {} requests, job wait p95 {:.0f} s over {} jobs",
                   r.ttft_s.p95, r.requests, r.jobs.wait_s.p95, r.jobs.count);
  if (r.cost.per_user_month && r.cost.cloud_on_demand_per_user_month) {
    v += fmt::format("; cost per user-month {} against {} on demand",
                     Money(r.cost.currency, *r.cost.per_user_month),
                     Money(r.cost.currency, *r.cost.cloud_on_demand_per_user_month));
  }
  r.verdict = v + ".";
  return r;
}

namespace {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

void Str(JsonWriter& w, const std::string& s) {
  w.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size()));
}

void Num(JsonWriter& w, double v) {
  if (std::isfinite(v)) {
    w.Double(v);
  } else {
    w.Null();
  }
}

void Opt(JsonWriter& w, const std::optional<double>& v) {
  if (v) {
    Num(w, *v);
  } else {
    w.Null();
  }
}

void StatsJson(JsonWriter& w, const Stats& s) {
  w.StartObject();
  Member(w, "count", s.count);
  for (const auto& [k, v] : {std::pair{"mean", s.mean}, {"p50", s.p50}, {"p95", s.p95}, {"p99", s.p99}}) {
    w.Key(k);
    Num(w, v);
  }
  w.EndObject();
}

void CdfJson(JsonWriter& w, const std::vector<std::pair<double, double>>& cdf) {
  w.StartArray();
  for (const auto& [x, f] : cdf) {
    w.StartArray();
    Num(w, x);
    Num(w, f);
    w.EndArray();
  }
  w.EndArray();
}

// The same, as the member `key` of the object being written.
void Key(JsonWriter& w, std::string_view key) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
}
void Str(JsonWriter& w, std::string_view key, const std::string& s) {
  Key(w, key);
  Str(w, s);
}
void Num(JsonWriter& w, std::string_view key, double v) {
  Key(w, key);
  Num(w, v);
}
void Opt(JsonWriter& w, std::string_view key, const std::optional<double>& v) {
  Key(w, key);
  Opt(w, v);
}
void StatsJson(JsonWriter& w, std::string_view key, const Stats& s) {
  Key(w, key);
  StatsJson(w, s);
}
void CdfJson(JsonWriter& w, std::string_view key,
             const std::vector<std::pair<double, double>>& cdf) {
  Key(w, key);
  CdfJson(w, cdf);
}

}  // namespace

std::string PlanJson(const Scenario& s, const PlanReport& r, const Sweep* sweep) {
  return JsonObject([&](JsonWriter& w) {
    Str(w, "verdict", r.verdict);
    Member(w, "met", r.met);
    ObjectMember(w, "scenario", [&] {
      Str(w, "source", s.source);
      Member(w, "users", r.users);
      Member(w, "gpus", r.jobs.total_gpus);
      Member(w, "nodes", HostCount(*s.cluster));
      Num(w, "days", s.simulation.days);
      Member(w, "seed", s.simulation.seed);
      std::vector<std::string_view> cohorts;
      for (const Cohort& c : s.cohorts) cohorts.push_back(c.name);
      StringsMember(w, "cohorts", cohorts);
    });
    ObjectMember(w, "engine", [&] {
      Str(w, "model", s.engine.model);
      Str(w, "profile", r.engine.profile);
      w.Key("calibration_reference");
      if (r.engine.reference.empty()) {
        w.Null();
      } else {
        Str(w, r.engine.reference);
      }
      Opt(w, "calibration_worst_error", r.engine.worst_error);
    });
    ObjectMember(w, "slo", [&] {
      for (const auto& [k, v] : {std::pair{"ttft_p95_s", s.slo.ttft_p95_s},
                                 {"ttft_p99_s", s.slo.ttft_p99_s},
                                 {"job_wait_p95_s", s.slo.job_wait_p95_s},
                                 {"hours_met_fraction", s.slo.hours_met_fraction}}) {
        Num(w, k, v);
      }
    });

    ObjectMember(w, "jobs", [&] {
      Member(w, "count", r.jobs.count);
      Member(w, "started", r.jobs.started);
      Member(w, "cannot_run", r.jobs.cannot_run);
      Member(w, "requeues", r.jobs.requeues);
      StatsJson(w, "wait_s", r.jobs.wait_s);
      StatsJson(w, "completion_s", r.jobs.completion_s);
      Num(w, "makespan_s", r.jobs.makespan_s);
      ObjectsMember(w, "by_gpus", r.jobs.wait_by_gpus, [&](const auto& by_gpus) {
        const auto& [gpus, st] = by_gpus;
        Member(w, "gpus", gpus);
        StatsJson(w, "wait_s", st);
        StatsJson(w, "completion_s", r.jobs.completion_by_gpus.at(gpus));
      });
      ObjectsMember(w, "by_cohort", r.jobs_by_cohort, [&](const CohortJobs& c) {
        Str(w, "cohort", c.cohort);
        StatsJson(w, "wait_s", c.wait_s);
        StatsJson(w, "completion_s", c.completion_s);
        Num(w, "gpu_hours", c.gpu_hours);
      });
    });

    ObjectMember(w, "inference", [&] {
      for (const auto& [k, v] :
           {std::pair{"requests", r.requests}, {"completed", r.completed}, {"failed", r.failed},
            {"tokens_served", r.tokens_served}, {"preemptions", r.preemptions},
            {"resumed_streams", r.resumed_streams}}) {
        Member(w, k, int64_t{v});
      }
      StatsJson(w, "ttft_s", r.ttft_s);
      StatsJson(w, "itl_s", r.itl_s);
      StatsJson(w, "e2e_s", r.e2e_s);
      Num(w, "slo_hours_met_fraction", r.slo_hours_met_fraction);
      Member(w, "hours_with_load", r.hours_with_load);
      Member(w, "replicas_max", r.replicas_max);
      Num(w, "gpu_hours", r.inference_gpu_hours);
      ObjectsMember(w, "by_cohort", r.inference_by_cohort, [&](const CohortInference& c) {
        Str(w, "cohort", c.cohort);
        Member(w, "requests", c.requests);
        StatsJson(w, "ttft_s", c.ttft_s);
        StatsJson(w, "itl_s", c.itl_s);
        StatsJson(w, "e2e_s", c.e2e_s);
      });
    });

    ObjectMember(w, "mig", [&] {
      Member(w, "sliced_gpus", r.mig.sliced_gpus);
      Member(w, "flexible_gpus", r.mig.flexible_gpus);
      StatsJson(w, "slice_wait_s", r.mig.slice_wait_s);
      Member(w, "fell_back", r.mig.fell_back);
      Member(w, "layout_changes", r.mig.layout_changes);
      Num(w, "users_per_gpu", r.mig.users_per_gpu);
    });

    ObjectMember(w, "gpus", [&] {
      Member(w, "total", r.jobs.total_gpus);
      Num(w, "allocated_fraction", r.allocated_fraction);
      Num(w, "inference_fraction", r.inference_fraction);
      Num(w, "training_fraction", r.training_fraction);
      Num(w, "busy_fraction", r.busy_fraction);
    });

    int hour = 0;
    ObjectsMember(w, "timeline", r.timeline, [&](const HourPoint& p) {
      Member(w, "hour", hour++);
      Num(w, "inference", p.inference);
      Num(w, "training", p.training);
      Num(w, "idle", p.idle);
      StatsJson(w, "wait_s", p.wait_s);
      w.Key("slo_met");
      if (p.slo_met) {
        w.Bool(*p.slo_met);
      } else {
        w.Null();
      }
    });
    ObjectMember(w, "cdf", [&] {
      CdfJson(w, "ttft_s", r.ttft_cdf);
      CdfJson(w, "wait_s", r.wait_cdf);
    });

    ObjectMember(w, "cost", [&] {
      Str(w, "currency", r.cost.currency);
      Num(w, "cluster_per_month", r.cost.cluster_per_month);
      Opt(w, "per_user_month", r.cost.per_user_month);
      Opt(w, "per_gpu_hour", r.cost.per_gpu_hour);
      Opt(w, "cloud_on_demand_per_user_month", r.cost.cloud_on_demand_per_user_month);
      Opt(w, "cloud_reserved_per_user_month", r.cost.cloud_reserved_per_user_month);
      Opt(w, "gpu_per_user_per_user_month", r.cost.gpu_per_user_per_user_month);
    });

    if (sweep == nullptr) {
      w.Key("sweep");
      w.Null();
    } else {
      ObjectMember(w, "sweep", [&] {
        Str(w, "key", sweep->key);
        ObjectsMember(w, "results", sweep->points, [&](const SweepPoint& p) {
          Num(w, "value", p.value);
          Member(w, "met", p.met);
          Num(w, "slo_hours_met_fraction", p.slo_hours_met_fraction);
          Num(w, "job_wait_p95_s", p.job_wait_p95_s);
          Num(w, "ttft_p99_s", p.ttft_p99_s);
          Opt(w, "per_user_month", p.per_user_month);
        });
        Opt(w, "smallest_meeting", sweep->smallest_meeting);
      });
    }

    ObjectMember(w, "sim", [&] {
      Num(w, "wall_s", r.sim.wall_s);
      Num(w, "simulated_s", r.sim.simulated_s);
      Member(w, "events", r.sim.events);
      Num(w, "simulated_s_per_wall_s", r.sim.wall_s > 0 ? r.sim.simulated_s / r.sim.wall_s : 0);
      Num(w, "events_per_s", r.sim.wall_s > 0 ? r.sim.events / r.sim.wall_s : 0);
      ObjectMember(w, "calibration", [&] {
        Num(w, "launch_delay_s", r.sim.launch_delay_s.value);
        Member(w, "launch_delay_source", r.sim.launch_delay_s.source);
        Num(w, "backfill_interval_s", r.sim.backfill_interval_s.value);
        Member(w, "backfill_interval_source", r.sim.backfill_interval_s.source);
        Member(w, "time_limits", r.sim.time_limits);
      });
    });
  });
}

std::string PlanText(const PlanReport& r, const Sweep* sweep) {
  std::string out = r.verdict + "\n\n";
  auto line = [](const Stats& st) {
    return fmt::format("p50 {:.2f}  p95 {:.2f}  p99 {:.2f}", st.p50, st.p95, st.p99);
  };
  out += fmt::format("Inference: {} requests ({} failed), {} tokens, TTFT s {}; SLO met in {:.0f}% "
                     "of {} hours with load; {} preemptions, {} streams resumed, up to {} replicas\n",
                     r.requests, r.failed, r.tokens_served, line(r.ttft_s),
                     100 * r.slo_hours_met_fraction, r.hours_with_load, r.preemptions,
                     r.resumed_streams, r.replicas_max);
  for (const CohortInference& c : r.inference_by_cohort) {
    out += fmt::format("  {:<14} {:>7} requests  TTFT s {}  ITL ms p50 {:.1f} p99 {:.1f}  e2e s p50 {:.1f} p99 {:.1f}\n",
                       c.cohort, c.requests, line(c.ttft_s), 1000 * c.itl_s.p50, 1000 * c.itl_s.p99,
                       c.e2e_s.p50, c.e2e_s.p99);
  }
  out += fmt::format("Jobs: {} ({} could not run), wait s p50 {:.0f}  p95 {:.0f}  p99 {:.0f}, makespan {:.1f} h\n",
                     r.jobs.count, r.jobs.cannot_run, r.jobs.wait_s.p50, r.jobs.wait_s.p95,
                     r.jobs.wait_s.p99, r.jobs.makespan_s / 3600);
  for (const CohortJobs& c : r.jobs_by_cohort) {
    out += fmt::format("  {:<14} wait s p50 {:.0f} p95 {:.0f} p99 {:.0f}  {:.0f} GPU-hours\n", c.cohort,
                       c.wait_s.p50, c.wait_s.p95, c.wait_s.p99, c.gpu_hours);
  }
  for (const auto& [gpus, st] : r.jobs.wait_by_gpus) {
    out += fmt::format("  {:>2} GPU(s)      {:>6} jobs  wait s p50 {:.0f} p95 {:.0f} p99 {:.0f}  completion s p95 {:.0f}\n",
                       gpus, st.count, st.p50, st.p95, st.p99, r.jobs.completion_by_gpus.at(gpus).p95);
  }
  const MigReport& m = r.mig;
  if (m.sliced_gpus + m.flexible_gpus == 0 && m.fell_back > 0) {
    out += fmt::format("MIG: no GPU is split; {} jobs that fit a slice ran on whole GPUs; {:.2f} "
                       "users per GPU\n",
                       m.fell_back, m.users_per_gpu);
  } else if (m.sliced_gpus + m.flexible_gpus > 0) {
    out += fmt::format("MIG: {} GPUs split, {} following demand ({} layout changes); {} jobs on "
                       "slices, wait s p50 {:.0f} p95 {:.0f} p99 {:.0f}; {} that fit a slice ran "
                       "on whole GPUs; {:.2f} users per GPU\n",
                       m.sliced_gpus, m.flexible_gpus, m.layout_changes, m.slice_wait_s.count,
                       m.slice_wait_s.p50, m.slice_wait_s.p95, m.slice_wait_s.p99, m.fell_back,
                       m.users_per_gpu);
  }
  out += fmt::format("GPUs: {} allocated {:.0f}% (inference {:.0f}%, training {:.0f}%), busy {:.0f}%\n",
                     r.jobs.total_gpus, 100 * r.allocated_fraction, 100 * r.inference_fraction,
                     100 * r.training_fraction, 100 * r.busy_fraction);
  const CostReport& c = r.cost;
  auto money = [&](const std::optional<double>& v) { return v ? Money(c.currency, *v) : std::string("-"); };
  out += fmt::format("Cost: {} a month for the cluster; per user-month {} (cloud on demand {}, "
                     "reserved {}, a GPU each {}); per delivered GPU-hour {}\n",
                     Money(c.currency, c.cluster_per_month), money(c.per_user_month),
                     money(c.cloud_on_demand_per_user_month), money(c.cloud_reserved_per_user_month),
                     money(c.gpu_per_user_per_user_month),
                     c.per_gpu_hour ? fmt::format("{:.2f}", *c.per_gpu_hour) : std::string("-"));
  if (sweep != nullptr) {
    out += fmt::format("Sweep over {}:\n", sweep->key);
    for (const SweepPoint& p : sweep->points) {
      out += fmt::format("  {:>5}: {}  SLO hours {:.0f}%  TTFT p99 {:.2f} s  wait p95 {:.0f} s  per user-month {}\n",
                         p.value, p.met ? "meets   " : "misses  ", 100 * p.slo_hours_met_fraction,
                         p.ttft_p99_s, p.job_wait_p95_s, money(p.per_user_month));
    }
    out += sweep->smallest_meeting
               ? fmt::format("The smallest that meets the SLOs: {} = {}\n", sweep->key, *sweep->smallest_meeting)
               : std::string("None of them meets the SLOs.\n");
  }
  if (r.engine.worst_error) {
    out += fmt::format("Engine: profile {}, within {:.1f}% of {} (ITL and TTFT; `bmas engine calibrate`)\n",
                       r.engine.profile, 100 * *r.engine.worst_error, r.engine.reference);
  } else {
    out += fmt::format("Engine: profile {} (no published figures to calibrate it against)\n",
                       r.engine.profile);
  }
  out += fmt::format("Simulated {:.1f} days in {:.1f} s ({:.0f} simulated s per s, {} events, {:.0f} events/s)\n",
                     r.sim.simulated_s / 86400, r.sim.wall_s,
                     r.sim.wall_s > 0 ? r.sim.simulated_s / r.sim.wall_s : 0, r.sim.events,
                     r.sim.wall_s > 0 ? r.sim.events / r.sim.wall_s : 0);
  if (!r.sim.launch_delay_s.source.empty()) {
    out += fmt::format("Model of Slurm: launch delay {:.2f} s ({}); backfill every {:g} s ({}); "
                       "time limits: {}\n",
                       r.sim.launch_delay_s.value, r.sim.launch_delay_s.source,
                       r.sim.backfill_interval_s.value, r.sim.backfill_interval_s.source,
                       r.sim.time_limits);
  }
  return out;
}

}  // namespace bmas::plan
