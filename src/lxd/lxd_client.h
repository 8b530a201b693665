#pragma once

// A blocking client of LXD's REST API (/1.0) over its unix socket: instances, their state,
// devices and exec; operations; images; storage pools and profiles.
//
// Below it sits a transport seam (HttpTransport): the real one speaks HTTP/1.1 over the unix
// socket with Beast; tests pass canned responses instead. JSON stays inside lxd_client*.cc
// (lxd_client_internal.h): callers see the structs below.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <rapidjson/document.h>

#include "common/http_transport.h"
#include "common/result.h"
#include "lxd/lxd_api.h"
#include "lxd/lxd_types.h"

namespace bmas::lxd {

// HTTP/1.1 over the unix socket at `path`, one connection per request; every read and write
// is bounded by `timeout` (SO_RCVTIMEO/SO_SNDTIMEO, honoured: see internal::BoundedSocket).
// Thread-compatible.
HttpTransportPtr NewUnixLxdTransport(std::string path, std::chrono::milliseconds timeout);

// The API bmas uses. Every method blocks; one call at a time. Errors carry LXD's message
// and map its error codes: 404 kNotFound, 409 kAlreadyExists, 403 kPermissionDenied,
// 400 kInvalidArgument, other kInternal; kUnavailable when LXD cannot be reached (the message
// names the socket and `bmas lxd up`). Methods that start an operation wait for it.
class LxdClient final : public LxdApi {
 public:
  explicit LxdClient(const std::string& socket,
                     std::chrono::milliseconds timeout = std::chrono::seconds(120));
  // `timeout`: the transport's bound on each read, which operation waits stay inside.
  explicit LxdClient(HttpTransportPtr transport,
                     std::chrono::milliseconds timeout = std::chrono::seconds(120));

  Result<ServerInfo> Server() override;
  // Sets server config keys (PATCH /1.0), "core.https_address" for one.
  Result<void> SetServerConfig(const StringMap& config);
  Result<std::vector<TrustedCertificate>> TrustedCertificates() override;
  Result<void> TrustCertificate(const std::string& name, const std::string& pem,
                                const std::vector<std::string>& projects = {}) override;
  Result<void> RemoveTrustedCertificate(const std::string& fingerprint) override;

  Result<std::vector<Instance>> Instances() override;
  Result<Instance> GetInstance(const std::string& name) override;
  Result<void> CreateInstance(const InstanceSpec& spec) override;
  // action: "start", "stop", "restart", "freeze", "unfreeze".
  Result<void> ChangeState(const std::string& name, const std::string& action, bool force = false,
                           int timeout_s = 30) override;
  Result<void> DeleteInstance(const std::string& name) override;

  // Copies between LXD servers without CRIU: the file system only, no snapshots, no process
  // state (a running source keeps running). On the source:
  Result<MigrationSource> StartMigrationSource(const std::string& name);
  // On the target: creates instance `spec.name` with `spec`'s config, devices and profiles
  // (`spec.image` unused) from the source's file system, and waits until it is there.
  Result<void> CreateInstanceByMigration(const InstanceSpec& spec, const std::string& architecture,
                                         const MigrationPull& source) override;
  // Cancels an operation that has not ended (a migration source whose target failed).
  Result<void> CancelOperation(const std::string& operation);

  // Adds (or replaces) one device, live (PATCH).
  Result<void> AddDevice(const std::string& name, const std::string& device, const StringMap& spec);
  // Adds (or replaces) several devices in one change, live.
  Result<void> AddDevices(const std::string& name,
                          const std::map<std::string, StringMap>& devices) override;
  // Removes the named devices that the instance has, in one change (GET with its ETag, PUT
  // under If-Match); returns how many it had. Names it lacks are skipped.
  Result<int> RemoveDevices(const std::string& name,
                            const std::vector<std::string>& devices) override;
  // The PID (on the host) of a running instance's init; Unavailable when it is not running.
  Result<int64_t> InitPid(const std::string& name) override;
  // Removes one device: GET with its ETag, PUT without it under If-Match (PATCH cannot delete).
  // NotFound when the instance has no such device.
  Result<void> RemoveDevice(const std::string& name, const std::string& device);
  // Sets (a value) or removes (nullopt) config keys and whole devices, in one change, live
  // where LXD can (limits are).
  Result<void> UpdateInstance(
      const std::string& name, const std::map<std::string, std::optional<std::string>>& config,
      const std::map<std::string, std::optional<StringMap>>& devices) override;

  // Runs a command to its end with its output recorded; the recorded logs are deleted after.
  Result<ExecResult> Exec(const std::string& name, const ExecSpec& spec) override;
  // Starts a command on a pty of `width` x `height` in the instance. LXD holds it until both
  // of its websockets connect (lxd/interactive_exec.h speaks them).
  Result<WebsocketExec> StartInteractiveExec(const std::string& name, const ExecSpec& spec,
                                             int width, int height) override;
  // Starts a command with pipes, not a pty, for its stdin, stdout and stderr: so it sees the
  // end of its input. LXD holds it until its websockets connect.
  Result<WebsocketExec> StartPipedExec(const std::string& name, const ExecSpec& spec) override;
  // Waits for a websocket command's operation to end; its exit code.
  Result<int> ExecExitCode(const std::string& operation) override;

  Result<std::vector<Image>> Images() override;
  // Imports a unified image tarball (metadata.yaml + rootfs/ + templates/) and returns its
  // fingerprint; `alias`, when given, is pointed at it (moved from an older image).
  Result<std::string> ImportImage(std::string tarball, const std::string& alias) override;

  Result<std::vector<StoragePool>> StoragePools() override;
  Result<void> CreateStoragePool(const std::string& name, const std::string& driver,
                                 const StringMap& config);

  // NotFound when absent.
  Result<Profile> GetProfile(const std::string& name);
  // Creates the profile, or replaces its config and devices when it exists.
  Result<void> PutProfile(const Profile& profile);

 private:
  // Sends one request; a transport failure or an error response becomes an Error for `what`.
  Result<ClientResponse> Call(ClientRequest request, const std::string& what);
  // For an async response: waits for its operation and returns the operation's metadata
  // (as JSON text); for a sync one returns its metadata.
  Result<std::string> CallAndWait(ClientRequest request, const std::string& what);
  // Sends a request that starts an operation and returns at once: the operation
  // ("/1.0/operations/<id>") and the operation's own metadata (the secrets of its websockets).
  Result<std::pair<std::string, rapidjson::Document>> StartOperation(ClientRequest request,
                                                                     const std::string& what);
  // Waits for operation `op` ("/1.0/operations/<id>") to end; its metadata as JSON text.
  Result<std::string> WaitOperation(const std::string& op, const std::string& what);
  // POSTs an exec `body` that waits for websockets; its operation and secrets, which must
  // name each of `fds`.
  Result<WebsocketExec> StartWebsocketExec(const std::string& name, std::string body,
                                           const std::string& what,
                                           const std::vector<std::string>& fds);

  // GETs instance `name`, lets `edit` change its metadata in place, and PUTs it back under
  // If-Match with the ETag (PATCH cannot delete keys), waiting for the operation. `edit` returns
  // an Error to stop, or whether it changed anything (nothing is sent when not).
  Result<bool> EditInstance(
      const std::string& name, const std::string& what,
      const std::function<Result<bool>(rapidjson::Value& metadata,
                                       rapidjson::Document::AllocatorType& allocator)>& edit);

  HttpTransportPtr transport_;
  int wait_slice_s_;  // the long poll of an operation wait, seconds
};

// LXD's instance names are host names: letters, digits and '-', 1-63 characters, starting with
// a letter, not ending with '-'.
bool IsValidInstanceName(const std::string& name);

}  // namespace bmas::lxd
