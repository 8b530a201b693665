#include "cli/inference_commands.h"

#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <toml++/toml.h>

#include "autoscale/replica_job.h"
#include "autoscale/timetable.h"
#include "cli/slurm_target.h"
#include "cli/user_commands.h"
#include "cluster/cluster_files.h"
#include "common/config_table.h"
#include "common/json_object.h"
#include "core/job_shape.h"
#include "daemon/secret.h"
#include "daemon/inference_controller.h"

namespace bmas {
namespace {

// "1 GPU", "2 GPUs", "1 MIG slice 3g.40gb".
std::string ReplicaGpus(const Deployment& d) {
  const std::string plural = d.gpus_per_replica == 1 ? "" : "s";
  return d.gpu_slice.empty()
             ? fmt::format("{} GPU{}", d.gpus_per_replica, plural)
             : fmt::format("{} MIG slice{} {}", d.gpus_per_replica, plural, d.gpu_slice);
}

// "; timetable Mon-Fri 09:00-12:00 min=3, Sat 10:00-12:00 min=1", or "".
std::string TimetableText(const Deployment& d) {
  std::string out;
  for (const TimetableFloor& f : d.timetable) {
    out += fmt::format("{}{}", out.empty() ? "; timetable " : ", ",
                       autoscale::FormatTimetableFloor(f));
  }
  return out;
}

}  // namespace

Result<std::vector<TimetableFloor>> ReadDeployTimetable(const std::vector<std::string>& floors,
                                                        const std::string& file) {
  std::vector<TimetableFloor> out;
  for (const std::string& text : floors) {
    auto f = autoscale::ParseTimetableFloor(text);
    if (!f) return InvalidArgument("--timetable: " + f.error().message, "timetable");
    out.push_back(*f);
  }
  if (file.empty()) return out;
  try {
    const toml::table doc = toml::parse_file(file);
    ConfigTable root(doc, file, "");
    if (auto d = root.Table("deployment")) {
      for (const TimetableFloor& f : autoscale::ReadTimetable(*d, "timetable")) out.push_back(f);
      d->RejectUnknownKeys();
    }
    root.RejectUnknownKeys();
  } catch (const toml::parse_error& e) {
    return InvalidArgument(fmt::format("--timetable-file {}:{}: {}", file,
                                       e.source().begin.line, e.description()),
                           "timetable");
  } catch (const ConfigError& e) {
    return InvalidArgument(fmt::format("--timetable-file {} (it holds only "
                                       "[[deployment.timetable]] tables)",
                                       e.what()),
                           "timetable");
  }
  return out;
}

void InferenceCommands::Register(CLI::App& app, GlobalOptions& global) {
  CLI::App* inference = app.add_subcommand(
      "inference", "Inference deployments: models served by replicas that run as Slurm jobs in "
                   "the inference partition, grown and shrunk with load by `bmas up`");
  inference->require_subcommand(1);
  deploy_ = inference->add_subcommand(
      "deploy", "Create or update the deployment of MODEL (the controller in `bmas up` follows "
                "within seconds)");
  deploy_->add_option("model", flags_.model, "Model name, as clients ask for it")->required();
  deploy_->add_option("--min", flags_.min_replicas,
                      "Replicas always kept, never preempted by training (0: started by the "
                      "first request)")
      ->check(kNonNegative)
      ->default_str("1");
  deploy_->add_option("--max", flags_.max_replicas, "Most replicas under load")
      ->check(kPositive)
      ->default_str("1");
  deploy_->add_option("--gpus-per-replica", gpus_per_replica_,
                      "GPUs of one replica, on one node (vLLM's --tensor-parallel-size); or MIG "
                      "slices: 3g.40gb, 2x3g.40gb")
      ->check([](const std::string& text) {
        ShapeRequest scratch;
        auto parsed = ParseGpusOption(text, scratch);
        if (!parsed) return parsed.error().message;
        return scratch.gpus >= 1 ? std::string()
                                 : fmt::format("must be at least 1 (got {})", text);
      })
      ->default_str("1");
  deploy_->add_option("--profile", flags_.profile,
                      "The engine's GPU profile (bmas engine --profile), {profile} in the command")
      ->default_str("llama-3.1-8b-h100");
  deploy_->add_option("--ttft-slo-ms", flags_.ttft_slo_ms,
                      "Time to first token whose p95 the autoscaler keeps under (0: none; it "
                      "then scales on queueing and load)")
      ->check(kNonNegative)
      ->default_str("0");
  deploy_->add_option(
      "--command", flags_.command,
      "The replica's command; {model} {port} {gpus} {profile} {host} {bmas} are replaced. "
      "Default: bmas engine (simulated); for vLLM see the README");
  deploy_->add_option("--timetable", timetable_,
                      "A weekly floor above --min, in the controller's local time: "
                      "\"Mon-Fri 09:00-12:00 min=3\"; repeat for more (the highest in force "
                      "holds). Its replicas start 120 s ahead (controller --timetable-lead)");
  deploy_->add_option("--timetable-file", timetable_file_,
                      "TOML with [[deployment.timetable]] days = \"Mon-Fri\", from = \"09:00\", "
                      "to = \"12:00\", min = 3")
      ->check(CLI::ExistingFile);
  deploy_->add_flag("--if-missing", if_missing_,
                    "Leave a deployment of MODEL that exists as it is (what `bmas up` does)");
  deploy_->callback([this, &global] { global.exit_code = Deploy(global); });

  CLI::App* list = inference->add_subcommand("list", "Deployments and their replicas");
  list->add_flag("--json", json_, "A JSON array, one object per deployment");
  list->callback([this, &global] { global.exit_code = List(global); });

  CLI::App* remove = inference->add_subcommand(
      "remove", "Remove MODEL's deployment; the controller cancels its replicas");
  remove->add_option("model", flags_.model, "Model name")->required();
  remove->callback([this, &global] { global.exit_code = Remove(global); });

  CLI::App* controller = inference->add_subcommand(
      "controller",
      "Run the control loop that keeps deployments' replicas running as Slurm jobs of this "
      "account, sized to the gateway's load (`bmas up` runs it as the service account)");
  controller->add_option("--gateway", gateways_,
                         "host:port of the gateway's operator listener, for /load; repeat it for "
                         "each gateway of the deployments (gateways that share a PostgreSQL "
                         "store): load adds up, and a replica sleeps or stops only once every "
                         "gateway has drained it")
      ->required();
  controller->add_option("--interval", interval_s_, "Seconds between passes")
      ->check(CLI::Range(0.1, 60.0))
      ->default_str("2");
  controller->add_option("--port-base", port_base_,
                         "Replicas listen on the lowest free port from here (1000 ports)")
      ->check(CLI::Range(1024, 64535))
      ->default_str("18100");
  controller->add_option("--listen-host", listen_host_, "The address replicas bind ({host})")
      ->default_str(listen_host_);
  controller->add_option(
      "--replica-tls", replica_tls_dir_,
      "Replicas serve TLS with DIR/replica.crt and DIR/replica.key on their node (what `bmas "
      "node join` writes in /etc/bmas), and the gateways reach them at https://NODE:PORT: for "
      "replicas on other machines");
  controller->add_option("--replica-ca", replica_ca_,
                         "The CA the replicas' certificates are checked against when the "
                         "controller wakes them or puts them to sleep (default: the state "
                         "dir's replica-ca.crt, which `bmas cluster init` writes)");
  controller->add_option("--scale-down-idle", scale_down_idle_s_,
                         "Seconds of low load before a replica goes (then one a minute at most)")
      ->check(CLI::Range(1.0, 86400.0))
      ->default_str("300");
  controller->add_option("--load-window", load_window_s_,
                         "Seconds over which the load is averaged (an exponential moving average)")
      ->check(CLI::Range(1.0, 3600.0))
      ->default_str("60");
  controller->add_option("--breach-settle", breach_settle_s_,
                         "Seconds a TTFT breach waits for a replica that just became ready")
      ->check(CLI::Range(0.0, 3600.0))
      ->default_str("30");
  controller->add_option("--timezone", timezone_,
                         "The tz database zone of deployments' timetable floors (Europe/Berlin); "
                         "default: the machine's ($TZ, else /etc/localtime)");
  controller->add_option("--timetable-lead", timetable_lead_s_,
                         "Seconds before a timetable floor's start that its replicas start (a "
                         "cold start's time)")
      ->check(CLI::Range(0.0, 86400.0))
      ->default_str("120");
  controller->add_flag("--cancel-on-exit", cancel_on_exit_,
                       "Cancel every replica job on SIGTERM/SIGINT (as `bmas up` stops)");
  controller->callback([this, &global] { global.exit_code = Controller(global); });
}

int InferenceCommands::Controller(GlobalOptions& global) {
  global.SetUpLogging();
  const Config config = global.LoadConfigOrDefaults();
  const std::string state_dir = ResolveStateDir(global.state_dir, config);
  passwd* pw = getpwuid(geteuid());
  InferenceControllerOptions o;
  o.user = pw != nullptr ? pw->pw_name : "root";
  o.gateways = gateways_;
  if (!o.gateways.empty()) {
    auto secret = EnsureOperatorSecret(state_dir);
    if (!secret) {
      fmt::print(stderr, "bmas inference controller: reading the gateway's /load: {}\n",
                 secret.error().message);
      return 1;
    }
    o.operator_secret = std::move(*secret);
  }
  o.interval = std::chrono::milliseconds(static_cast<int64_t>(interval_s_ * 1000));
  o.settings.port_base = port_base_;
  o.listen_host = listen_host_;
  if (!replica_tls_dir_.empty()) {
    const std::filesystem::path dir(replica_tls_dir_);
    o.replica_tls_cert = (dir / "replica.crt").string();
    o.replica_tls_key = (dir / "replica.key").string();
    o.replica_ca = replica_ca_.empty() ? cluster::ReplicaCaPath(state_dir) : replica_ca_;
  }
  o.cancel_on_exit = cancel_on_exit_;
  o.settings.scale_down_idle = Duration(scale_down_idle_s_);
  o.settings.load_window = Duration(load_window_s_);
  o.settings.breach_settle = Duration(breach_settle_s_);
  auto zone = autoscale::TimeZone::Named(timezone_);
  if (!zone) return ReportFailure("inference controller", zone.error());
  o.settings.timezone = *zone;
  o.settings.timetable_lead = Duration(timetable_lead_s_);
  o.bmas = std::filesystem::read_symlink("/proc/self/exe").string();
  o.replica_dir = (std::filesystem::path(state_dir) / "replicas").string();
  std::error_code ec;
  std::filesystem::create_directories(o.replica_dir, ec);
  // `bmas up`'s backend secret: each replica gets a key of its own derived from it.
  if (const char* key = std::getenv("BMAS_BACKEND_API_KEY"); key != nullptr && *key != '\0') {
    o.backend_secret = key;
  }
  auto store = OpenStateStore(global);
  if (!store) return ReportFailure("inference controller", store.error());
  auto resolve = [&global, user = o.user]() -> Result<RestEndpoint> {
    auto target = ResolveSlurm(global, user);
    if (!target) return target.error();
    return target->endpoint;
  };
  return RunInferenceController(o, resolve, **store);
}

int InferenceCommands::Deploy(GlobalOptions& global) {
  if (deploy_->count("--profile") == 0) flags_.profile = "llama-3.1-8b-h100";
  ShapeRequest gpus;
  if (auto parsed = ParseGpusOption(gpus_per_replica_, gpus); !parsed) {
    return ReportFailure("inference deploy", parsed.error());
  }
  flags_.gpus_per_replica = gpus.gpus;
  flags_.gpu_slice = gpus.mig_profile;
  if (auto valid = autoscale::ValidateDeployment(flags_); !valid) {
    return ReportFailure("inference deploy", valid.error());
  }
  auto timetable = ReadDeployTimetable(timetable_, timetable_file_);
  if (!timetable) return ReportFailure("inference deploy", timetable.error());
  flags_.timetable = std::move(*timetable);
  if (auto valid = autoscale::ValidateTimetable(flags_.timetable, flags_.max_replicas); !valid) {
    return ReportFailure("inference deploy", valid.error());
  }
  auto store = OpenStateStore(global);
  if (!store) return ReportFailure("inference deploy", store.error());
  if (if_missing_) {
    auto existing = (*store)->ListDeployments();
    if (!existing) return ReportFailure("inference deploy", existing.error());
    for (const Deployment& d : *existing) {
      if (d.model != flags_.model) continue;
      fmt::print("{} is deployed already (min {}, max {}); left as it is\n", d.model,
                 d.min_replicas, d.max_replicas);
      return 0;
    }
  }
  if (auto put = (*store)->PutDeployment(flags_); !put) {
    return ReportFailure("inference deploy", put.error());
  }
  fmt::print("deployed {}: {} to {} replicas of {}{}{}; `bmas up` runs them as Slurm jobs "
             "in the inference partition (see `bmas inference list`)\n",
             flags_.model, flags_.min_replicas, flags_.max_replicas, ReplicaGpus(flags_),
             flags_.ttft_slo_ms > 0 ? fmt::format(", TTFT p95 under {} ms", flags_.ttft_slo_ms)
                                    : std::string(),
             TimetableText(flags_));
  return 0;
}

std::string DeploymentsJson(const std::vector<Deployment>& deployments,
                            const std::vector<ReplicaRecord>& replicas) {
  return JsonObjectArray(deployments, [&](JsonWriter& w, const Deployment& d) {
    Member(w, "model", d.model);
    Member(w, "min", d.min_replicas);
    Member(w, "max", d.max_replicas);
    Member(w, "gpus_per_replica", d.gpus_per_replica);
    Member(w, "gpu_slice", d.gpu_slice);
    Member(w, "profile", d.profile);
    Member(w, "ttft_slo_ms", d.ttft_slo_ms);
    ObjectsMember(w, "timetable", d.timetable, [&](const TimetableFloor& f) {
          Member(w, "days", autoscale::FormatDays(f.days));
          Member(w, "from", autoscale::FormatMinute(f.from_minute));
          Member(w, "to", autoscale::FormatMinute(f.to_minute));
      Member(w, "min", f.min);
    });
    auto its = [&](const ReplicaRecord& r) { return r.model == d.model; };
    ObjectsMemberWhere(w, "replicas", replicas, its, [&](const ReplicaRecord& r) {
      Member(w, "job_id", r.job_id);
      Member(w, "state", ReplicaStateName(r.state));
      Member(w, "node", r.node);
      Member(w, "url", r.url);
      Member(w, "gpus", r.gpus);
      Member(w, "floor", r.floor);
    });
  });
}

int InferenceCommands::List(GlobalOptions& global) {
  auto store = OpenStateStore(global);
  if (!store) return ReportFailure("inference list", store.error());
  auto deployments = (*store)->ListDeployments();
  if (!deployments) return ReportFailure("inference list", deployments.error());
  auto replicas = (*store)->ListReplicas();
  if (!replicas) return ReportFailure("inference list", replicas.error());
  if (json_) {
    fmt::print("{}\n", DeploymentsJson(*deployments, *replicas));
    return 0;
  }
  if (deployments->empty()) {
    fmt::print("no deployments (add one with `bmas inference deploy MODEL`)\n");
    return 0;
  }
  for (const Deployment& d : *deployments) {
    fmt::print("{}: min {} max {}, {} per replica, profile {}{}{}\n", d.model,
               d.min_replicas, d.max_replicas, ReplicaGpus(d), d.profile,
               d.ttft_slo_ms > 0 ? fmt::format(", TTFT p95 SLO {} ms", d.ttft_slo_ms) : "",
               TimetableText(d));
    bool any = false;
    for (const ReplicaRecord& r : *replicas) {
      if (r.model != d.model) continue;
      any = true;
      fmt::print("  job {:<8} {:<9} {:<8} {:<26} {} GPU(s){}\n", r.job_id,
                 ReplicaStateName(r.state), r.node.empty() ? "-" : r.node,
                 r.url.empty() ? "-" : r.url, r.gpus,
                 r.floor                              ? ", floor"
                 : r.state == ReplicaState::kSleeping ? ", asleep: holds its GPU, gets no "
                                                        "requests, woken when load rises"
                                                      : "");
    }
    if (!any) fmt::print("  no replicas (the controller in `bmas up` starts them)\n");
  }
  return 0;
}

int InferenceCommands::Remove(GlobalOptions& global) {
  auto store = OpenStateStore(global);
  if (!store) return ReportFailure("inference remove", store.error());
  if (auto r = (*store)->RemoveDeployment(flags_.model); !r) {
    return ReportFailure("inference remove", r.error());
  }
  fmt::print("removed {}; its replicas are cancelled at the controller's next pass\n",
             flags_.model);
  return 0;
}

}  // namespace bmas
