#pragma once

// The LXD operations bmas's workspace, GPU and reconcile helpers call: the seam between them and
// LXD. LxdClient (lxd/lxd_client.h) is the real one, over LXD's REST API; FakeLxdApi
// (lxd/fake_lxd_api.h) keeps instances in memory for unit tests that need no root and no LXD.
// Errors are LxdClient's: kNotFound, kAlreadyExists, kUnavailable when LXD cannot be reached.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/result.h"
#include "lxd/lxd_types.h"

namespace bmas::lxd {

class LxdApi {
 public:
  virtual ~LxdApi() = default;

  virtual Result<std::vector<Instance>> Instances() = 0;
  virtual Result<Instance> GetInstance(const std::string& name) = 0;
  virtual Result<void> CreateInstance(const InstanceSpec& spec) = 0;
  // action: "start", "stop", "restart", "freeze", "unfreeze".
  virtual Result<void> ChangeState(const std::string& name, const std::string& action,
                                   bool force = false, int timeout_s = 30) = 0;
  virtual Result<void> DeleteInstance(const std::string& name) = 0;
  // Adds (or replaces) several devices in one change, live.
  virtual Result<void> AddDevices(const std::string& name,
                                  const std::map<std::string, StringMap>& devices) = 0;
  // Removes the named devices the instance has, in one change; returns how many it had.
  virtual Result<int> RemoveDevices(const std::string& name,
                                    const std::vector<std::string>& devices) = 0;
  // The PID (on the host) of a running instance's init; Unavailable when it is not running.
  virtual Result<int64_t> InitPid(const std::string& name) = 0;
  // Sets (a value) or removes (nullopt) config keys and whole devices, in one change.
  virtual Result<void> UpdateInstance(
      const std::string& name, const std::map<std::string, std::optional<std::string>>& config,
      const std::map<std::string, std::optional<StringMap>>& devices) = 0;
  // On the target of a copy: creates instance `spec.name` from the source's file system.
  virtual Result<void> CreateInstanceByMigration(const InstanceSpec& spec,
                                                 const std::string& architecture,
                                                 const MigrationPull& source) = 0;
  virtual Result<ExecResult> Exec(const std::string& name, const ExecSpec& spec) = 0;
  virtual Result<std::vector<Image>> Images() = 0;
  // Imports a unified image tarball; returns its fingerprint, `alias` pointed at it.
  virtual Result<std::string> ImportImage(std::string tarball, const std::string& alias) = 0;
  virtual Result<ServerInfo> Server() = 0;
  virtual Result<std::vector<StoragePool>> StoragePools() = 0;
  // The client certificates LXD trusts over HTTPS.
  virtual Result<std::vector<TrustedCertificate>> TrustedCertificates() = 0;
  // Trusts a client certificate (PEM) under `name`; with `projects`, restricted to them (such a
  // client cannot change the server's config or its trust store, nor see other projects).
  virtual Result<void> TrustCertificate(const std::string& name, const std::string& pem,
                                        const std::vector<std::string>& projects = {}) = 0;
  // Stops trusting the certificate with that SHA-256 `fingerprint` (kNotFound when absent).
  virtual Result<void> RemoveTrustedCertificate(const std::string& fingerprint) = 0;
  // Commands wired to websockets (lxd/interactive_exec.h): on a pty, or on pipes.
  virtual Result<WebsocketExec> StartInteractiveExec(const std::string& name, const ExecSpec& spec,
                                                     int width, int height) = 0;
  virtual Result<WebsocketExec> StartPipedExec(const std::string& name, const ExecSpec& spec) = 0;
  virtual Result<int> ExecExitCode(const std::string& operation) = 0;
};

}  // namespace bmas::lxd
