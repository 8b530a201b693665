#include "cli/slurm_target.h"

#include <unistd.h>

#include <fmt/format.h>

#include "cluster/cluster_files.h"
#include "common/config.h"
#include "common/config_table.h"
#include "common/process.h"
#include "daemon/services.h"
#include "slurm/jwt.h"
#include "slurm/local_cluster.h"

namespace bmas {

Result<SlurmTarget> ResolveSlurm(GlobalOptions& global, const std::string& user) {
  SlurmTarget t;
  Config config = global.LoadConfigOrDefaults();
  const std::string state_dir = ResolveStateDir(global.state_dir, config);
  auto local = slurm::ReadLocalCluster(state_dir);
  try {
    if (local) {
      t.inventory = local->inventory.empty() ? slurm::BuiltinLocalCluster()
                                             : LoadCluster(local->inventory);
      t.endpoint.port = static_cast<uint16_t>(local->rest_port);
      t.env.push_back("SLURM_CONF=" + local->conf);
      t.jwt_key = local->jwt_key;
    } else if (!global.config_file.empty()) {
      t.inventory = LoadCluster(global.config_file);
      if (t.inventory.slurm.slurmrestd.empty()) {
        return InvalidArgument(fmt::format(
            "{} gives no [cluster.slurm] slurmrestd (\"https://HOST:PORT\" or a loopback "
            "\"host:port\"), and no local cluster runs "
            "in {} (`bmas slurm up` starts one)",
            global.config_file, state_dir));
      }
      // An https slurmrestd is checked against the cluster's CA unless the config names one.
      const std::string ca = t.inventory.slurm.slurmrestd_ca.empty()
                                 ? cluster::ClusterDir(state_dir) + "/ca.crt"
                                 : t.inventory.slurm.slurmrestd_ca;
      auto address = ParseSlurmRestd(t.inventory.slurm.slurmrestd, ca);
      if (!address) return address.error();
      t.endpoint = *address;
      t.jwt_key = t.inventory.slurm.jwt_key;
    } else {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("no Slurm to talk to: no local cluster runs in {} (`bmas slurm "
                               "up` starts one) and no --config names a [cluster]",
                               state_dir)};
    }
  } catch (const ConfigError& e) {
    return InvalidArgument(e.what());
  }
  t.endpoint.user = user;
  // Root mints tokens with the cluster's key; others ask slurmctld for one of their own.
  auto token =
      access(t.jwt_key.c_str(), R_OK) == 0
          ? MintSlurmJwtFromKeyFile(t.jwt_key, user,
                                    static_cast<int64_t>(global.services->env().UnixNow()), 3600)
          : Result<std::string>(Error{ErrorCode::kPermissionDenied, ""});
  if (!token) {
    auto r = RunCommand({"scontrol", "token", "lifespan=3600"}, t.env, std::chrono::seconds(10));
    if (!r || r->exit_code != 0 || r->out.find("SLURM_JWT=") == std::string::npos) {
      return Error{ErrorCode::kPermissionDenied,
                   fmt::format("cannot get a Slurm token for {}: {}", user,
                               r ? r->err : r.error().message)};
    }
    std::string out = r->out.substr(r->out.find("SLURM_JWT=") + 10);
    token = out.substr(0, out.find_first_of("\r\n"));
  }
  t.endpoint.token = *token;
  return t;
}

}  // namespace bmas
