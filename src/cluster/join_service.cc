#include "cluster/join_service.h"

#include <fmt/format.h>

namespace bmas::cluster {

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
  reply.ca_cert_pem = material.ca.cert_pem;
  reply.munge_key = material.munge_key;
  reply.bmas_toml = material.bmas_toml;
  reply.prolog = material.prolog;
  reply.epilog = material.epilog;
  reply.operator_secret = material.operator_secret;
  return reply;
}

}  // namespace bmas::cluster
