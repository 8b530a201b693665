#include "cli/plan_command.h"

#include <chrono>

#include <fmt/format.h>

#include "common/config.h"
#include "plan/jobs_report.h"
#include "plan/scenario.h"
#include "plan/slurm_model.h"
#include "plan/trace.h"

namespace bmas {

void PlanCommand::Register(CLI::App& app, GlobalOptions& global) {
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Capacity planner: simulate a job trace on a cluster inventory (a model of Slurm's "
      "scheduling, in virtual time) and report waits, completions and GPUs allocated");
  cmd->add_option("--scenario", scenario_,
                  "Scenario TOML (examples/plan-300x48.toml): read and checked; its simulation "
                  "of inference beside training is not built yet");
  cmd->add_option("--cluster", cluster_, "Cluster inventory (e.g. examples/cluster-12x4.toml)");
  cmd->add_option("--trace", trace_, "Job trace to replay");
  cmd->add_option("--trace-format", trace_format_, "csv (submit_s,user,gpus,duration_s[,partition]) "
                  "or alibaba-v2023")
      ->check(CLI::IsMember({"csv", "alibaba-v2023"}))
      ->default_str("csv");
  cmd->add_flag("--json", json_, "Print the report as JSON");
  cmd->add_option("--launch-delay", launch_delay_s_,
                  "Seconds from Slurm's decision to the job running (prolog, launch)")
      ->check(CLI::Range(0.0, 3600.0))
      ->default_str("0");
  cmd->add_option("--backfill-interval", backfill_interval_s_,
                  "Seconds between backfill passes (slurm.conf bf_interval)")
      ->check(CLI::Range(0.001, 3600.0))
      ->default_str("1");
  cmd->callback([this, &global] { global.exit_code = Run(global); });
}

int PlanCommand::Run(GlobalOptions&) {
  if (!scenario_.empty()) {
    plan::Scenario scenario = plan::LoadScenario(scenario_, cluster_);
    if (trace_.empty() || cluster_.empty()) {
      fmt::print(stderr,
                 "bmas plan: {} is a valid scenario ({} cohort(s)), but simulating its inference "
                 "and cohorts is not built yet; for now give --cluster FILE --trace FILE to "
                 "simulate a job trace\n",
                 scenario_, scenario.cohorts.size());
      return 2;
    }
  }
  if (cluster_.empty() || trace_.empty()) {
    fmt::print(stderr,
               "bmas plan: give --cluster FILE and --trace FILE (e.g. --cluster "
               "examples/cluster-12x4.toml --trace jobs.csv)\n");
    return 2;
  }
  const Cluster cluster = LoadCluster(cluster_);
  const plan::Trace trace = plan::ReadTrace(trace_, *plan::ParseTraceFormat(trace_format_));
  std::vector<plan::SimJob> jobs;
  jobs.reserve(trace.jobs.size());
  for (size_t i = 0; i < trace.jobs.size(); ++i) {
    const plan::TraceJob& t = trace.jobs[i];
    jobs.push_back(plan::SimJob{.id = static_cast<int64_t>(i) + 1,
                                .user = t.user,
                                .partition = t.partition,
                                .gpus = t.gpus,
                                .submit = TimePoint{t.submit_s},
                                .duration = Duration{t.duration_s}});
  }
  plan::SlurmModelSettings settings;
  settings.launch_delay = Duration{launch_delay_s_};
  settings.backfill_interval = Duration{backfill_interval_s_};
  const auto started = std::chrono::steady_clock::now();
  const plan::SlurmModelResult result = plan::RunSlurmModel(cluster, jobs, settings);
  plan::SimInfo sim;
  sim.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  sim.events = result.events;
  const plan::JobsReport report = plan::ReportJobs(cluster, jobs, result);
  sim.simulated_s = report.makespan_s;
  if (json_) {
    fmt::print("{}\n", plan::JobsPlanJson(report, sim));
  } else {
    fmt::print("{}", plan::JobsPlanText(report, sim));
  }
  return 0;
}

}  // namespace bmas
