#include "lxd/peer_trust.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <map>
#include <set>

#include "lxd/lxd_internal.h"
#include "lxd/lxd_tls.h"

namespace bmas::lxd {
namespace {

namespace fs = std::filesystem;

constexpr const char* kSharedCert = "/etc/bmas/lxd-peer.crt";
constexpr const char* kSharedKey = "/etc/bmas/lxd-peer.key";
constexpr size_t kMaxCertBytes = 64 * 1024;

bool IsHostName(const std::string& host) {
  if (host.empty() || host.size() > 253 || host.front() == '-' || host.front() == '.') {
    return false;
  }
  return std::all_of(host.begin(), host.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '.' || c == '_';
  });
}

std::string Joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

}  // namespace

std::string NodeCaPath(const LxdSettings& settings) {
  return (fs::path(settings.node_dir) / "ca.crt").string();
}
std::string NodeCertPath(const LxdSettings& settings) {
  return (fs::path(settings.node_dir) / "node.crt").string();
}
std::string PeerCertsDir(const LxdSettings& settings) {
  return (fs::path(settings.node_dir) / "lxd-peers").string();
}

bool HasJoined(const LxdSettings& settings) {
  std::error_code ec;
  return fs::exists(NodeCertPath(settings), ec) &&
         fs::exists((fs::path(settings.node_dir) / "node.key").string(), ec);
}

PeerIdentity ChoosePeerIdentity(const LxdSettings& settings, bool joined) {
  const std::string node_cert = NodeCertPath(settings);
  const std::string node_key = (fs::path(settings.node_dir) / "node.key").string();
  if (!settings.cert.empty()) {
    PeerIdentity id{settings.cert, settings.key, settings.cert == node_cert, ""};
    if (!id.own) {
      id.note = fmt::format(
          "[lxd] cert = {} is one client certificate shared by every node: a key to all of "
          "their LXDs. Once every node has joined (`bmas node join`), remove [lxd] cert and key "
          "so that each node shows its own {}",
          settings.cert, node_cert);
    }
    return id;
  }
  if (joined) return PeerIdentity{node_cert, node_key, true, ""};
  return PeerIdentity{kSharedCert, kSharedKey, false,
                      fmt::format("this node has not joined a cluster (no {}): peers' LXDs see "
                                  "the shared {}, which every node holds; `bmas node join` gives "
                                  "it a certificate of its own",
                                  node_cert, kSharedCert)};
}

PeerTrustPlan PlanPeerTrust(const std::vector<TrustedCertificate>& trusted,
                            const std::vector<NodeCertificate>& peers, const std::string& self_pem,
                            const std::function<Result<void>(const NodeCertificate&)>& verify) {
  PeerTrustPlan plan;
  const auto self = self_pem.empty() ? Result<std::string>(InvalidArgument("none"))
                                     : CertificateFingerprint(self_pem);
  std::map<std::string, int> per_host;
  for (const NodeCertificate& p : peers) ++per_host[p.host];

  std::set<std::string> wanted;  // fingerprints
  std::set<std::string> present;
  for (const TrustedCertificate& t : trusted) present.insert(t.fingerprint);
  for (const NodeCertificate& p : peers) {
    if (per_host[p.host] > 1) {
      plan.refused.push_back(fmt::format(
          "{}: more than one certificate names this host; keep the one `bmas node join` issued",
          p.host));
      continue;
    }
    auto fingerprint = CertificateFingerprint(p.pem);
    if (!fingerprint) {
      plan.refused.push_back(fmt::format("{}: not a PEM certificate", p.host));
      continue;
    }
    if (self && *self == *fingerprint) continue;
    if (auto ok = verify(p); !ok) {
      plan.refused.push_back(fmt::format("{}: {}", p.host, ok.error().message));
      continue;
    }
    wanted.insert(*fingerprint);
    if (!present.contains(*fingerprint)) plan.add.push_back(p);
  }
  plan.peers = wanted.size();
  for (const TrustedCertificate& t : trusted) {
    if (t.name == kSharedTrustName) plan.shared_trusted = true;
    if (t.name.starts_with(kNodeTrustPrefix) && !wanted.contains(t.fingerprint)) {
      plan.remove.push_back(t);
    }
  }
  return plan;
}

Result<std::vector<NodeCertificate>> ReadNodeCertificates(const std::string& dir) {
  std::vector<NodeCertificate> out;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path path = entry.path();
    if (path.extension() != ".crt" || !entry.is_regular_file()) continue;
    const std::string host = path.stem().string();
    if (!IsHostName(host)) continue;
    if (entry.file_size() > kMaxCertBytes) {
      return InvalidArgument(fmt::format("{} is over {} bytes: not a node certificate",
                                         path.string(), kMaxCertBytes));
    }
    std::string pem = internal::ReadText(path.string());
    if (pem.empty()) {
      return InvalidArgument(
          fmt::format("cannot read {}: put the peer node's node.crt there, or remove the file",
                      path.string()));
    }
    out.push_back(NodeCertificate{host, std::move(pem)});
  }
  if (ec) return Internal(fmt::format("cannot list {}: {}", dir, ec.message()));
  std::sort(out.begin(), out.end(),
            [](const NodeCertificate& a, const NodeCertificate& b) { return a.host < b.host; });
  return out;
}

Result<void> ApplyPeerTrust(LxdApi& client, const PeerTrustPlan& plan) {
  for (const TrustedCertificate& t : plan.remove) {
    auto r = client.RemoveTrustedCertificate(t.fingerprint);
    if (!r && r.error().code != ErrorCode::kNotFound) return r;
  }
  for (const NodeCertificate& p : plan.add) {
    if (auto r = client.TrustCertificate(kNodeTrustPrefix + p.host, p.pem, {kPeerProject}); !r) {
      return r;
    }
  }
  return {};
}

std::string DescribePeerTrust(const PeerTrustPlan& plan) {
  const size_t trusted_peers = plan.peers;
  std::vector<std::string> added, removed;
  for (const NodeCertificate& p : plan.add) added.push_back(p.host);
  for (const TrustedCertificate& t : plan.remove) {
    removed.push_back(t.name.substr(std::string_view(kNodeTrustPrefix).size()));
  }
  std::string out = fmt::format("trusts {} peer node{}", trusted_peers, trusted_peers == 1 ? "" : "s");
  if (!added.empty() || !removed.empty()) {
    out += " (";
    if (!added.empty()) out += "added " + Joined(added);
    if (!added.empty() && !removed.empty()) out += "; ";
    if (!removed.empty()) out += "removed " + Joined(removed);
    out += ")";
  }
  if (!plan.refused.empty()) out += "; refused " + Joined(plan.refused);
  if (plan.shared_trusted) {
    out += fmt::format("; still trusts the shared certificate \"{}\": once every node shows its "
                       "own, remove it (lxc config trust remove)",
                       kSharedTrustName);
  }
  return out;
}

}  // namespace bmas::lxd
