// The real adapters behind Services.

#include "daemon/services.h"

#include "gpu/nvml.h"
#include "lxd/lxd_client.h"

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
    return OpenSqliteStore(StorePath(state_dir), env());
  }
  std::unique_ptr<GpuTelemetry> Gpus(const std::string& nvml_library) override {
    return OpenNvml(nvml_library);
  }
  HttpTransportPtr Http(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                        const std::string& peer) override {
    return NewTcpHttpTransport(host, port, timeout, peer);
  }
};

}  // namespace

Services& RealServices() {
  static RealServicesImpl services;
  return services;
}

}  // namespace bmas
