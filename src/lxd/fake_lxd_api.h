#pragma once

// An in-memory LXD for unit tests of code that drives LxdApi: instances with their config,
// devices and status, made and changed as LXD would (a name taken is kAlreadyExists, a missing
// one kNotFound). A running instance's init is `init_pid` (the test's own, say); exec answers
// from `exec_result` and records each command.

#include <map>
#include <string>
#include <vector>

#include "lxd/lxd_api.h"
#include "lxd/lxd_tls.h"

namespace bmas::lxd {

class FakeLxdApi final : public LxdApi {
 public:
  Result<std::vector<Instance>> Instances() override {
    if (down) return Down();
    std::vector<Instance> out;
    for (const auto& [name, i] : instances) out.push_back(i);
    return out;
  }
  Result<Instance> GetInstance(const std::string& name) override {
    if (down) return Down();
    auto it = instances.find(name);
    if (it == instances.end()) return Missing(name);
    return it->second;
  }
  Result<void> CreateInstance(const InstanceSpec& spec) override {
    if (down) return Down();
    if (instances.contains(spec.name)) {
      return Error{ErrorCode::kAlreadyExists, "fake: instance " + spec.name + " exists"};
    }
    Instance i;
    i.name = spec.name;
    i.status = InstanceStatus::kStopped;
    i.type = "container";
    i.architecture = "x86_64";
    i.config = spec.config;
    i.devices = spec.devices;
    i.profiles = spec.profiles;
    instances[spec.name] = i;
    return {};
  }
  Result<void> ChangeState(const std::string& name, const std::string& action, bool = false,
                           int = 30) override {
    if (down) return Down();
    auto it = instances.find(name);
    if (it == instances.end()) return Missing(name);
    if (action == "start" || action == "restart" || action == "unfreeze") {
      it->second.status = InstanceStatus::kRunning;
    } else if (action == "stop") {
      it->second.status = InstanceStatus::kStopped;
    } else if (action == "freeze") {
      it->second.status = InstanceStatus::kFrozen;
    }
    state_changes.push_back(name + " " + action);
    return {};
  }
  Result<void> DeleteInstance(const std::string& name) override {
    if (down) return Down();
    if (instances.erase(name) == 0) return Missing(name);
    return {};
  }
  Result<void> AddDevices(const std::string& name,
                          const std::map<std::string, StringMap>& devices) override {
    if (down) return Down();
    auto it = instances.find(name);
    if (it == instances.end()) return Missing(name);
    for (const auto& [device, spec] : devices) it->second.devices[device] = spec;
    return {};
  }
  Result<int> RemoveDevices(const std::string& name,
                            const std::vector<std::string>& devices) override {
    if (down) return Down();
    auto it = instances.find(name);
    if (it == instances.end()) return Missing(name);
    int removed = 0;
    for (const std::string& d : devices) removed += it->second.devices.erase(d) > 0 ? 1 : 0;
    return removed;
  }
  Result<int64_t> InitPid(const std::string& name) override {
    if (down) return Down();
    auto it = instances.find(name);
    if (it == instances.end()) return Missing(name);
    if (it->second.status != InstanceStatus::kRunning) {
      return Error{ErrorCode::kUnavailable, "fake: instance " + name + " is not running"};
    }
    return init_pid;
  }
  Result<void> UpdateInstance(
      const std::string& name, const std::map<std::string, std::optional<std::string>>& config,
      const std::map<std::string, std::optional<StringMap>>& devices) override {
    if (down) return Down();
    auto it = instances.find(name);
    if (it == instances.end()) return Missing(name);
    for (const auto& [key, value] : config) {
      if (value) it->second.config[key] = *value;
      else it->second.config.erase(key);
    }
    for (const auto& [device, spec] : devices) {
      if (spec) it->second.devices[device] = *spec;
      else it->second.devices.erase(device);
    }
    return {};
  }
  Result<void> CreateInstanceByMigration(const InstanceSpec& spec, const std::string&,
                                         const MigrationPull& source) override {
    migrations.push_back(source.operation_url);
    return CreateInstance(spec);
  }
  Result<ExecResult> Exec(const std::string& name, const ExecSpec& spec) override {
    if (down) return Down();
    if (!instances.contains(name)) return Missing(name);
    execs.push_back(spec);
    return exec_result;
  }
  Result<std::vector<Image>> Images() override {
    if (down) return Down();
    return images;
  }
  Result<std::string> ImportImage(std::string, const std::string& alias) override {
    if (down) return Down();
    Image image;
    image.fingerprint = "fake" + std::to_string(images.size());
    if (!alias.empty()) image.aliases.push_back(alias);
    images.push_back(image);
    return image.fingerprint;
  }
  Result<ServerInfo> Server() override {
    if (down) return Down();
    return server;
  }
  Result<std::vector<StoragePool>> StoragePools() override {
    if (down) return Down();
    return pools;
  }
  Result<std::vector<TrustedCertificate>> TrustedCertificates() override {
    if (down) return Down();
    return trust;
  }
  Result<void> TrustCertificate(const std::string& name, const std::string& pem,
                                const std::vector<std::string>& projects = {}) override {
    if (down) return Down();
    auto fingerprint = CertificateFingerprint(pem);
    if (!fingerprint) return fingerprint.error();
    for (const TrustedCertificate& t : trust) {
      if (t.fingerprint == *fingerprint) {
        return Error{ErrorCode::kAlreadyExists, "fake: certificate already in trust store"};
      }
    }
    trust.push_back(TrustedCertificate{name, *fingerprint, !projects.empty(), projects});
    return {};
  }
  Result<void> RemoveTrustedCertificate(const std::string& fingerprint) override {
    if (down) return Down();
    const auto n = std::erase_if(
        trust, [&](const TrustedCertificate& t) { return t.fingerprint == fingerprint; });
    if (n == 0) return Error{ErrorCode::kNotFound, "fake: no certificate " + fingerprint};
    return {};
  }
  // Websocket commands need LXD's sockets: the fake has none.
  Result<WebsocketExec> StartInteractiveExec(const std::string&, const ExecSpec&, int,
                                             int) override {
    return NoWebsockets();
  }
  Result<WebsocketExec> StartPipedExec(const std::string&, const ExecSpec&) override {
    return NoWebsockets();
  }
  Result<int> ExecExitCode(const std::string&) override { return NoWebsockets(); }

  std::map<std::string, Instance> instances;
  std::vector<Image> images;
  ServerInfo server;
  std::vector<StoragePool> pools;
  std::vector<TrustedCertificate> trust;
  int64_t init_pid = 1;
  ExecResult exec_result{0, "", ""};
  std::vector<ExecSpec> execs;
  std::vector<std::string> state_changes;  // "NAME ACTION", in order
  std::vector<std::string> migrations;     // the source operation of each copy pulled
  bool down = false;                       // every call: Unavailable, as with no LXD

 private:
  static Error Down() {
    return Error{ErrorCode::kUnavailable, "fake: LXD is not running (bmas lxd up)"};
  }
  static Error NoWebsockets() {
    return Error{ErrorCode::kUnavailable, "fake: no exec websockets (use a real LXD)"};
  }
  static Error Missing(const std::string& name) {
    return Error{ErrorCode::kNotFound, "fake: no instance " + name};
  }
};

}  // namespace bmas::lxd
