// The local cluster's daemons: starting each (and the dead ones again), waiting for them to
// listen and for the nodes to be idle, the ends of their logs when they fail, and stopping them.

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/process.h"
#include "core/mig_relayout.h"
#include "slurm/local_cluster.h"
#include "slurm/local_cluster_internal.h"

namespace bmas::slurm::internal {
namespace {

namespace fs = std::filesystem;

std::string LogTail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "  " + all[i] + "\n";
  }
  return out;
}

}  // namespace

Result<DaemonProcess> StartDaemon(LocalCluster& c, std::string name, std::string comm,
                                std::vector<std::string> args, std::vector<std::string> env,
                                const std::string& file) {
  auto d = StartDaemonProcess(std::move(name), std::move(comm), std::move(args), std::move(env),
                              c.root + "/log/" + file + ".out");
  if (!d) return d.error();
  c.daemons.push_back(*d);
  return d;
}

Error DaemonFailed(const DaemonProcess& d, const std::string& what) {
  return Error{ErrorCode::kUnavailable,
               fmt::format("{} {}; its log {} ends with:\n{}", d.name, what, d.log,
                           LogTail(d.log, 15))};
}

std::vector<std::string> MungedCommand(const Account& munge, const std::string& socket,
                                       const std::string& key, const std::string& dir) {
  return {"setpriv",
          fmt::format("--reuid={}", munge.uid),
          fmt::format("--regid={}", munge.gid),
          "--clear-groups",
          "/usr/sbin/munged",
          "--foreground",
          "--socket=" + socket,
          "--key-file=" + key,
          "--pid-file=" + dir + "/munged.pid",
          "--log-file=" + dir + "/munged.log",
          "--seed-file=" + dir + "/munged.seed"};
}

Result<DaemonProcess> StartSlurmd(LocalCluster& c, const std::string& node) {
  // Its own UTS namespace: the node's jobs see its name as the host name (OpenMPI needs
  // distinct host names).
  return StartDaemon(c, "slurmd " + node, "slurmd",
                     {"unshare", "--uts", "/bin/sh", "-c",
                      "hostname \"$0\" && exec /usr/sbin/slurmd -D -f \"$1\" -N \"$0\"", node,
                      c.conf},
                     {}, "slurmd-" + node);
}

Result<void> MarkStandby(const LocalCluster& c, const std::string& node) {
  // DOWN and drained: ReturnToService=2 returns a DOWN node to service on any answer slurmctld
  // takes for it (seen once for a node whose slurmd had stopped), and a drained one never.
  for (const char* state : {"state=drain", "state=down"}) {
    auto r = RunCommand({"scontrol", "update", "nodename=" + node, state,
                         fmt::format("reason={} (bmas slurm relayout makes it active)",
                                     kStandbyLayoutReason)},
                        SlurmEnv(c), std::chrono::seconds(10));
    if (!r) return r.error();
    if (r->exit_code != 0) {
      return Error{ErrorCode::kUnavailable, fmt::format("scontrol could not mark {} {}: {}", node,
                                                        state + 6, r->err + r->out)};
    }
  }
  return {};
}

Result<LocalCluster> RestartDead(LocalCluster c) {
  for (DaemonProcess& d : c.daemons) {
    if (d.Runs()) continue;
    if (auto started = RestartDaemonProcess(d); !started) return started.error();
    c.restarted.push_back(d.name);
    const int port = d.comm == "slurmctld" ? c.slurmctld_port
                     : d.comm == "slurmrestd" ? c.rest_port
                                              : 0;
    if (port != 0 &&
        !WaitFor([&] { return PortAccepts(port); }, d.pid, std::chrono::seconds(15))) {
      [[maybe_unused]] auto saved = SaveLocalCluster(c);  // the pids that did start
      return DaemonFailed(d, "did not start listening again");
    }
  }
  if (auto saved = SaveLocalCluster(c); !saved) return saved.error();
  return c;
}

void StopDaemons(const LocalCluster& c) {
  for (auto it = c.daemons.rbegin(); it != c.daemons.rend(); ++it) {
    if (!StopDaemonProcess(*it, std::chrono::seconds(5))) {
      spdlog::warn("slurm: {} (pid {}) did not stop", it->name, it->pid);
    }
  }
}

Result<void> StartDaemons(LocalCluster& c, const Account& munge, const Cluster* accounting,
                          std::chrono::seconds timeout) {
  const std::string munge_dir = c.root + "/munge";
  const std::string socket = munge_dir + "/munge.sock";
  auto munged =
      StartDaemon(c, "munged", "munged",
                  MungedCommand(munge, socket, c.root + "/etc/munge.key", munge_dir), {}, "munged");
  if (!munged) return munged.error();
  if (!WaitFor([&] { return fs::exists(socket); }, munged->pid, std::chrono::seconds(10))) {
    return DaemonFailed(*munged, "did not create its socket");
  }

  if (accounting != nullptr) {
    if (auto r = StartAccounting(c, *accounting); !r) return r;
  }

  auto ctld = StartDaemon(c, "slurmctld", "slurmctld", {"/usr/sbin/slurmctld", "-D", "-f", c.conf},
                          {}, "slurmctld");
  if (!ctld) return ctld.error();
  if (!WaitFor([&] { return PortAccepts(c.slurmctld_port); }, ctld->pid,
               std::chrono::seconds(15))) {
    return DaemonFailed(*ctld, "did not start listening");
  }
  if (accounting != nullptr) {
    if (auto r = SetGpuCaps(c, *accounting); !r) return r;
  }

  // Standby layout nodes have no slurmd: DOWN, with a reason that says why.
  for (const std::string& node : c.standby) {
    if (auto down = MarkStandby(c, node); !down) return down;
  }
  for (const std::string& node : c.nodes) {
    if (auto slurmd = StartSlurmd(c, node); !slurmd) return slurmd.error();
  }

  // slurmrestd refuses to run as root; tokens name the user each request acts for.
  auto rest = StartDaemon(
      c, "slurmrestd", "slurmrestd",
      {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/sbin/slurmrestd",
       "-a", "rest_auth/jwt", "-s",
       // With slurmdbd, also its API: finished jobs, for accounting.
       c.accounting ? "openapi/v0.0.38,openapi/dbv0.0.38" : "openapi/v0.0.38",
       fmt::format("127.0.0.1:{}", c.rest_port)},
      {"SLURM_JWT=daemon", "SLURM_CONF=" + c.conf}, "slurmrestd");
  if (!rest) return rest.error();
  if (!WaitFor([&] { return PortAccepts(c.rest_port); }, rest->pid, std::chrono::seconds(10))) {
    return DaemonFailed(*rest, "did not start listening");
  }

  std::string last;
  bool idle = WaitFor(
      [&] {
        auto states = NodeStates(c);
        if (!states) {
          last = states.error().message;
          return false;
        }
        std::map<std::string, std::string> state_of(states->begin(), states->end());
        last.clear();
        bool all_idle = true;
        for (const std::string& node : c.nodes) {
          const std::string state = state_of.contains(node) ? state_of[node] : "missing";
          last += fmt::format("{}{} {}", last.empty() ? "" : ", ", node, state);
          all_idle = all_idle && state == "idle";
        }
        return all_idle;
      },
      0, timeout);
  if (!idle) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("the nodes were not all idle within {} s ({}); see the slurmd logs "
                             "in {}/log",
                             timeout.count(), last, c.root)};
  }
  return {};
}

}  // namespace bmas::slurm::internal
