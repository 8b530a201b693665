#pragma once

// What a node and the controller's join service say to each other, once the node has checked
// the controller's certificate (docs/cluster-join.md). One request, one reply, each a JSON
// object in the body of an HTTP/1.1 POST and its answer, over TLS:
//
//   request  {"protocol": "2", "bmas": "0.1.0", "secret": hex, "host": "oss01",
//             "address": "10.0.0.11", "csr": PEM, "replica_csr": PEM}
//   reply    {"protocol": "2", "bmas": "0.1.0", "node_cert": PEM, "ca_cert": PEM,
//             "replica_cert": PEM, "munge_key": hex, "bmas_toml": text, "prolog": text,
//             "epilog": text, "operator_secret": hex, "lxd_peers": {"oss02": PEM, ...}}
//
// "protocol" is the version of these messages (kJoinProtocol), "bmas" the sender's release. A
// message of another protocol is refused first, with both sides' versions and which side to
// upgrade (InvalidArgument, param "protocol"); protocol 1 (bmas before replica certificates) sent neither
// member. Then both sides refuse a message over its size bound, one that is not an object of
// exactly these members (strings; lxd_peers an object of strings keyed by host names), a
// repeated key and an unknown one. Pure.

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"

namespace bmas::cluster {

inline constexpr std::string_view kJoinPath = "/v1/join";
// Raised whenever a member is added to, or changes meaning in, a join request or reply.
inline constexpr int kJoinProtocol = 2;
inline constexpr size_t kMaxJoinRequestBytes = 16 * 1024;
inline constexpr size_t kMaxJoinReplyBytes = 1024 * 1024;

struct JoinRequest {
  std::string secret;   // the token's secret, raw bytes
  std::string host;     // the node's host name
  std::string address;  // its address, as the inventory has it
  std::string csr_pem;  // a CSR for the node's own key
  // A CSR for the key the node's inference replicas serve with (a second key, the service
  // account's), for the replica CA.
  std::string replica_csr_pem;
  // What ParseJoinRequest read: the node's release (FormatJoinRequest sends this build's); ""
  // when it sent none, or one that is not a version's characters.
  std::string bmas_version;
};

struct JoinReply {
  std::string node_cert_pem;  // the CSR, signed by the cluster CA
  std::string ca_cert_pem;
  // The replica CSR, signed by the replica CA; "" when the controller has none (a cluster
  // initialised before there was one: `bmas cluster init` again adds it).
  std::string replica_cert_pem;
  std::string munge_key;  // raw bytes
  std::string bmas_toml;  // the node's /etc/bmas/bmas.toml
  std::string prolog;     // Slurm's Prolog= and Epilog= scripts
  std::string epilog;
  // The controller's operator secret (hex): the node's agent asks it of the dashboard and
  // Prometheus on the controller, which send it.
  std::string operator_secret;
  // The node certificates of the nodes that joined before, by host: the certificates this
  // node's LXD is to trust (<node_dir>/lxd-peers/HOST.crt, docs/cluster-join.md).
  std::map<std::string, std::string> lxd_peers;
  // What ParseJoinReply read: the controller's release (FormatJoinReply sends this build's); ""
  // when it sent none, or one that is not a version's characters.
  std::string bmas_version;
};

// The note for the admin of a node that joined a controller of another bmas release: the join
// protocol is the same, but every machine of a cluster is meant to run one release. nullopt
// when the releases match, or the controller sent none.
std::optional<std::string> ReleaseMismatch(std::string_view controller_release,
                                           std::string_view node_release);

// A node that joined asks again for the certificates its LXD is to trust (the nodes that joined
// after it, less those that were replaced), over TLS with its node certificate as the client
// certificate; no secret is sent:
//   request  {"host": "oss01"}
//   reply    {"lxd_peers": {"oss02": PEM, ...}}
inline constexpr std::string_view kLxdPeersPath = "/v1/lxd-peers";

std::string FormatLxdPeersRequest(const std::string& host);
Result<std::string> ParseLxdPeersRequest(std::string_view body);
std::string FormatLxdPeersReply(const std::map<std::string, std::string>& peers);
Result<std::map<std::string, std::string>> ParseLxdPeersReply(std::string_view body);

// Whether `host` may name a file: letters, digits, '-' and '.', not starting with '.'.
bool IsPeerHostName(std::string_view host);

std::string FormatJoinRequest(const JoinRequest& request);
// InvalidArgument naming the problem; the message never quotes the secret.
Result<JoinRequest> ParseJoinRequest(std::string_view body);

std::string FormatJoinReply(const JoinReply& reply);
Result<JoinReply> ParseJoinReply(std::string_view body);

// The bytes that lower-case or upper-case hex digits stand for; nullopt-like error for others.
Result<std::string> FromHex(std::string_view hex);

}  // namespace bmas::cluster
