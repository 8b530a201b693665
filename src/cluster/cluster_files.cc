#include "cluster/cluster_files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <rapidjson/document.h>

#include "common/json_object.h"
#include "common/private_files.h"

namespace bmas::cluster {
namespace {

constexpr const char* kCaKey = "ca.key";
constexpr const char* kCaCert = "ca.crt";
constexpr const char* kReplicaCaKey = "replica-ca.key";
constexpr const char* kReplicaCaCert = "replica-ca.crt";
constexpr const char* kTokens = "join-tokens";
constexpr const char* kEndpoint = "join-endpoint";
constexpr const char* kLock = "lock";
constexpr const char* kControllerCert = "controller.crt";
constexpr const char* kControllerKey = "controller.key";
constexpr const char* kNodeCerts = "node-certs";
constexpr size_t kMaxFileBytes = 1 << 20;

// The cluster directory, open and locked for the life of this object.
class LockedClusterDir {
 public:
  LockedClusterDir() = default;
  LockedClusterDir(const LockedClusterDir&) = delete;
  LockedClusterDir& operator=(const LockedClusterDir&) = delete;
  ~LockedClusterDir() {
    if (lock_ >= 0) close(lock_);
    if (fd_ >= 0) close(fd_);
  }

  // Opens (with `create`, makes) <state_dir>/cluster, 0700, and takes its lock.
  Result<void> Open(const std::string& state_dir, bool create) {
    path_ = ClusterDir(state_dir);
    std::error_code ec;
    if (!create && !std::filesystem::exists(path_, ec)) {
      return NotFound(
          fmt::format("this host has no cluster identity ({} does not exist): run "
                      "`bmas cluster init --cluster INVENTORY` first, as root",
                      path_));
    }
    if (create && ::mkdir(state_dir.c_str(), 0755) != 0 && errno != EEXIST) {
      return Error{
          ErrorCode::kPermissionDenied,
          fmt::format("cannot create the state directory {}: {}", state_dir, std::strerror(errno)),
          {}};
    }
    auto fd = OpenPrivateDir(path_, 0700);
    if (!fd) return Error{ErrorCode::kPermissionDenied, fd.error().message, {}};
    fd_ = *fd;
    if (fchmod(fd_, 0700) != 0) {
      return Internal(
          fmt::format("cannot make {} private (0700): {}", path_, std::strerror(errno)));
    }
    auto lock = LockPrivateFile(path_, kLock, true);
    if (!lock) return lock.error();
    lock_ = *lock;
    return {};
  }

  // The file's contents; nullopt when it does not exist.
  Result<std::optional<std::string>> Read(const char* name) const {
    auto fd = OpenInPrivateDir(fd_, path_, name, O_RDONLY);
    if (!fd) {
      if (faccessat(fd_, name, F_OK, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
        return std::optional<std::string>();
      }
      return fd.error();
    }
    std::string text;
    char buf[4096];
    ssize_t n = 0;
    while ((n = ::read(*fd, buf, sizeof buf)) > 0 && text.size() < kMaxFileBytes) {
      text.append(buf, static_cast<size_t>(n));
    }
    const int saved = errno;
    close(*fd);
    if (n < 0) {
      return Internal(fmt::format("cannot read {}/{}: {}", path_, name, std::strerror(saved)));
    }
    return std::optional<std::string>(std::move(text));
  }

  // Replaces the file with `text` (0600), through a temporary file and a rename.
  Result<void> Write(const char* name, const std::string& text) const {
    const std::string temporary = fmt::format("{}.new.{}", name, getpid());
    auto fd = OpenInPrivateDir(fd_, path_, temporary, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (!fd) return fd.error();
    const bool written =
        ::write(*fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
        fchmod(*fd, 0600) == 0 && fsync(*fd) == 0;
    const int saved = errno;
    close(*fd);
    if (!written || renameat(fd_, temporary.c_str(), fd_, name) != 0) {
      const int err = written ? errno : saved;
      unlinkat(fd_, temporary.c_str(), 0);
      return Internal(fmt::format("cannot write {}/{}: {}", path_, name, std::strerror(err)));
    }
    return {};
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  int lock_ = -1;
};

// The CA in `dir`; nullopt when it has none.
Result<std::optional<ClusterIdentity>> ReadCa(const LockedClusterDir& dir) {
  auto cert = dir.Read(kCaCert);
  if (!cert) return cert.error();
  if (!*cert) return std::optional<ClusterIdentity>();
  auto key = dir.Read(kCaKey);
  if (!key) return key.error();
  if (!*key) {
    return Internal(
        fmt::format("{}/{} exists but {}/{} does not: restore the CA key from a "
                    "backup, or remove {} and run `bmas cluster init` again (every "
                    "node must then join again)",
                    dir.path(), kCaCert, dir.path(), kCaKey, dir.path()));
  }
  ClusterIdentity id;
  id.ca = CertAndKey{**cert, **key};
  auto sha = CertificateSha256(id.ca.cert_pem);
  if (!sha) {
    return Internal(fmt::format("{}/{} is not a PEM certificate", dir.path(), kCaCert));
  }
  id.ca_sha256 = *sha;
  auto replica_cert = dir.Read(kReplicaCaCert);
  if (!replica_cert) return replica_cert.error();
  auto replica_key = dir.Read(kReplicaCaKey);
  if (!replica_key) return replica_key.error();
  if (*replica_cert && *replica_key) id.replica_ca = CertAndKey{**replica_cert, **replica_key};
  return std::optional<ClusterIdentity>(std::move(id));
}

// Makes the replica CA in `dir` when `id` has none.
Result<void> EnsureReplicaCa(const LockedClusterDir& dir, const std::string& cluster_name,
                             int64_t unix_now, ClusterIdentity& id) {
  if (!id.replica_ca.cert_pem.empty()) return {};
  auto ca = MakeClusterCa(cluster_name + " replicas", unix_now);
  if (!ca) return ca.error();
  if (auto w = dir.Write(kReplicaCaKey, ca->key_pem); !w) return w.error();
  if (auto w = dir.Write(kReplicaCaCert, ca->cert_pem); !w) return w.error();
  id.replica_ca = std::move(*ca);
  return {};
}

// Writes `text` to `name` in the state directory `state_dir` (0644), through a temporary file
// and a rename. The directory must be this account's alone (OpenPrivateDir): no other account
// can plant a link or a file where root writes.
Result<void> WritePublicFile(const std::string& state_dir, const char* name,
                             const std::string& text) {
  auto dir_fd = OpenPrivateDir(state_dir, 0755);
  if (!dir_fd) return Error{ErrorCode::kPermissionDenied, dir_fd.error().message, {}};
  const std::string temporary = fmt::format("{}.new.{}", name, getpid());
  auto fd = OpenInPrivateDir(*dir_fd, state_dir, temporary, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!fd) {
    close(*dir_fd);
    return fd.error();
  }
  const bool written = ::write(*fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                       fchmod(*fd, 0644) == 0 && fsync(*fd) == 0;
  const int saved = errno;
  close(*fd);
  const bool renamed = written && renameat(*dir_fd, temporary.c_str(), *dir_fd, name) == 0;
  const int err = written ? errno : saved;
  if (!renamed) unlinkat(*dir_fd, temporary.c_str(), 0);
  close(*dir_fd);
  if (!renamed) {
    return Internal(fmt::format("cannot write {}/{}: {}", state_dir, name, std::strerror(err)));
  }
  return {};
}

// The CA in `dir`; NotFound naming `bmas cluster init` when it has none.
Result<ClusterIdentity> RequireCa(const LockedClusterDir& dir) {
  auto existing = ReadCa(dir);
  if (!existing) return existing.error();
  if (!*existing) {
    return NotFound(fmt::format(
        "{} holds no cluster CA: run `bmas cluster init --cluster INVENTORY` first, as root",
        dir.path()));
  }
  return std::move(**existing);
}

Result<std::vector<TokenRecord>> ReadRecords(const LockedClusterDir& dir) {
  auto text = dir.Read(kTokens);
  if (!text) return text.error();
  if (!*text) return std::vector<TokenRecord>{};
  auto records = ParseTokenRecords(**text);
  if (!records) {
    return Internal(fmt::format("{}/{}: {}", dir.path(), kTokens, records.error().message));
  }
  return records;
}

// Whether a token can carry `endpoint`: the text form checks the fields.
Result<void> CheckEndpoint(const JoinEndpoint& endpoint, int64_t unix_now) {
  JoinToken probe;
  probe.address = endpoint.address;
  probe.port = endpoint.port;
  probe.ca_sha256.assign(kSha256Bytes, '\0');
  probe.secret.assign(kJoinSecretBytes, '\0');
  probe.expires_at = unix_now + 1;
  if (endpoint.address.size() > 253 || !ParseJoinToken(FormatJoinToken(probe), unix_now)) {
    return InvalidArgument(fmt::format("'{}' port {} is not an address and port that nodes can "
                                       "join at (an IP address or host name, port 1-65535)",
                                       endpoint.address, endpoint.port),
                           "address");
  }
  return {};
}

Result<JoinEndpoint> ReadEndpoint(const LockedClusterDir& dir) {
  auto text = dir.Read(kEndpoint);
  if (!text) return text.error();
  JoinEndpoint endpoint;
  unsigned port = 0;
  char address[254] = {};
  if (!*text || std::sscanf((*text)->c_str(), "%253s %u", address, &port) != 2 || port == 0 ||
      port > 65535) {
    return NotFound(
        fmt::format("{}/{} is missing or not \"ADDRESS PORT\": run `bmas cluster "
                    "init --cluster INVENTORY` again, as root",
                    dir.path(), kEndpoint));
  }
  endpoint.address = address;
  endpoint.port = static_cast<uint16_t>(port);
  return endpoint;
}

Result<std::map<std::string, std::string>> ReadNodeCerts(const LockedClusterDir& dir) {
  std::map<std::string, std::string> certs;
  auto text = dir.Read(kNodeCerts);
  if (!text) return text.error();
  if (!*text) return certs;
  rapidjson::Document d;
  d.Parse((*text)->data(), (*text)->size());
  if (d.HasParseError() || !d.IsObject()) {
    return Internal(fmt::format("{}/{} is not a JSON object: remove it (each node's next join "
                                "writes its certificate there again)",
                                dir.path(), kNodeCerts));
  }
  for (const auto& m : d.GetObject()) {
    if (!m.value.IsString()) continue;
    certs[m.name.GetString()] = std::string(m.value.GetString(), m.value.GetStringLength());
  }
  return certs;
}

}  // namespace

Result<std::map<std::string, std::string>> LoadNodeCertificates(const std::string& state_dir) {
  LockedClusterDir dir;
  if (auto opened = dir.Open(state_dir, false); !opened) return opened.error();
  return ReadNodeCerts(dir);
}

Result<void> KeepNodeCertificate(const std::string& state_dir, const std::string& host,
                                 const std::string& cert_pem) {
  LockedClusterDir dir;
  if (auto opened = dir.Open(state_dir, false); !opened) return opened.error();
  auto certs = ReadNodeCerts(dir);
  if (!certs) return certs.error();
  (*certs)[host] = cert_pem;
  return dir.Write(kNodeCerts, JsonObject([&](JsonWriter& w) {
                     for (const auto& [name, pem] : *certs) Member(w, name, pem);
                   }));
}

Result<JoinReply> DecideJoinAndKeep(const std::string& state_dir, JoinMaterial& material,
                                    const std::vector<TokenRecord>& records,
                                    const JoinRequest& request, int64_t unix_now) {
  auto kept = LoadNodeCertificates(state_dir);
  if (!kept) return kept.error();
  material.node_certs = std::move(*kept);
  auto reply = DecideJoin(material, records, request, unix_now);
  if (!reply) return reply;
  if (auto ok = KeepNodeCertificate(state_dir, request.host, reply->node_cert_pem); !ok) {
    return Internal(fmt::format("the controller could not keep {}'s certificate: {}",
                                request.host, ok.error().message));
  }
  return reply;
}

Result<std::map<std::string, std::string>> DecideLxdPeersFromKept(const std::string& state_dir,
                                                                  JoinMaterial& material,
                                                                  const std::string& host,
                                                                  const std::string& cert_pem,
                                                                  int64_t unix_now) {
  auto kept = LoadNodeCertificates(state_dir);
  if (!kept) return kept.error();
  material.node_certs = std::move(*kept);
  return DecideLxdPeers(material, host, cert_pem, unix_now);
}

std::string ClusterDir(const std::string& state_dir) {
  return (std::filesystem::path(state_dir) / "cluster").string();
}

Result<ClusterIdentity> EnsureClusterCa(const std::string& state_dir,
                                        const std::string& cluster_name,
                                        const JoinEndpoint& endpoint, int64_t unix_now) {
  if (auto ok = CheckEndpoint(endpoint, unix_now); !ok) return ok.error();
  LockedClusterDir dir;
  if (auto opened = dir.Open(state_dir, true); !opened) return opened.error();
  const std::string endpoint_text = fmt::format("{} {}\n", endpoint.address, endpoint.port);
  if (auto w = dir.Write(kEndpoint, endpoint_text); !w) return w.error();
  auto existing = ReadCa(dir);
  if (!existing) return existing.error();
  ClusterIdentity id;
  if (*existing) {
    id = std::move(**existing);
  } else {
    auto ca = MakeClusterCa(cluster_name, unix_now);
    if (!ca) return ca.error();
    // The key first: the certificate's presence says both are there.
    if (auto w = dir.Write(kCaKey, ca->key_pem); !w) return w.error();
    if (auto w = dir.Write(kCaCert, ca->cert_pem); !w) return w.error();
    id.ca = std::move(*ca);
    auto sha = CertificateSha256(id.ca.cert_pem);
    if (!sha) return sha.error();
    id.ca_sha256 = *sha;
    id.created = true;
  }
  if (auto ok = EnsureReplicaCa(dir, cluster_name, unix_now, id); !ok) return ok.error();
  if (auto ok = WritePublicFile(state_dir, kReplicaCaCert, id.replica_ca.cert_pem); !ok) {
    return ok.error();
  }
  return id;
}

std::string ReplicaCaPath(const std::string& state_dir) {
  return (std::filesystem::path(state_dir) / kReplicaCaCert).string();
}

Result<ClusterIdentity> LoadClusterCa(const std::string& state_dir) {
  LockedClusterDir dir;
  if (auto opened = dir.Open(state_dir, false); !opened) return opened.error();
  return RequireCa(dir);
}

Result<JoinToken> IssueJoinToken(const std::string& state_dir, Env& env, int64_t unix_now,
                                 int64_t ttl_seconds) {
  if (ttl_seconds <= 0) return InvalidArgument("a join token must live more than 0 s", "ttl");
  LockedClusterDir dir;
  if (auto opened = dir.Open(state_dir, false); !opened) return opened.error();
  auto ca = RequireCa(dir);
  if (!ca) return ca.error();
  auto endpoint = ReadEndpoint(dir);
  if (!endpoint) return endpoint.error();
  auto records = ReadRecords(dir);
  if (!records) return records.error();
  JoinToken token;
  token.address = endpoint->address;
  token.port = endpoint->port;
  token.ca_sha256 = ca->ca_sha256;
  token.secret = NewJoinSecret(env);
  token.expires_at = unix_now + ttl_seconds;
  std::vector<TokenRecord> kept = Unexpired(std::move(*records), unix_now);
  kept.push_back(RecordOf(token));
  if (auto w = dir.Write(kTokens, FormatTokenRecords(kept)); !w) return w.error();
  return token;
}

Result<std::vector<TokenRecord>> LoadTokenRecords(const std::string& state_dir) {
  LockedClusterDir dir;
  if (auto opened = dir.Open(state_dir, false); !opened) return opened.error();
  return ReadRecords(dir);
}

Result<JoinEndpoint> LoadJoinEndpoint(const std::string& state_dir) {
  LockedClusterDir dir;
  if (auto opened = dir.Open(state_dir, false); !opened) return opened.error();
  return ReadEndpoint(dir);
}

Result<CertAndKey> EnsureControllerCertificate(const std::string& state_dir,
                                               const NodeIdentity& controller, int64_t unix_now) {
  LockedClusterDir dir;
  if (auto opened = dir.Open(state_dir, false); !opened) return opened.error();
  auto ca = RequireCa(dir);
  if (!ca) return ca.error();
  auto cert = dir.Read(kControllerCert);
  if (!cert) return cert.error();
  auto key = dir.Read(kControllerKey);
  if (!key) return key.error();
  const std::string name = controller.address.empty() ? controller.host : controller.address;
  if (*cert && *key && VerifyPeerCertificate(ca->ca.cert_pem, **cert, unix_now, name)) {
    return CertAndKey{**cert, **key};
  }
  auto issued = IssueNodeCertificate(ca->ca, controller, unix_now);
  if (!issued) return issued.error();
  if (auto w = dir.Write(kControllerKey, issued->key_pem); !w) return w.error();
  if (auto w = dir.Write(kControllerCert, issued->cert_pem); !w) return w.error();
  return issued;
}

}  // namespace bmas::cluster
