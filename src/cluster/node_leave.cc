#include "cluster/node_leave.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>

#include "cluster/node_files.h"
#include "common/config_table.h"
#include "core/cluster.h"

namespace bmas::cluster {
namespace {

namespace fs = std::filesystem;

Error Step(const std::string& step, const Error& e) {
  return Error{e.code, fmt::format("{}: {}", step, e.message), e.param};
}

std::string In(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

// Removes the file at `path` (a link is removed, never followed); true when there was one.
Result<bool> RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) == 0) return true;
  if (errno == ENOENT) return false;
  return Internal(fmt::format("cannot remove {}: {}: remove it by hand, then run `bmas node "
                              "leave` again",
                              path, std::strerror(errno)));
}

}  // namespace

Result<void> DecideLeave(const std::string& host, const Result<NodeInSlurm>& seen, bool force) {
  if (force) return {};
  if (!seen) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot ask Slurm what runs on {} ({}): start munged and slurmd "
                             "again (`bmas node join` with a token), or leave anyway with "
                             "--force (its jobs end)",
                             host, seen.error().message),
                 {}};
  }
  if (!seen->known || seen->jobs == 0) return {};
  const std::string what =
      seen->replicas > 0
          ? fmt::format("{} job(s), {} of them inference replicas", seen->jobs, seen->replicas)
          : fmt::format("{} job(s)", seen->jobs);
  if (!seen->drained) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("{} runs {}: run `bmas node drain {}` on the controller first (its "
                             "replicas move to other nodes), then `bmas node leave` again; "
                             "--force leaves at once and ends them",
                             host, what, host),
                 {}};
  }
  return Error{ErrorCode::kUnavailable,
               fmt::format("{} is drained but still runs {}: wait until it is empty (`bmas node "
                           "drain {} --wait-s 600` on the controller, or `--requeue`), then "
                           "`bmas node leave` again; --force leaves at once and ends them",
                           host, what, host),
               {}};
}

Result<NodeLeaveReport> LeaveNode(const NodeLeaveOptions& o, NodeDaemons& daemons,
                                  NodeSlurm& slurm) {
  NodeLeaveReport report;
  const std::string toml_path = In(o.paths.config_dir, "bmas.toml");
  auto toml = ReadNodeFile(toml_path);
  if (!toml) return Step("reading bmas.toml", toml.error());
  std::optional<Cluster> inventory;
  if (*toml) {
    report.was_joined = true;
    try {
      inventory = ParseCluster((*toml)->contents, toml_path);
    } catch (const ConfigError& e) {
      if (!o.force) {
        return Step("reading bmas.toml",
                    InvalidArgument(fmt::format("{}: without it Slurm cannot be asked what runs "
                                                "here; fix it, or leave anyway with --force",
                                                e.what())));
      }
    }
  }

  std::string slurm_conf;
  NodeInSlurm seen;
  if (inventory) {
    slurm_conf = FetchedSlurmConf(inventory->slurm.spool_dir);
    auto look = slurm.Look(slurm_conf, o.host);
    if (auto ok = DecideLeave(o.host, look, o.force); !ok) return Step("asking Slurm", ok.error());
    if (look) seen = *look;
  }

  for (const char* daemon : {"agent", "slurmd"}) {
    auto stopped = daemons.StopJoined(o.paths, daemon);
    if (!stopped) return Step(fmt::format("stopping {}", daemon), stopped.error());
    if (*stopped) report.stopped.push_back(daemon);
  }
  if (seen.known && seen.dynamic) {
    // munged still runs: scontrol needs it.
    auto deleted = slurm.Delete(slurm_conf, o.host);
    report.deleted_from_slurm = static_cast<bool>(deleted);
    if (!deleted) {
      report.admin_step = fmt::format(
          "Slurm did not delete {} ({}): run `scontrol delete nodename={}` on the controller",
          o.host, deleted.error().message, o.host);
    }
  } else if (seen.known) {
    report.admin_step = fmt::format(
        "{} stays in the controller's slurm.conf (down once slurmctld misses it): to forget it, "
        "remove it from the inventory and slurm.conf there and run `scontrol reconfigure`",
        o.host);
  }
  {
    auto stopped = daemons.StopJoined(o.paths, "munged");
    if (!stopped) return Step("stopping munged", stopped.error());
    if (*stopped) report.stopped.push_back("munged");
  }

  // bmas.toml goes last: until then a second run finds what it needs to finish.
  std::vector<std::string> files = {o.paths.munge_key, In(o.paths.config_dir, "node.key"),
                                    In(o.paths.config_dir, "node.crt"),
                                    In(o.paths.config_dir, "replica.key"),
                                    In(o.paths.config_dir, "replica.crt"),
                                    In(o.paths.config_dir, "ca.crt"), o.paths.OperatorSecret()};
  if (inventory) {
    if (!inventory->slurm.prolog.empty()) files.push_back(inventory->slurm.prolog);
    if (!inventory->slurm.epilog.empty()) files.push_back(inventory->slurm.epilog);
  }
  files.push_back(toml_path);
  for (const std::string& f : files) {
    if (f == toml_path && !slurm_conf.empty()) {
      // The configuration slurmd fetched: a later join waits for a fresh one.
      std::error_code ec;
      const fs::path cache = fs::path(slurm_conf).parent_path();
      if (fs::remove_all(cache, ec) > 0) report.removed.push_back(cache.string());
      if (ec) {
        return Step("removing the node's files",
                    Internal(fmt::format("cannot remove {}: {}: remove it by hand, then run "
                                         "`bmas node leave` again",
                                         cache.string(), ec.message())));
      }
    }
    auto removed = RemoveFile(f);
    if (!removed) return Step("removing the node's files", removed.error());
    if (*removed) report.removed.push_back(f);
  }
  ::rmdir(o.paths.config_dir.c_str());  // only when the join's files were all it held
  return report;
}

}  // namespace bmas::cluster
