#include "cli/plan_command.h"

#include <algorithm>
#include <chrono>
#include <fstream>

#include <pwd.h>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/slurm_target.h"
#include "common/config.h"
#include "daemon/services.h"
#include "engine/timing.h"
#include "plan/cluster_sim.h"
#include "plan/html_report.h"
#include "plan/jobs_report.h"
#include "plan/plan_report.h"
#include "plan/sweep.h"
#include "plan/scenario.h"
#include "plan/slurm_model.h"
#include "plan/trace.h"
#include "slurm/slurm_config.h"

namespace bmas {
namespace {

// How far back slurmdbd's history is read, and how long each request may take: `bmas plan`
// must not wait long for a Slurm that does not answer.
constexpr int64_t kHistoryS = 7 * 86400;
constexpr std::chrono::seconds kSlurmDeadline{3};

// The jobs Slurm recorded, as the planner reads them. A requeued job's times are of its
// last start only: it is not counted as a launch (its GPUs still count as taken).
std::vector<plan::RecordedJob> RecordedJobs(const std::vector<JobInfo>& jobs) {
  std::vector<plan::RecordedJob> out;
  for (const JobInfo& j : jobs) {
    out.push_back({.submit_s = j.submit_time,
                   .eligible_s = j.eligible_time,
                   .start_s = j.start_time,
                   .end_s = j.end_time,
                   .gpus = j.gpus,
                   .allocated = !j.nodes.empty() && j.restart_count == 0});
  }
  return out;
}

}  // namespace

void PlanCommand::Register(CLI::App& app, GlobalOptions& global) {
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Capacity planner: simulate the cluster's week in virtual time (chat sessions through the "
      "gateway and autoscaled replicas, jobs through a model of Slurm) and report latency, "
      "waits, GPUs by path, costs and a verdict");
  cmd->add_option("--scenario", scenario_,
                  "Scenario TOML (examples/plan-300x48.toml): cluster, cohorts, policies, SLOs, "
                  "costs");
  cmd->add_option("--cluster", cluster_,
                  "Cluster inventory (e.g. examples/cluster-12x4.toml); replaces the scenario's");
  cmd->add_option("--trace", trace_, "Job trace to replay; replaces the cohorts' training jobs");
  cmd->add_option("--trace-format", trace_format_, "csv (submit_s,user,gpus,duration_s[,partition]) "
                  "or alibaba-v2023")
      ->check(CLI::IsMember({"csv", "alibaba-v2023"}))
      ->default_str("csv");
  cmd->add_flag("--json", json_, "Print the report as JSON");
  cmd->add_option("--html", html_,
                  "Also write the report as one self-contained HTML file with plots (no network "
                  "needed to view it)");
  cmd->add_option("--sweep", sweep_,
                  "Run the scenario once per value and give the smallest that meets the SLOs: "
                  "gpus=24,32,48 or users=200,300,400");
  cmd->add_option("--seed", seed_, "Seed of the scenario's random draws (default: its [simulation] seed)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 62));
  cmd->add_option("--launch-delay", launch_delay_s_,
                  "Seconds from a job's submission on free GPUs to its first instruction "
                  "(Slurm's next scheduling pass, the prolog, the launch); default: from the "
                  "finished jobs of the Slurm bmas talks to (the local cluster, or --config's "
                  "slurmrestd), else what bmas's local Slurm measures, 0.95 s")
      ->check(CLI::Range(0.0, 3600.0))
      ->default_str("from the cluster's history");
  cmd->add_option("--time-limit", time_limit_s_,
                  "Seconds of time limit every trace job asks for (sbatch --time), which "
                  "backfill plans with; 0: its own duration, a perfect estimate; default: the "
                  "trace's time_limit_s column, else each job's duration")
      ->check(CLI::Range(0.0, 1e9))
      ->default_str("the trace's");
  cmd->add_option("--backfill-interval", backfill_interval_s_,
                  "Seconds between backfill passes; default: bf_interval in the slurm.conf "
                  "`bmas slurm config` writes for the cluster")
      ->check(CLI::Range(0.001, 3600.0))
      ->default_str("slurm.conf's");
  cmd->callback([this, &global] { global.exit_code = Run(global); });
}

int PlanCommand::RunScenario(const Clock& clock, const plan::Calibrated& launch) {
  plan::Scenario scenario = plan::LoadScenario(scenario_, cluster_);
  if (!scenario.cluster) {
    fmt::print(stderr, "bmas plan: {} names no cluster: set `cluster = \"FILE\"` in it or give "
                       "--cluster FILE\n", scenario_);
    return 2;
  }
  if (seed_ >= 0) scenario.simulation.seed = static_cast<uint64_t>(seed_);
  std::optional<std::vector<plan::SimJob>> trace_jobs;
  if (!trace_.empty()) {
    trace_jobs = plan::TraceJobs(plan::ReadTrace(trace_, *plan::ParseTraceFormat(trace_format_)));
  } else if (!scenario.trace.file.empty()) {
    trace_jobs = plan::TraceJobs(plan::ReadTrace(scenario.trace.file, scenario.trace.format),
                                 scenario.trace.start_s);
  }
  std::string time_limits;
  if (trace_jobs) time_limits = ApplyTimeLimits(*trace_jobs);
  const engine::ProfileMap profiles = engine::LoadProfiles(scenario.engine.profiles_file);
  const auto profile = profiles.find(scenario.engine.profile);
  if (profile == profiles.end()) {
    fmt::print(stderr, "bmas plan: no engine profile '{}'\n", scenario.engine.profile);
    return 2;
  }
  const plan::Calibrated backfill = BackfillInterval(*scenario.cluster, scenario.cluster_file);
  plan::PlanSettings settings;
  settings.slurm.launch_delay = Duration{launch.value};
  settings.slurm.backfill_interval = Duration{backfill.value};
  settings.inference.launch_delay_s = launch.value;
  auto run = [&](const plan::Scenario& s) {
    const TimePoint started = clock.Now();
    plan::PlanRun r =
        plan::RunPlan(s, profile->second, trace_jobs ? &*trace_jobs : nullptr, settings);
    r.wall_s = (clock.Now() - started).count();
    plan::PlanReport report = plan::BuildPlanReport(s, r);
    report.engine = plan::CalibrateProfile(profile->second);
    report.sim.launch_delay_s = launch;
    report.sim.backfill_interval_s = backfill;
    report.sim.time_limits =
        trace_jobs ? time_limits
                   : "each cohort's training time_limit_s (0: the job's duration, a perfect estimate)";
    return report;
  };
  std::optional<plan::Sweep> sweep;
  if (!sweep_.empty()) {
    const plan::SweepSpec spec = plan::ParseSweep(sweep_);
    sweep.emplace();
    sweep->key = spec.key;
    for (int v : spec.values) {
      const plan::PlanReport r = run(plan::SweepScenario(scenario, spec, v));
      sweep->points.push_back({.value = static_cast<double>(v),
                               .met = r.met,
                               .slo_hours_met_fraction = r.slo_hours_met_fraction,
                               .job_wait_p95_s = r.jobs.wait_s.p95,
                               .ttft_p99_s = r.ttft_s.p99,
                               .per_user_month = r.cost.per_user_month});
      if (r.met && (!sweep->smallest_meeting || v < *sweep->smallest_meeting)) {
        sweep->smallest_meeting = v;
      }
    }
  }
  const plan::PlanReport report = run(scenario);
  const plan::Sweep* sw = sweep ? &*sweep : nullptr;
  const std::string json = plan::PlanJson(scenario, report, sw);
  if (!WriteHtml(json)) return 1;
  if (json_) {
    fmt::print("{}\n", json);
  } else {
    fmt::print("{}", plan::PlanText(report, sw));
  }
  return 0;
}

std::string PlanCommand::ApplyTimeLimits(std::vector<plan::SimJob>& jobs) const {
  if (time_limit_s_ >= 0) {
    for (plan::SimJob& j : jobs) j.time_limit = Duration{time_limit_s_};
    return time_limit_s_ > 0 ? fmt::format("--time-limit {:g} s for every job", time_limit_s_)
                             : "--time-limit 0: each job's duration (a perfect estimate)";
  }
  const bool any = std::any_of(jobs.begin(), jobs.end(),
                               [](const plan::SimJob& j) { return j.time_limit.count() > 0; });
  return any ? "the trace's time_limit_s (a job without one: its duration)"
             : "each job's duration (a perfect estimate: the trace gives no time limits)";
}

plan::Calibrated PlanCommand::BackfillInterval(const Cluster& cluster,
                                               const std::string& file) const {
  if (backfill_interval_s_ > 0) return {backfill_interval_s_, "--backfill-interval"};
  const auto files = slurm::RenderSlurmConfig(cluster);
  return plan::BackfillIntervalOf(
      files.at("slurm.conf"),
      fmt::format("the slurm.conf `bmas slurm config` writes for {}",
                  file.empty() ? std::string("the cluster") : file));
}

plan::Calibrated PlanCommand::LaunchDelay(GlobalOptions& global) const {
  if (launch_delay_s_ >= 0) return plan::LaunchDelayOf(launch_delay_s_);
  const passwd* me = getpwuid(geteuid());
  auto target = ResolveSlurm(global, me != nullptr ? me->pw_name : "root");
  if (!target) {
    return plan::LaunchDelayOf(-1, target.error().message);
  }
  plan::JobHistory history;
  history.where =
      fmt::format("slurmrestd at {}:{}", target->endpoint.host, target->endpoint.port);
  auto client = global.services->Slurm(target->endpoint, kSlurmDeadline);
  auto nodes = client->Nodes();
  if (!nodes) {
    return plan::LaunchDelayOf(
        -1, fmt::format("{} did not answer: {}", history.where, nodes.error().message));
  }
  for (const NodeInfo& n : *nodes) history.cluster_gpus += n.gpus;
  // slurmdbd's history when slurmrestd serves it, else the jobs slurmctld still remembers.
  auto jobs = client->AccountedJobs(kHistoryS);
  if (!jobs) jobs = client->Jobs();
  if (!jobs) {
    return plan::LaunchDelayOf(
        -1, fmt::format("{} gave no jobs: {}", history.where, jobs.error().message));
  }
  history.jobs = RecordedJobs(*jobs);
  const auto conf = slurm::RenderSlurmConfig(target->inventory);
  history.backfill_interval_s = plan::BackfillIntervalOf(conf.at("slurm.conf"), "").value;
  return plan::LaunchDelayFromHistory(history);
}

bool PlanCommand::WriteHtml(const std::string& json) const {
  if (html_.empty()) return true;
  std::ofstream out(html_, std::ios::binary | std::ios::trunc);
  out << plan::PlanHtml(json);
  out.close();
  if (!out) {
    fmt::print(stderr, "bmas plan: cannot write the HTML report to {}: check that its folder "
                       "exists and is writable\n", html_);
    return false;
  }
  return true;
}

int PlanCommand::Run(GlobalOptions& global) {
  const Env& env = global.services->env();
  if (!scenario_.empty()) return RunScenario(env, LaunchDelay(global));
  if (!sweep_.empty()) {
    fmt::print(stderr, "bmas plan: --sweep needs --scenario FILE\n");
    return 2;
  }
  if (cluster_.empty() || trace_.empty()) {
    fmt::print(stderr,
               "bmas plan: give --scenario FILE (e.g. examples/plan-300x48.toml), or --cluster "
               "FILE and --trace FILE (e.g. --cluster examples/cluster-12x4.toml --trace "
               "jobs.csv)\n");
    return 2;
  }
  const Cluster cluster = LoadCluster(cluster_);
  const plan::Trace trace = plan::ReadTrace(trace_, *plan::ParseTraceFormat(trace_format_));
  std::vector<plan::SimJob> jobs = plan::TraceJobs(trace);
  plan::SimInfo sim;
  sim.time_limits = ApplyTimeLimits(jobs);
  sim.launch_delay_s = LaunchDelay(global);
  sim.backfill_interval_s = BackfillInterval(cluster, cluster_);
  plan::SlurmModelSettings settings;
  settings.launch_delay = Duration{sim.launch_delay_s.value};
  settings.backfill_interval = Duration{sim.backfill_interval_s.value};
  const TimePoint started = env.Now();
  const plan::SlurmModelResult result = plan::RunSlurmModel(cluster, jobs, settings);
  sim.wall_s = (env.Now() - started).count();
  sim.events = result.events;
  const plan::JobsReport report = plan::ReportJobs(cluster, jobs, result);
  sim.simulated_s = report.makespan_s;
  const std::string json = plan::JobsPlanJson(report, sim);
  if (!WriteHtml(json)) return 1;
  if (json_) {
    fmt::print("{}\n", json);
  } else {
    fmt::print("{}", plan::JobsPlanText(report, sim));
  }
  return 0;
}

}  // namespace bmas
