#pragma once

// The one place bmas picks its adapters. Commands and services ask a Services for Slurm, LXD,
// the store, the GPUs and plain HTTP to other bmas daemons, and never name a concrete class:
// RealServices() hands out the real ones (slurmrestd over TCP, LXD over its unix socket,
// SQLite, NVML); a test hands out fakes (slurm/fake_slurm_api.h, lxd/fake_lxd_api.h,
// store/mem_store.h).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/env.h"
#include "common/result.h"
#include "gpu/gpu_telemetry.h"
#include "lxd/lxd_api.h"
#include "slurm/rest_client.h"
#include "store/store.h"

namespace bmas {

namespace cluster {
class NodeDaemons;
class NodeSlurm;
}  // namespace cluster

class Services {
 public:
  virtual ~Services() = default;

  // The clocks, sleeping and randomness that everything built from these adapters is given.
  virtual Env& env() = 0;

  // Slurm's REST API at `endpoint`, acting as endpoint.user; each call bounded by `timeout`.
  virtual std::unique_ptr<SlurmApi> Slurm(
      const RestEndpoint& endpoint,
      std::chrono::milliseconds timeout = std::chrono::seconds(30)) = 0;

  // LXD's REST API on its unix socket; `timeout` bounds each read.
  virtual std::unique_ptr<lxd::LxdApi> Lxd(
      const std::string& socket, std::chrono::milliseconds timeout = std::chrono::seconds(120)) = 0;

  // The store of `state_dir`: OpenConfiguredStore(StorePath(state_dir)) for the real one.
  virtual Result<StorePtr> OpenStore(const std::string& state_dir) = 0;

  // This node's GPUs, through NVML at `nvml_library` ("" = the driver's).
  virtual std::unique_ptr<GpuTelemetry> Gpus(const std::string& nvml_library = "") = 0;

  // Plain HTTP/1.1 to a bmas daemon at host:port (one connection per request); `peer` names
  // it in errors.
  virtual HttpTransportPtr Http(const std::string& host, uint16_t port,
                                std::chrono::milliseconds timeout, const std::string& peer) = 0;

  // The daemons `bmas node join` starts on this node and `bmas node leave` stops: munged,
  // slurmd and this binary's `bmas agent` as processes (daemon/node_daemons.h).
  virtual std::unique_ptr<cluster::NodeDaemons> NodeDaemons() = 0;

  // The cluster's Slurm as this node's commands see it (scontrol and squeue).
  virtual std::unique_ptr<cluster::NodeSlurm> NodeSlurm() = 0;
};

// The store's PostgreSQL URL: $BMAS_STORE_URL when set (it wins), else [store] url of the
// config this process runs with (UseConfigForStore's, else DefaultConfigPath()'s); "" = the
// embedded SQLite store. An error for a config file that cannot be read.
Result<std::string> ConfiguredStoreUrl();
// The config file given with --config, for ConfiguredStoreUrl.
void UseConfigForStore(const std::string& path);

// The one place that picks the store's class: PostgreSQL at ConfiguredStoreUrl() when one is
// set, else SQLite at `sqlite_path` (StorePath(state_dir)). Created and migrated as needed.
Result<StorePtr> OpenConfiguredStore(const std::string& sqlite_path, Env& env = Env::Default());

// Whether the store is in PostgreSQL (a URL is configured) rather than a SQLite file, which
// commands check for before they look at the file.
bool StoreIsOnPostgres();

// Where OpenConfiguredStore opens, for logs: the URL without its password, or the file.
std::string DescribeConfiguredStore(const std::string& sqlite_path);

// The real adapters. One per process; safe to use from any thread (each call builds anew).
Services& RealServices();

}  // namespace bmas
