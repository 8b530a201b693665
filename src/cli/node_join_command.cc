#include "cli/node_join_command.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "cluster/join_token.h"
#include "cluster/node_join.h"
#include "cluster/node_leave.h"
#include "common/config.h"
#include "common/process.h"
#include "daemon/service_account.h"
#include "daemon/services.h"
#include "doctor/checks.h"

namespace bmas {
namespace {

std::string FileText(const char* path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// The doctor's checks that a join needs to pass (`bmas doctor` runs them all): the kernel, the
// cgroups and Slurm's version. The hardware checks are the cluster's business, not the join's.
std::vector<doctor::Check> JoinChecks() {
  std::vector<doctor::Check> checks;
  utsname u{};
  uname(&u);
  checks.push_back(doctor::KernelCheck(u.release));
  std::string controllers = FileText("/sys/fs/cgroup/cgroup.controllers");
  if (auto nl = controllers.find('\n'); nl != std::string::npos) controllers.resize(nl);
  checks.push_back(doctor::CgroupCheck(FileText("/proc/self/mounts"), controllers));
  doctor::ToolRun slurmd;
  auto r = RunCommand({"/usr/sbin/slurmd", "-V"}, {}, std::chrono::seconds(10));
  if (!r || r->exit_code == 127) {
    slurmd.error = r ? "/usr/sbin/slurmd not found" : r.error().message;
  } else {
    slurmd.ran = true;
    slurmd.exit_code = r->exit_code;
    slurmd.output = r->out.empty() ? r->err : r->out;
  }
  checks.push_back(doctor::SlurmCheck(slurmd));
  return checks;
}

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  return name;
}

// Refused for anyone but root, with why.
int RequireRoot(const char* command, const char* why) {
  return ReportFailure(command, Error{ErrorCode::kPermissionDenied,
                                      fmt::format("only root {}: run it as root, e.g. with sudo",
                                                  why),
                                      {}});
}

// What `lxd up` said during the join, indented under it.
void PrintLxd(const std::string& said) {
  std::istringstream lines(said);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) fmt::print("  lxd up: {}\n", line);
  }
}

}  // namespace

void NodeJoinCommand::Register(CLI::App& app, GlobalOptions& global) {
  auto named = app.get_subcommands([](CLI::App* a) { return a->get_name() == "node"; });
  CLI::App* node = named.empty() ? nullptr : named.front();
  if (node == nullptr) {
    node = app.add_subcommand("node", "This machine as a node of a cluster");
    node->require_subcommand(1);
  }
  CLI::App* join = node->add_subcommand(
      "join",
      "Join the cluster whose controller printed TOKEN (`bmas cluster init` or `bmas cluster "
      "token`): fetch its keys and files over TLS, start munged, a configless slurmd, LXD "
      "(when the cluster's bmas.toml sets [lxd] listen; it trusts the nodes that joined before) "
      "and the agent. Root only; running it again is harmless");
  join->add_option("TOKEN", token_, "The join token, bmas1.<...>")->required();
  join->add_option("--host", host_, "This node's name in the inventory (default: its host name)");
  join->add_option("--address", address_,
                   "This node's address (default: the one that routes to the controller)");
  join->add_flag("--dynamic", dynamic_,
                 "Register as a Slurm dynamic node (slurmd -Z), its resources from the inventory");
  join->add_option("--config-dir", config_dir_, "Where bmas.toml and the node's certificate go")
      ->capture_default_str();
  join->add_option("--munge-key", munge_key_, "Where the munge key goes")->capture_default_str();
  join->add_option("--image-cache", image_cache_,
                   "Where the default workspace image is imported from when LXD has none (copy "
                   "the controller's cached image here)")
      ->capture_default_str();
  join->add_option("--timeout-s", timeout_s_, "How long the controller may take to answer")
      ->check(kPositive)
      ->capture_default_str();
  join->callback([this, &global] { global.exit_code = Join(global); });

  CLI::App* leave = node->add_subcommand(
      "leave",
      "Take this node out of its cluster (root): refused while it runs jobs it was not drained "
      "of (`bmas node drain NODE` on the controller first); stops the agent, slurmd and munged "
      "that `node join` started, deletes a dynamic node from Slurm and removes the join's files. "
      "Workspaces and LXD stay. Running it again is harmless");
  leave->add_option("--host", host_, "This node's name in Slurm (default: its host name)");
  leave->add_option("--config-dir", config_dir_, "Where `node join` put bmas.toml")
      ->capture_default_str();
  leave->add_option("--munge-key", munge_key_, "Where `node join` put the munge key")
      ->capture_default_str();
  leave->add_flag("--force", force_,
                  "Leave even though jobs run there or Slurm cannot be asked (they end)");
  leave->callback([this, &global] { global.exit_code = Leave(global); });
}

int NodeJoinCommand::Join(GlobalOptions& global) {
  if (geteuid() != 0) {
    return RequireRoot("node join",
                       "joins a node (it installs the munge key and starts slurmd)");
  }
  Env& env = global.services->env();
  const auto now = static_cast<int64_t>(env.UnixNow());
  auto token = cluster::ParseJoinToken(token_, now);
  if (!token) return ReportFailure("node join", token.error());
  bool checks_pass = true;
  for (const doctor::Check& c : JoinChecks()) {
    if (c.ok) continue;
    checks_pass = false;
    fmt::print(stderr, "bmas node join: the doctor's check {} failed: needs {}, found {}{}\n",
               c.name, c.required, c.found, c.fix.empty() ? "" : "; fix: " + c.fix);
  }
  if (!checks_pass) return 1;
  cluster::NodeJoinOptions options;
  if (host_.empty()) host_ = HostName();
  options.host = host_;
  options.address = address_;
  options.dynamic = dynamic_;
  options.paths.config_dir = config_dir_;
  options.paths.munge_key = munge_key_;
  options.paths.image_cache = image_cache_;
  options.paths.state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  options.timeout = std::chrono::seconds(timeout_s_);
  options.replica_account = kServiceAccount;
  auto daemons = global.services->NodeDaemons();
  auto report = cluster::JoinNode(*token, options, *daemons, now);
  if (!report) return ReportFailure("node join", report.error());
  if (report->already_joined) {
    fmt::print("{} had already joined the cluster at {}: nothing fetched\n", host_, token->address);
  } else {
    fmt::print("{} joined the cluster at {}\n", host_, token->address);
  }
  for (const auto& f : report->written) fmt::print("  wrote {}\n", f);
  for (const auto& f : report->removed) fmt::print("  removed {}\n", f);
  for (const auto& d : report->started) fmt::print("  started {}\n", d);
  PrintLxd(report->lxd);
  if (!report->image.empty()) fmt::print("  image: {}\n", report->image);
  if (report->written.empty() && report->removed.empty() && report->started.empty()) {
    fmt::print("  nothing to do\n");
  }
  for (const auto& n : report->notes) fmt::print("  note: {}\n", n);
  return 0;
}

int NodeJoinCommand::Leave(GlobalOptions& global) {
  if (geteuid() != 0) {
    return RequireRoot("node leave", "takes a node out (it stops slurmd and removes its keys)");
  }
  cluster::NodeLeaveOptions options;
  options.host = host_.empty() ? HostName() : host_;
  options.force = force_;
  options.paths.config_dir = config_dir_;
  options.paths.munge_key = munge_key_;
  options.paths.state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  auto daemons = global.services->NodeDaemons();
  auto slurm = global.services->NodeSlurm();
  auto report = cluster::LeaveNode(options, *daemons, *slurm);
  if (!report) return ReportFailure("node leave", report.error());
  if (!report->was_joined && report->stopped.empty() && report->removed.empty()) {
    fmt::print("{} is not in a cluster ({}/bmas.toml is absent): nothing to do\n", options.host,
               config_dir_);
    return 0;
  }
  fmt::print("{} left its cluster\n", options.host);
  for (const auto& d : report->stopped) fmt::print("  stopped {}\n", d);
  if (report->deleted_from_slurm) fmt::print("  deleted {} from Slurm\n", options.host);
  for (const auto& f : report->removed) fmt::print("  removed {}\n", f);
  fmt::print("  workspaces and LXD stay; `bmas node join TOKEN` joins again\n");
  if (!report->admin_step.empty()) fmt::print("  left to do: {}\n", report->admin_step);
  return 0;
}

}  // namespace bmas
