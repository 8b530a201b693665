#include "cluster/join_service.h"

#include <fmt/format.h>

#include <algorithm>

namespace bmas::cluster {
namespace {

// The kept certificates of the inventory's nodes other than `host`: the peers it is to trust.
std::map<std::string, std::string> LxdPeersOf(const JoinMaterial& material,
                                              const std::string& host) {
  std::map<std::string, std::string> peers;
  for (const NodeIdentity& n : material.nodes) {
    auto kept = material.node_certs.find(n.host);
    if (n.host != host && kept != material.node_certs.end()) peers[n.host] = kept->second;
  }
  return peers;
}

}  // namespace

Result<JoinReply> DecideJoin(const JoinMaterial& material, const std::vector<TokenRecord>& records,
                             const JoinRequest& request, int64_t unix_now) {
  if (auto ok = CheckJoinSecret(records, request.secret, unix_now); !ok) return ok.error();
  const NodeIdentity* node = nullptr;
  for (const NodeIdentity& n : material.nodes) {
    if (n.host == request.host) node = &n;
  }
  if (node == nullptr) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("'{}' is not a node of the cluster's inventory: add it there, run "
                             "`bmas cluster init` again, then join",
                             request.host),
                 "host"};
  }
  if (!node->address.empty() && node->address != request.address) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the inventory gives {} the address {}, not {}", node->host,
                             node->address, request.address),
                 "address"};
  }
  // A node the inventory gives no address is named by the address it joins from.
  const NodeIdentity identity{node->host, node->address.empty() ? request.address : node->address};
  auto cert = SignNodeCsr(material.ca, request.csr_pem, identity, unix_now);
  if (!cert) return cert.error();
  JoinReply reply;
  reply.node_cert_pem = std::move(*cert);
  // The replica key's certificate names the node as its node certificate does, from the replica
  // CA, which nothing that trusts a node's certificate trusts.
  if (!material.replica_ca.cert_pem.empty()) {
    auto replica = SignNodeCsr(material.replica_ca, request.replica_csr_pem, identity, unix_now);
    if (!replica) {
      return Error{replica.error().code,
                   fmt::format("the replica CSR: {}", replica.error().message), "replica_csr"};
    }
    reply.replica_cert_pem = std::move(*replica);
  }
  reply.ca_cert_pem = material.ca.cert_pem;
  reply.munge_key = material.munge_key;
  reply.bmas_toml = material.bmas_toml;
  reply.prolog = material.prolog;
  reply.epilog = material.epilog;
  reply.operator_secret = material.operator_secret;
  reply.lxd_peers = LxdPeersOf(material, node->host);
  return reply;
}

Result<std::map<std::string, std::string>> DecideLxdPeers(const JoinMaterial& material,
                                                          const std::string& host,
                                                          const std::string& client_cert_pem,
                                                          int64_t unix_now) {
  const bool listed = std::any_of(material.nodes.begin(), material.nodes.end(),
                                  [&](const NodeIdentity& n) { return n.host == host; });
  if (!listed) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("'{}' is not a node of the cluster's inventory", host), "host"};
  }
  if (client_cert_pem.empty()) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("{} showed no client certificate: a node asks with its node.crt", host),
                 {}};
  }
  if (auto ok = VerifyPeerCertificate(material.ca.cert_pem, client_cert_pem, unix_now, host); !ok) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the client certificate is not {}'s from this cluster's CA: {}", host,
                             ok.error().message),
                 {}};
  }
  auto kept = material.node_certs.find(host);
  auto kept_sha = kept == material.node_certs.end() ? Result<std::string>(NotFound("none"))
                                                    : CertificateSha256(kept->second);
  auto shown_sha = CertificateSha256(client_cert_pem);
  if (!kept_sha || !shown_sha || *kept_sha != *shown_sha) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the client certificate is not the one the controller last signed for "
                             "{}: it was replaced by a later join; run `bmas node join TOKEN` there "
                             "with a new token",
                             host),
                 {}};
  }
  return LxdPeersOf(material, host);
}

}  // namespace bmas::cluster
