#include "cli/node_commands.h"

#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "autoscale/controller.h"
#include "cli/slurm_target.h"
#include "common/json_object.h"
#include "common/process.h"
#include "daemon/service_account.h"
#include "daemon/services.h"
#include "slurm/node_drain.h"
#include "slurm/node_view.h"

namespace bmas {
namespace {

bool IsReplica(const JobInfo& j) {
  return j.user == kServiceAccount && autoscale::ParseReplicaJobName(j.name).has_value();
}

std::string Me() {
  passwd* pw = getpwuid(geteuid());
  return pw != nullptr ? pw->pw_name : "root";
}

// SLURM_CONF of the target (a local cluster's), or "" for the system's.
std::string SlurmConf(const SlurmTarget& t) {
  for (const std::string& e : t.env) {
    if (e.starts_with("SLURM_CONF=")) return e.substr(std::string("SLURM_CONF=").size());
  }
  return "";
}

Result<std::vector<slurm::NodeRow>> Rows(SlurmApi& slurm) {
  auto nodes = slurm.Nodes();
  if (!nodes) return nodes.error();
  auto jobs = slurm.Jobs();
  if (!jobs) return jobs.error();
  return slurm::NodeRows(*nodes, *jobs, IsReplica);
}

const slurm::NodeRow* Find(const std::vector<slurm::NodeRow>& rows, const std::string& name) {
  for (const slurm::NodeRow& r : rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

Error NoSuchNode(const std::string& name, const std::vector<slurm::NodeRow>& rows) {
  std::vector<std::string> names;
  for (const slurm::NodeRow& r : rows) names.push_back(r.name);
  return InvalidArgument(fmt::format("Slurm has no node '{}' (it has {}; `bmas node list`)", name,
                                     fmt::join(names, ", ")));
}

// What drain and resume start from: root, the cluster's Slurm, and the node Slurm knows.
struct RootOnNode {
  SlurmTarget target;
  std::unique_ptr<SlurmApi> slurm;
  slurm::NodeRow row;
};

Result<RootOnNode> ForRoot(GlobalOptions& global, const std::string& verb, const std::string& name) {
  if (geteuid() != 0) {
    return Error{ErrorCode::kPermissionDenied, fmt::format("only root {} nodes (sudo)", verb)};
  }
  auto target = ResolveSlurm(global, "root");
  if (!target) return target.error();
  RootOnNode out{std::move(*target), nullptr, {}};
  out.slurm = global.services->Slurm(out.target.endpoint);
  auto rows = Rows(*out.slurm);
  if (!rows) return rows.error();
  const slurm::NodeRow* row = Find(*rows, name);
  if (row == nullptr) return NoSuchNode(name, *rows);
  out.row = *row;
  return out;
}

}  // namespace

void NodeCommands::Register(CLI::App& app, GlobalOptions& global) {
  node_ = app.add_subcommand("node", "The cluster's nodes: list them, drain one for maintenance "
                                     "and resume it");
  node_->require_subcommand(1);
  CLI::App* list = node_->add_subcommand("list", "Every node: Slurm's state, GPUs in use, jobs "
                                                 "and inference replicas there, why it is drained");
  list->add_flag("--json", json_, "One JSON array");
  list->callback([this, &global] { global.exit_code = List(global); });
  CLI::App* drain = node_->add_subcommand(
      "drain", "Stop new jobs on NODE (root): its inference replicas move to other nodes (a "
               "replacement serves before each goes), running jobs end as they would (or are "
               "requeued with --requeue), workspaces stay");
  drain->add_option("NODE", name_, "The node, as Slurm names it")->required();
  drain->add_option("--reason", reason_, "Why, for `sinfo -R` and `bmas node list`");
  drain->add_flag("--requeue", requeue_,
                  "Requeue the training jobs running there now (they start again elsewhere, from "
                  "their beginning or last checkpoint)");
  drain->add_option("--wait-s", wait_s_,
                    "Wait up to this many seconds for the node to be empty (exit 1 if it is not)")
      ->check(kNonNegative);
  drain->callback([this, &global] { global.exit_code = Drain(global); });
  CLI::App* resume = node_->add_subcommand("resume", "Return a drained NODE to service (root)");
  resume->add_option("NODE", name_, "The node, as Slurm names it")->required();
  resume->callback([this, &global] { global.exit_code = Resume(global); });
}

int NodeCommands::List(GlobalOptions& global) {
  auto target = ResolveSlurm(global, Me());
  if (!target) return ReportFailure("node list", target.error());
  auto rows = Rows(*global.services->Slurm(target->endpoint));
  if (!rows) return ReportFailure("node list", rows.error());
  if (json_) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartArray();
    for (const slurm::NodeRow& r : *rows) {
      w.StartObject();
      Member(w, "name", r.name);
      Member(w, "address", r.address);
      Member(w, "state", r.state);
      Member(w, "drained", r.drained);
      Member(w, "gpus", r.gpus);
      Member(w, "gpus_used", r.gpus_used);
      Member(w, "jobs", r.jobs);
      Member(w, "replicas", r.replicas);
      Member(w, "reason", r.reason);
      w.Key("partitions");
      w.StartArray();
      for (const std::string& p : r.partitions) w.String(p.c_str());
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
    fmt::print("{}\n", buf.GetString());
    return 0;
  }
  fmt::print("{:<12} {:<16} {:<16} {:>9} {:>5} {:>9}  {}\n", "NODE", "ADDRESS", "STATE", "GPUS",
             "JOBS", "REPLICAS", "REASON");
  for (const slurm::NodeRow& r : *rows) {
    fmt::print("{:<12} {:<16} {:<16} {:>9} {:>5} {:>9}  {}\n", r.name, r.address, r.state,
               fmt::format("{}/{}", r.gpus_used, r.gpus), r.jobs, r.replicas, r.reason);
  }
  return 0;
}

int NodeCommands::Drain(GlobalOptions& global) {
  auto on = ForRoot(global, "drains", name_);
  if (!on) return ReportFailure("node drain", on.error());
  const SlurmTarget* target = &on->target;
  SlurmApi* slurm = on->slurm.get();
  const slurm::NodeRow* row = &on->row;
  const std::string reason =
      fmt::format("bmas node drain: {}", reason_.empty() ? "maintenance" : reason_);
  if (auto d = slurm::DrainNode(SlurmConf(*target), name_, reason); !d) {
    return ReportFailure("node drain", d.error());
  }
  fmt::print("{}: drained in Slurm ({}); no new job starts there\n", name_, reason);
  if (row->replicas > 0) {
    fmt::print("  {} inference replica(s) there move: the controller starts each one's "
               "replacement on another node, then drains it in the gateway\n",
               row->replicas);
  }
  if (requeue_) {
    auto jobs = slurm->Jobs();
    if (!jobs) return ReportFailure("node drain", jobs.error());
    for (int64_t id : slurm::JobsToRequeue(*jobs, name_, IsReplica)) {
      std::vector<std::string> env = target->env;
      auto r = RunCommand({"scontrol", "requeue", std::to_string(id)}, env, std::chrono::seconds(15));
      if (!r || r->exit_code != 0) {
        fmt::print(stderr, "bmas node drain: job {} could not be requeued ({}); it runs to its end\n",
                   id, r ? r->err : r.error().message);
        continue;
      }
      fmt::print("  requeued job {}\n", id);
    }
  } else if (row->jobs > row->replicas) {
    fmt::print("  {} other job(s) there run to their end (--requeue restarts them elsewhere)\n",
               row->jobs - row->replicas);
  }
  fmt::print("  workspaces stay; `bmas node resume {}` returns it to service\n", name_);
  if (wait_s_ <= 0) return 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s_);
  while (true) {
    auto now_rows = Rows(*slurm);
    const slurm::NodeRow* r = now_rows ? Find(*now_rows, name_) : nullptr;
    if (r != nullptr && r->jobs == 0) {
      fmt::print("{}: empty\n", name_);
      return 0;
    }
    if (std::chrono::steady_clock::now() >= until) {
      return ReportFailure(
          "node drain",
          Error{ErrorCode::kUnavailable,
                fmt::format("{} still runs {} job(s) after {:.0f} s (`squeue -w {}`; --requeue "
                            "restarts training jobs elsewhere)",
                            name_, r != nullptr ? r->jobs : -1, wait_s_, name_)});
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

int NodeCommands::Resume(GlobalOptions& global) {
  auto on = ForRoot(global, "resumes", name_);
  if (!on) return ReportFailure("node resume", on.error());
  if (!on->row.drained) {
    fmt::print("{} is not drained ({}); nothing to do\n", name_, on->row.state);
    return 0;
  }
  if (auto r = slurm::ResumeNode(SlurmConf(on->target), name_); !r) {
    return ReportFailure("node resume", r.error());
  }
  fmt::print("{}: back in service; new jobs and replicas may start there\n", name_);
  return 0;
}

}  // namespace bmas
