#pragma once

// What LXD's API carries, as bmas's callers see it: instances, their specs and exec, images,
// storage pools, profiles, and the two ends of a copy between servers. JSON stays in
// lxd_client*.cc.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

namespace bmas::lxd {

using StringMap = std::map<std::string, std::string>;

struct ServerInfo {
  std::string version;  // "5.0.2"
  std::string kernel;   // "5.10.0-..."
  std::vector<std::string> storage_drivers;  // supported here, "btrfs", "dir", ...
  std::string certificate;  // the server's own TLS certificate (PEM)
  StringMap config;         // server config, "core.https_address", ...
  std::string auth;         // "trusted", or "untrusted" for a client it does not trust
};

// A client certificate in LXD's trust store.
struct TrustedCertificate {
  std::string name;
  std::string fingerprint;            // SHA-256 of its DER, lowercase hex
  bool restricted = false;            // limited to `projects`
  std::vector<std::string> projects;
};

// An instance's status as LXD names it ("Running", "Stopped", "Frozen", "Error"), typed; read
// from LXD's JSON in one place (lxd_client_json.cc) and printed by its name.
enum class InstanceStatus : uint8_t { kUnknown, kRunning, kStopped, kFrozen, kError };
std::string_view InstanceStatusName(InstanceStatus status);  // kUnknown: "Unknown"
InstanceStatus ParseInstanceStatus(std::string_view name);   // kUnknown for any other name

struct Instance {
  std::string name;
  InstanceStatus status = InstanceStatus::kUnknown;
  std::string type;    // "container"
  std::string architecture;  // "x86_64"
  StringMap config;    // as set (not expanded with profiles)
  std::map<std::string, StringMap> devices;
  std::vector<std::string> profiles;
  std::string created_at;
  std::string etag;  // from GetInstance only: for a PUT with If-Match
};

struct InstanceSpec {
  std::string name;
  std::string image;  // an alias or a fingerprint
  std::vector<std::string> profiles;
  StringMap config;
  std::map<std::string, StringMap> devices;
};

struct ExecSpec {
  std::vector<std::string> command;
  StringMap environment;
  uint32_t user = 0;
  uint32_t group = 0;
  std::string cwd;  // "" = LXD's default
};

struct ExecResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// An exec that LXD holds until all its websockets connect, each at
// GET <operation>/websocket?secret=<secret>. Interactive: the pty's bytes both ways on "0".
// Piped: stdin on "0", stdout on "1", stderr on "2". Either: signals (and a pty's window
// sizes) on "control".
struct WebsocketExec {
  std::string operation;  // "/1.0/operations/<id>"
  StringMap secrets;      // "0", "1", "2", "control" as LXD names them -> secret
};

// The source side of a copy to another LXD (migration, pull mode): the source LXD holds the
// instance's file system until the target connects to `operation`'s websockets with `secrets`.
struct MigrationSource {
  std::string operation;  // "/1.0/operations/<id>" on the source
  StringMap secrets;      // "control", "fs"
};

// Where the target LXD pulls a copy from.
struct MigrationPull {
  std::string operation_url;  // "https://<source>:8443/1.0/operations/<id>"
  std::string certificate;    // the source's TLS certificate (PEM), which the target checks
  StringMap secrets;
};

struct Image {
  std::string fingerprint;
  std::vector<std::string> aliases;
  StringMap properties;
  int64_t size = 0;
  std::string uploaded_at;  // RFC 3339; sorts as text
};

struct StoragePool {
  std::string name;
  std::string driver;
  StringMap config;
  std::string status;
};

struct Profile {
  std::string name;
  std::string description;
  StringMap config;
  std::map<std::string, StringMap> devices;
};

}  // namespace bmas::lxd

// fmt prints a status by its name.
template <>
struct fmt::formatter<bmas::lxd::InstanceStatus> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(bmas::lxd::InstanceStatus status, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(bmas::lxd::InstanceStatusName(status), ctx);
  }
};
