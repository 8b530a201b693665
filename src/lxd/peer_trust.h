#pragma once

// Which nodes may reach this node's LXD over HTTPS, and with which certificate this node reaches
// theirs (docs/cluster-join.md, "LXD peer trust").
//
// Each node that joined the cluster has a key and a certificate of its own, issued by the cluster
// CA (node.crt). Its LXD trusts the node certificates of its peers one by one, each under the name
// "bmas-node-<host>" and restricted to the project "default", and bmas on a node shows peers its
// own node.crt. A node that leaves is taken out of the others' trust stores by name. LXD's own
// PKI mode (server.ca with core.trust_ca_certificates) is not used: it trusts whatever the CA ever
// signed, and LXD 5.0.2 did not refuse a certificate listed in server.crl (see the design note).

#include <functional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/result.h"
#include "lxd/lxd_api.h"

namespace bmas::lxd {

inline constexpr const char* kNodeTrustPrefix = "bmas-node-";
// The name under which `bmas lxd up` trusts the one certificate shared by every node.
inline constexpr const char* kSharedTrustName = "bmas-peers";
// The project a peer's certificate is restricted to: the one workspaces live in.
inline constexpr const char* kPeerProject = "default";

// The client certificate and key bmas presents to peers' LXDs, and whose they are.
struct PeerIdentity {
  std::string cert;
  std::string key;
  bool own = false;  // the node's own node.crt; false: one shared by every node
  std::string note;  // for the admin when the certificate is a shared one; "" otherwise
};

// [lxd] cert/key when set; else <node_dir>/node.crt and node.key when `joined` (the node has
// them); else the old shared /etc/bmas/lxd-peer.crt and .key. Pure.
PeerIdentity ChoosePeerIdentity(const LxdSettings& settings, bool joined);

// Whether <node_dir>/node.crt and node.key are there (`bmas node join` left them).
bool HasJoined(const LxdSettings& settings);

// <node_dir>/ca.crt, node.crt and lxd-peers/.
std::string NodeCaPath(const LxdSettings& settings);
std::string NodeCertPath(const LxdSettings& settings);
std::string PeerCertsDir(const LxdSettings& settings);

// A peer node's certificate (PEM), from <node_dir>/lxd-peers/<host>.crt.
struct NodeCertificate {
  std::string host;
  std::string pem;
};

// What to change in an LXD's trust store so that it trusts exactly the wanted peers.
struct PeerTrustPlan {
  std::vector<NodeCertificate> add;  // trust as bmas-node-<host>, restricted to kPeerProject
  std::vector<TrustedCertificate> remove;  // bmas-node-* entries no wanted peer holds
  std::vector<std::string> refused;  // "<host>: why", for certificates not trusted
  bool shared_trusted = false;       // the shared certificate (kSharedTrustName) is still trusted
  size_t peers = 0;                  // peer nodes trusted once the plan is carried out
};

// The plan for an LXD that trusts `trusted` now and should trust the certificates of `peers`.
// `verify` says whether a peer's certificate is one the cluster CA issued for that host
// (cluster::VerifyPeerCertificate); one it refuses, and a second certificate for the same host,
// is not trusted and its reason is kept. `self_pem`, this node's own certificate, is skipped.
// Entries not named bmas-node-* (the admin's own, the shared one) are left alone; an entry of the
// wanted fingerprint under another name counts as present. Pure.
PeerTrustPlan PlanPeerTrust(const std::vector<TrustedCertificate>& trusted,
                            const std::vector<NodeCertificate>& peers, const std::string& self_pem,
                            const std::function<Result<void>(const NodeCertificate&)>& verify);

// The certificates in `dir`, one `<host>.crt` per peer; other names are skipped. An absent
// directory is no peer. Errors name the file.
Result<std::vector<NodeCertificate>> ReadNodeCertificates(const std::string& dir);

// Carries out `plan` on `client` (removals first).
Result<void> ApplyPeerTrust(LxdApi& client, const PeerTrustPlan& plan);

// "trusts 3 peer nodes (added oss04; removed oss09); refused: ...": what ApplyPeerTrust did,
// for the admin.
std::string DescribePeerTrust(const PeerTrustPlan& plan);

}  // namespace bmas::lxd
