#pragma once

// Internal to the local cluster (local_cluster*.cc): what its files share. The multi-host test
// bed (tests/cluster) reuses its files, keys, munged and fake GPUs. The files, keys and
// directories under <state_dir>/slurm and the record of what runs (local_cluster_files.cc);
// the daemons' start, wait and stop (local_cluster_daemons.cc); accounting with MariaDB and
// slurmdbd (local_cluster_accounting.cc).

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "core/cluster.h"
#include "slurm/local_cluster.h"

namespace bmas::slurm::internal {

inline constexpr const char* kInstallHint =
    "apt-get install -y --no-install-recommends slurm-wlm slurmctld slurmd slurmrestd "
    "slurm-client slurm-wlm-jwt-plugin munge";

// The environment of Slurm's own commands (sinfo, sacctmgr, ...) for cluster `c`.
inline std::vector<std::string> SlurmEnv(const LocalCluster& c) { return {"SLURM_CONF=" + c.conf}; }

// ---- Files, keys and directories (local_cluster_files.cc) ----

// Writes `text` to `path` with mode `mode`, never through a link put in its place.
Result<void> WriteFile(const std::filesystem::path& path, std::string_view text, mode_t mode);
// A key of `bytes` random bytes, made once and kept across restarts, owned by `uid`:`gid`.
Result<void> MakeKey(const std::filesystem::path& path, size_t bytes, uid_t uid, gid_t gid);
// Creates `path` (and what is missing above it) and gives it `mode` and `uid`:`gid`.
Result<void> MakeDir(const std::filesystem::path& path, mode_t mode, uid_t uid = 0, gid_t gid = 0);
// Every directory above `path` must let the daemons' users (munge, nobody, the jobs' users)
// through.
Result<void> CheckTraversable(const std::filesystem::path& path);

struct Account {
  uid_t uid = 0;
  gid_t gid = 0;
};
// The account `user` (munge, mysql); kNotFound naming the package to install when absent.
Result<Account> LookUp(const char* user);

// Records `c` in <root>/local.json, which ReadLocalCluster reads.
Result<void> SaveLocalCluster(const LocalCluster& c);

// Fake GPU devices under `device_dir` for every node of `local` (a Localize'd cluster): each
// GPU's nvidiaN and each MIG slice's access capabilities (local_cluster.cc).
Result<void> MakeFakeGpus(const Cluster& local, const std::string& device_dir);

// ---- Daemons (local_cluster_daemons.cc) ----

// Whether something accepts connections on 127.0.0.1:`port` (local_cluster.cc).
bool PortAccepts(int port);
// Starts one daemon of `c`, detached, with its output in <root>/log/<file>.out, and adds it to
// c.daemons.
Result<DaemonProcess> StartDaemon(LocalCluster& c, std::string name, std::string comm,
                                std::vector<std::string> args, std::vector<std::string> env,
                                const std::string& file);
// kUnavailable: daemon `d` `what` ("did not start listening"), with the end of its log.
Error DaemonFailed(const DaemonProcess& d, const std::string& what);
// munged's command line: as `munge`, in the foreground, with key file `key`, its socket at
// `socket`, and its pid, log and seed files in `dir`. Also the multi-host test bed's
// (tests/cluster), whose munged in each namespace takes munge's default socket.
std::vector<std::string> MungedCommand(const Account& munge, const std::string& socket,
                                       const std::string& key, const std::string& dir);
// Starts node `node`'s slurmd, in a UTS namespace of its own named after it.
Result<DaemonProcess> StartSlurmd(LocalCluster& c, const std::string& node);
// Marks a standby layout node drained and DOWN, saying why.
Result<void> MarkStandby(const LocalCluster& c, const std::string& node);
// A cluster whose daemons partly died (a slurmctld killed alone, say): starts the dead ones
// again as they were started, in their order, and leaves the others and their jobs alone.
Result<LocalCluster> RestartDead(LocalCluster c);
// Stops c.daemons in reverse start order.
void StopDaemons(const LocalCluster& c);
// Starts munged, the accounting daemons when `accounting` is given (that cluster's settings),
// slurmctld, the slurmds and slurmrestd, and waits up to `timeout` for the nodes to be idle.
Result<void> StartDaemons(LocalCluster& c, const Account& munge, const Cluster* accounting,
                          std::chrono::seconds timeout);

// ---- Accounting (local_cluster_accounting.cc) ----

// MariaDB with a database user for slurmdbd, slurmdbd, and in it the cluster, the `bmas`
// account with every job user, and the partitions' QOS with their per-user GPU caps.
Result<void> StartAccounting(LocalCluster& c, const Cluster& local);
// The partitions' per-user GPU caps. slurmdbd knows the gres/gpu TRES only once slurmctld
// has registered with it, so this runs after slurmctld starts, and retries until then.
Result<void> SetGpuCaps(const LocalCluster& c, const Cluster& local);

}  // namespace bmas::slurm::internal
