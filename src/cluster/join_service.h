#pragma once

// What the controller's join service decides for one request (docs/cluster-join.md, step 4):
// the secret first (before any work proportional to the request), then whether the host and
// address are a node of the inventory, then the CSR, which it signs. Pure apart from OpenSSL's
// random serial: the time and the token records are arguments.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cluster/cluster_ca.h"
#include "cluster/join_protocol.h"
#include "cluster/join_token.h"
#include "common/result.h"

namespace bmas::cluster {

// What the service hands out besides the node's certificate.
struct JoinMaterial {
  CertAndKey ca;
  // Signs the nodes' replica certificates (cluster_files.h); empty: none is signed.
  CertAndKey replica_ca;
  std::vector<NodeIdentity> nodes;  // the inventory's nodes: name and address
  std::string munge_key;
  std::string bmas_toml;
  std::string prolog;
  std::string epilog;
  std::string operator_secret;  // the controller's (hex), which its dashboard sends the agents
  // The node certificates the controller signed before, by host (LoadNodeCertificates): the
  // joining node's LXD is to trust those of the inventory's other nodes.
  std::map<std::string, std::string> node_certs;
};

// kPermissionDenied for a secret that is not one of `records` or expired, or a host/address that
// is not a node of the inventory; InvalidArgument for a CSR that is malformed or not the
// node's. Messages never quote the secret.
Result<JoinReply> DecideJoin(const JoinMaterial& material, const std::vector<TokenRecord>& records,
                             const JoinRequest& request, int64_t unix_now);

// What the service answers a node that asks for its LXD peers again (kLxdPeersPath) with
// `client_cert_pem`, the certificate it showed in the TLS handshake: kPermissionDenied unless it
// is the certificate the controller last signed for `host` (material.node_certs), from its CA
// and valid now, and `host` is a node of the inventory; else the other nodes' certificates.
Result<std::map<std::string, std::string>> DecideLxdPeers(const JoinMaterial& material,
                                                          const std::string& host,
                                                          const std::string& client_cert_pem,
                                                          int64_t unix_now);

}  // namespace bmas::cluster
