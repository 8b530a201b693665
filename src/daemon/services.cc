// The real adapters behind Services.

#include "daemon/services.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>

#include "common/config.h"
#include "common/config_table.h"
#include "common/process.h"
#include "daemon/node_daemons.h"
#include "daemon/node_daemons_systemd.h"
#include "gpu/nvml.h"
#include "lxd/lxd_client.h"
#include "store/postgres_store.h"

namespace bmas {
namespace {

class RealServicesImpl final : public Services {
 public:
  Env& env() override { return Env::Default(); }
  std::unique_ptr<SlurmApi> Slurm(const RestEndpoint& endpoint,
                                  std::chrono::milliseconds timeout) override {
    return std::make_unique<SlurmRestClient>(endpoint, timeout, env());
  }
  std::unique_ptr<lxd::LxdApi> Lxd(const std::string& socket,
                                   std::chrono::milliseconds timeout) override {
    return std::make_unique<lxd::LxdClient>(socket, timeout);
  }
  Result<StorePtr> OpenStore(const std::string& state_dir) override {
    return OpenConfiguredStore(StorePath(state_dir), env());
  }
  std::unique_ptr<GpuTelemetry> Gpus(const std::string& nvml_library) override {
    return OpenNvml(nvml_library);
  }
  HttpTransportPtr Http(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                        const std::string& peer) override {
    return NewTcpHttpTransport(host, port, timeout, peer);
  }
  std::unique_ptr<cluster::NodeDaemons> NodeDaemons() override {
    std::error_code ec;
    const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    // Under systemd with the package's units, the join enables units that outlive a reboot.
    if (SystemdRunsBmasUnits()) {
      return NewSystemdNodeDaemons(
          [](const std::vector<std::string>& argv) {
            return RunCommand(argv, {}, std::chrono::seconds(60));
          },
          "/etc/systemd/system", self);
    }
    return NewProcessNodeDaemons(self);
  }
  std::unique_ptr<cluster::NodeSlurm> NodeSlurm() override { return NewCommandNodeSlurm(); }
};

std::mutex config_mu;
std::optional<std::string> config_for_store;  // guarded by config_mu

}  // namespace

void UseConfigForStore(const std::string& path) {
  std::lock_guard lock(config_mu);
  config_for_store = path;
}

Result<std::string> ConfiguredStoreUrl() {
  if (const char* url = std::getenv("BMAS_STORE_URL"); url != nullptr && *url != '\0') {
    return std::string(url);
  }
  std::string path;
  {
    std::lock_guard lock(config_mu);
    path = config_for_store.value_or(DefaultConfigPath());
  }
  try {
    return LoadConfig(path).store.url;
  } catch (const ConfigError& e) {
    return InvalidArgument(fmt::format("cannot tell where the store is: {}", e.what()));
  }
}

Result<StorePtr> OpenConfiguredStore(const std::string& sqlite_path, Env& env) {
  auto url = ConfiguredStoreUrl();
  if (!url) return url.error();
  if (url->empty()) return OpenSqliteStore(sqlite_path, env);
  return OpenPostgresStore(*url, env);
}

bool StoreIsOnPostgres() {
  auto url = ConfiguredStoreUrl();
  return url && !url->empty();
}

std::string DescribeConfiguredStore(const std::string& sqlite_path) {
  auto url = ConfiguredStoreUrl();
  if (!url || url->empty()) return sqlite_path;
  return RedactStoreUrl(*url);
}

Services& RealServices() {
  static RealServicesImpl services;
  return services;
}

}  // namespace bmas
