#include "plan/scenario.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>

#include "autoscale/timetable.h"
#include "common/config_table.h"
#include "core/mig.h"
#include "core/hostlist.h"
#include "engine/timing.h"
#include "plan/text_file.h"

namespace bmas::plan {

namespace {

constexpr std::array<std::string_view, 7> kDays = {"mon", "tue", "wed", "thu", "fri", "sat", "sun"};
constexpr double kYearSeconds = 366 * 24 * 3600.0;

// ConfigTable::RejectUnknownKeys, pointing at the documented example for the keys there are.
void RejectUnknownKeys(const ConfigTable& t) {
  try {
    t.RejectUnknownKeys();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{} (examples/plan-300x48.toml documents every key)", e.what()));
  }
}

// `file` taken from the folder of the scenario `source`, unless absolute or empty.
std::string Resolve(const std::string& source, const std::string& file) {
  if (file.empty() || std::filesystem::path(file).is_absolute()) return file;
  return (std::filesystem::path(source).parent_path() / file).lexically_normal().string();
}

bool IsName(std::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  });
}

int IntIn(ConfigTable& t, std::string_view key, int fallback, int min, int max) {
  return static_cast<int>(t.Int(key, fallback, min, max));
}

Duration SecondsIn(ConfigTable& t, std::string_view key, Duration fallback, double min,
                   double max) {
  return Duration{t.Double(key, fallback.count(), min, max)};
}

// days, start_hour and end_hour of a table.
WeeklyWindow ReadWindow(ConfigTable& t) {
  WeeklyWindow w;
  if (t.Has("days")) {
    w.days.clear();
    for (const std::string& name : t.StringArray("days")) {
      auto it = std::find(kDays.begin(), kDays.end(), name);
      if (it == kDays.end()) {
        t.Invalid(
            "days",
            fmt::format("\"{}\" is not a day: give mon, tue, wed, thu, fri, sat or sun", name));
      }
      const int day = static_cast<int>(it - kDays.begin());
      if (std::find(w.days.begin(), w.days.end(), day) != w.days.end()) {
        t.Invalid("days", fmt::format("\"{}\" is given twice", name));
      }
      w.days.push_back(day);
    }
    if (w.days.empty()) {
      t.Invalid("days",
                "is empty: name the days, e.g. [\"tue\", \"thu\"], or leave it out for all");
    }
    std::sort(w.days.begin(), w.days.end());
  }
  w.start_hour = t.Double("start_hour", w.start_hour, 0, 24);
  w.end_hour = t.Double("end_hour", w.end_hour, 0, 24);
  if (w.end_hour <= w.start_hour) {
    t.Invalid("end_hour", fmt::format("{} is not after start_hour {}: a window ends by midnight "
                                      "(24); write one that crosses it as two",
                                      w.end_hour, w.start_hour));
  }
  return w;
}

std::vector<ActivityWindow> ReadHours(ConfigTable& cohort) {
  if (!cohort.Has("hours")) return Cohort{}.hours;
  std::vector<ActivityWindow> hours;
  for (ConfigTable& t : cohort.TableArray("hours")) {
    ActivityWindow a;
    a.window = ReadWindow(t);
    a.active_fraction = t.Double("active_fraction", a.active_fraction, 0, 1);
    RejectUnknownKeys(t);
    hours.push_back(std::move(a));
  }
  if (hours.empty()) {
    cohort.Invalid("hours",
                   "is empty: give at least one { days = [...], start_hour = 9, "
                   "end_hour = 17, active_fraction = 0.5 }, or leave it out for weekdays "
                   "09-17");
  }
  return hours;
}

void ReadInference(ConfigTable& t, InferenceBehaviour& b) {
  b.sessions_per_hour = t.Double("sessions_per_hour", b.sessions_per_hour, 0, 3600);
  b.requests_per_session = t.Double("requests_per_session", b.requests_per_session, 1, 10000);
  b.think_time_s = t.Double("think_time_s", b.think_time_s, 0, 86400);
  b.prompt_tokens = IntIn(t, "prompt_tokens", b.prompt_tokens, 1, 1 << 20);
  b.output_tokens = IntIn(t, "output_tokens", b.output_tokens, 1, 1 << 20);
  b.length_spread = t.Double("length_spread", b.length_spread, 0, 1);
  b.system_prompt_tokens = IntIn(t, "system_prompt_tokens", b.system_prompt_tokens, 0, 1 << 20);
  b.system_prompts = IntIn(t, "system_prompts", b.system_prompts, 1, 1 << 16);
  b.carry_history = t.Bool("carry_history", b.carry_history);
  RejectUnknownKeys(t);
}

void ReadTraining(ConfigTable& t, TrainingBehaviour& b) {
  b.jobs_per_week = t.Double("jobs_per_week", b.jobs_per_week, 0, 1e6);
  if (t.Has("gpus_per_job")) {
    b.gpus_per_job.clear();
    double total = 0;
    for (ConfigTable& g : t.TableArray("gpus_per_job")) {
      GpuShare s;
      s.gpus = IntIn(g, "gpus", s.gpus, 1, 65536);
      s.share = g.Double("share", s.share, 0, 1);
      s.mig_profile = g.String("mig_profile", s.mig_profile);
      if (!s.mig_profile.empty() && !IsMigProfileName(s.mig_profile)) {
        g.Invalid("mig_profile", fmt::format("\"{}\" is not a MIG profile; name one as the "
                                             "inventory's layouts do, e.g. \"1g.10gb\"",
                                             s.mig_profile));
      }
      s.mig_duration_factor = g.Double("mig_duration_factor", s.mig_duration_factor, 0.01, 100);
      RejectUnknownKeys(g);
      total += s.share;
      b.gpus_per_job.push_back(s);
    }
    if (b.gpus_per_job.empty() || std::abs(total - 1) > 1e-6) {
      t.Invalid("gpus_per_job", fmt::format("the shares add up to {:g}: make them add up to 1, "
                                            "e.g. [{{ gpus = 1, share = 0.8 }}, {{ gpus = 4, "
                                            "share = 0.2 }}]",
                                            total));
    }
  }
  b.duration_median_s = t.Double("duration_median_s", b.duration_median_s, 1, kYearSeconds);
  b.duration_p90_s = t.Double("duration_p90_s", b.duration_p90_s, 1, kYearSeconds);
  if (b.duration_p90_s < b.duration_median_s) {
    t.Invalid("duration_p90_s", fmt::format("{:g} is below duration_median_s {:g}: the 90th "
                                            "percentile is at least the median",
                                            b.duration_p90_s, b.duration_median_s));
  }
  b.time_limit_s = t.Double("time_limit_s", b.time_limit_s, 0, kYearSeconds);
  b.partition = t.String("partition", b.partition);
  RejectUnknownKeys(t);
}

Cohort ReadCohort(ConfigTable& t, const std::vector<Cohort>& earlier) {
  Cohort c;
  c.line = t.line();
  c.name = t.String("name", "");
  if (c.name.empty()) t.Invalid("name", "required: the cohort's name, e.g. \"students\"");
  if (!IsName(c.name)) {
    t.Invalid("name", fmt::format("\"{}\" is not a cohort name: give one of lower-case letters, "
                                  "digits, '-' and '_', e.g. \"students\"",
                                  c.name));
  }
  for (const Cohort& e : earlier) {
    if (e.name == c.name) t.Invalid("name", fmt::format("\"{}\" names two cohorts", c.name));
  }
  c.count = IntIn(t, "count", c.count, 1, 1000000);
  c.hours = ReadHours(t);
  if (auto i = t.Table("inference")) ReadInference(*i, c.inference);
  if (auto j = t.Table("training")) ReadTraining(*j, c.training);
  RejectUnknownKeys(t);
  return c;
}

void ReadEngine(ConfigTable& t, const std::string& source, EngineChoice& e) {
  e.line = t.line();
  e.model = t.String("model", e.model);
  if (e.model.empty()) t.Invalid("model", "is empty: name the model the replicas serve");
  e.profile = t.String("profile", e.profile);
  e.profiles_file = Resolve(source, t.String("profiles_file", e.profiles_file));
  const engine::ProfileMap& builtin = engine::BuiltinProfiles();
  if (e.profiles_file.empty() && !builtin.contains(e.profile)) {
    std::vector<std::string_view> names;
    for (const auto& [name, profile] : builtin) names.push_back(name);
    t.Invalid("profile", fmt::format("\"{}\" is not a built-in profile ({}): name one, or give "
                                     "profiles_file with yours",
                                     e.profile, fmt::join(names, ", ")));
  }
  e.gpus_per_replica = IntIn(t, "gpus_per_replica", e.gpus_per_replica, 1, 64);
  RejectUnknownKeys(t);
}

void ReadAutoscale(ConfigTable& t, autoscale::AutoscaleSettings& a) {
  a.min_replicas = IntIn(t, "min_replicas", a.min_replicas, 0, 4096);
  a.max_replicas = IntIn(t, "max_replicas", a.max_replicas, 0, 4096);
  if (a.max_replicas != 0 && a.max_replicas < a.min_replicas) {
    t.Invalid("max_replicas", fmt::format("{} is below min_replicas {}: raise it, or give 0 for as "
                                          "many as the cluster holds",
                                          a.max_replicas, a.min_replicas));
  }
  a.ttft_slo_ms = t.Double("ttft_slo_ms", a.ttft_slo_ms, 0, 3.6e6);
  a.max_in_flight_per_replica =
      IntIn(t, "max_in_flight_per_replica", a.max_in_flight_per_replica, 1, 1 << 20);
  a.target_utilization = t.Double("target_utilization", a.target_utilization, 0.01, 1);
  a.scale_up_utilization = t.Double("scale_up_utilization", a.scale_up_utilization, 0.01, 1);
  a.scale_down_utilization = t.Double("scale_down_utilization", a.scale_down_utilization, 0.01, 1);
  if (a.scale_down_utilization >= a.scale_up_utilization) {
    t.Invalid("scale_down_utilization",
              fmt::format("{:g} is not below scale_up_utilization {:g}: the gap between them "
                          "keeps the replica count from flapping",
                          a.scale_down_utilization, a.scale_up_utilization));
  }
  a.load_window = SecondsIn(t, "load_window_s", a.load_window, 1, 86400);
  a.burst_window = SecondsIn(t, "burst_window_s", a.burst_window, 0.1, 3600);
  a.burst_utilization = t.Double("burst_utilization", a.burst_utilization, 0.01, 10);
  a.queue_wait_breach = SecondsIn(t, "queue_wait_breach_s", a.queue_wait_breach, 0, 86400);
  a.startup_allowance = SecondsIn(t, "startup_allowance_s", a.startup_allowance, 0, 86400);
  a.breach_settle = SecondsIn(t, "breach_settle_s", a.breach_settle, 0, 86400);
  a.scale_down_idle = SecondsIn(t, "scale_down_idle_s", a.scale_down_idle, 0, 7 * 86400);
  a.scale_down_step = SecondsIn(t, "scale_down_step_s", a.scale_down_step, 0, 86400);
  RejectUnknownKeys(t);
}

// Whether `user` is "<cohort>-<i>" for one of `cohorts`.
bool IsMember(const std::vector<Cohort>& cohorts, std::string_view user) {
  const size_t dash = user.rfind('-');
  if (dash == std::string_view::npos) return false;
  std::string_view number = user.substr(dash + 1);
  int i = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), i);
  if (ec != std::errc() || end != number.data() + number.size() || number.starts_with('0')) {
    return false;
  }
  return std::any_of(cohorts.begin(), cohorts.end(), [&](const Cohort& c) {
    return c.name == user.substr(0, dash) && i >= 1 && i <= c.count;
  });
}

ResearchWindow ReadResearch(ConfigTable& t, const std::vector<Cohort>& cohorts,
                            bool users_from_trace) {
  ResearchWindow r;
  r.line = t.line();
  r.users = t.StringArray("users");
  if (r.users.empty()) {
    t.Invalid("users",
              "required: who owns the nodes, e.g. [\"researchers-1\"] (cohort members "
              "are named <cohort>-1 .. <cohort>-<count>)");
  }
  for (const std::string& user : r.users) {
    if (!users_from_trace && !IsMember(cohorts, user)) {
      t.Invalid("users", fmt::format("\"{}\" is no cohort's member: members are named "
                                     "<cohort>-1 .. <cohort>-<count>, e.g. \"researchers-1\"",
                                     user));
    }
  }
  const std::string hosts = t.String("nodes", "");
  Result<std::vector<std::string>> nodes = ExpandHostlist(hosts);
  if (hosts.empty()) t.Invalid("nodes", "required: the nodes they own, e.g. \"oss[11-12]\"");
  if (!nodes) t.Invalid("nodes", nodes.error().message);
  r.nodes = std::move(*nodes);
  r.window = ReadWindow(t);
  RejectUnknownKeys(t);
  return r;
}

void ReadPolicies(ConfigTable& t, const std::vector<Cohort>& cohorts, bool users_from_trace,
                  Policies& p) {
  p.line = t.line();
  p.fairness = t.String("fairness", p.fairness, {"vtc", "none"});
  p.routing = t.String("routing", p.routing,
                       {"cache_aware", "prefix_affinity", "least_load", "round_robin"});
  p.reserve_fraction = t.Double("reserve_fraction", p.reserve_fraction, 0, 0.9);
  p.queue_timeout_s = t.Double("queue_timeout_s", p.queue_timeout_s, 0.001, 86400);
  p.inference_partition = t.String("inference_partition", p.inference_partition);
  p.floor_partition = t.String("floor_partition", p.floor_partition);
  if (auto a = t.Table("autoscale")) ReadAutoscale(*a, p.autoscale);
  p.fill_max_replicas = p.autoscale.max_replicas == 0;
  p.timetable = autoscale::ReadTimetable(t, "timetable");
  p.timetable_lead_s = t.Double("timetable_lead_s", p.timetable_lead_s, 0,
                                autoscale::kMaxTimetableLead.count());
  if (p.autoscale.max_replicas != 0) {
    if (auto valid = autoscale::ValidateTimetable(p.timetable, p.autoscale.max_replicas); !valid) {
      t.Invalid("timetable", valid.error().message + " (max_replicas of [policies.autoscale])");
    }
  }
  for (ConfigTable& r : t.TableArray("research")) {
    p.research.push_back(ReadResearch(r, cohorts, users_from_trace));
  }
  if (auto m = t.Table("mig")) {
    p.relayout.every_s = m->Double("every_s", p.relayout.every_s, 0.1, 86400);
    p.relayout.min_wait_s = IntIn(*m, "min_wait_s", static_cast<int>(p.relayout.min_wait_s), 0, 86400);
    p.relayout.hold_s = IntIn(*m, "hold_s", static_cast<int>(p.relayout.hold_s), 0, 86400);
    p.relayout.delay_s = m->Double("delay_s", p.relayout.delay_s, 0, 3600);
    RejectUnknownKeys(*m);
  }
  RejectUnknownKeys(t);
}

void ReadSlo(ConfigTable& t, Slo& s) {
  s.ttft_p95_s = t.Double("ttft_p95_s", s.ttft_p95_s, 0.001, 3600);
  s.ttft_p99_s = t.Double("ttft_p99_s", s.ttft_p99_s, 0.001, 3600);
  if (s.ttft_p99_s < s.ttft_p95_s) {
    t.Invalid("ttft_p99_s", fmt::format("{:g} is below ttft_p95_s {:g}: the p99 objective is at "
                                        "least the p95 one",
                                        s.ttft_p99_s, s.ttft_p95_s));
  }
  s.job_wait_p95_s = t.Double("job_wait_p95_s", s.job_wait_p95_s, 0, kYearSeconds);
  s.hours_met_fraction = t.Double("hours_met_fraction", s.hours_met_fraction, 0, 1);
  RejectUnknownKeys(t);
}

void ReadCosts(ConfigTable& t, Costs& c) {
  c.currency = t.String("currency", c.currency);
  if (c.currency.empty())
    t.Invalid("currency", "is empty: give the prices' currency, e.g. \"USD\"");
  c.node_price = t.Double("node_price", c.node_price, 0, 1e9);
  c.amortisation_years = t.Double("amortisation_years", c.amortisation_years, 0.1, 50);
  c.node_power_kw = t.Double("node_power_kw", c.node_power_kw, 0, 1000);
  c.pue = t.Double("pue", c.pue, 1, 5);
  c.price_per_kwh = t.Double("price_per_kwh", c.price_per_kwh, 0, 100);
  c.staff_per_year = t.Double("staff_per_year", c.staff_per_year, 0, 1e9);
  c.cloud_on_demand_per_gpu_hour =
      t.Double("cloud_on_demand_per_gpu_hour", c.cloud_on_demand_per_gpu_hour, 0, 10000);
  c.cloud_reserved_per_gpu_hour =
      t.Double("cloud_reserved_per_gpu_hour", c.cloud_reserved_per_gpu_hour, 0, 10000);
  c.gpu_per_user_price = t.Double("gpu_per_user_price", c.gpu_per_user_price, 0, 1e7);
  c.gpu_per_user_power_kw = t.Double("gpu_per_user_power_kw", c.gpu_per_user_power_kw, 0, 100);
  RejectUnknownKeys(t);
}

Scenario ReadRoot(const toml::table& root, const std::string& source,
                  const std::string& cluster_file) {
  Scenario s;
  s.source = source;
  ConfigTable top(root, source, "");
  s.cluster_file = Resolve(source, top.String("cluster", ""));
  if (auto t = top.Table("simulation")) {
    s.simulation.days = t->Double("days", s.simulation.days, 0.25, 366);
    s.simulation.seed = static_cast<uint64_t>(t->Int(
        "seed", static_cast<int64_t>(s.simulation.seed), 0, std::numeric_limits<int64_t>::max()));
    RejectUnknownKeys(*t);
  }
  if (auto t = top.Table("engine")) ReadEngine(*t, source, s.engine);
  for (ConfigTable& t : top.TableArray("cohorts")) s.cohorts.push_back(ReadCohort(t, s.cohorts));
  if (auto t = top.Table("trace")) {
    s.trace.file = Resolve(source, t->String("file", s.trace.file));
    s.trace.format = *ParseTraceFormat(t->String(
        "format", std::string(TraceFormatName(s.trace.format)), {"csv", "alibaba-v2023"}));
    s.trace.start_s = t->Double("start_s", s.trace.start_s, 0, 1e12);
    RejectUnknownKeys(*t);
  }
  if (auto t = top.Table("policies")) {
    ReadPolicies(*t, s.cohorts, !s.trace.file.empty(), s.policies);
  }
  if (auto t = top.Table("slo")) ReadSlo(*t, s.slo);
  if (auto t = top.Table("cost")) ReadCosts(*t, s.costs);
  RejectUnknownKeys(top);
  if (!cluster_file.empty()) {
    s.cluster_file = cluster_file;
    AttachCluster(s, LoadCluster(cluster_file));
  } else if (!s.cluster_file.empty()) {
    Cluster c;
    try {
      c = LoadCluster(s.cluster_file);
    } catch (const ConfigError& e) {
      top.Invalid("cluster", e.what());
    }
    AttachCluster(s, std::move(c));
  }
  return s;
}

}  // namespace

Scenario ParseScenario(std::string_view toml_text, const std::string& source,
                       const std::string& cluster_file) {
  toml::table root;
  try {
    root = toml::parse(toml_text, std::string_view(source));
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("{}:{}: {}", source, e.source().begin.line, e.description()));
  }
  return ReadRoot(root, source, cluster_file);
}

Scenario LoadScenario(const std::string& path, const std::string& cluster_file) {
  if (!path.empty()) return ParseScenario(ReadTextFile(path, "scenario file"), path, cluster_file);
  Scenario s;
  s.cluster_file = cluster_file;
  if (!cluster_file.empty()) AttachCluster(s, LoadCluster(cluster_file));
  return s;
}

}  // namespace bmas::plan
