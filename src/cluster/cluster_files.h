#pragma once

// The controller's cluster identity on disk, under <state_dir>/cluster/ (0700, its owner's:
// root's on a real controller):
//   ca.key       the CA's private key (0600)
//   ca.crt       the CA's certificate (0600; nodes get it through the join, pinned by the token)
//   join-endpoint  where nodes reach the controller to join: "ADDRESS PORT" (0600)
//   join-tokens  what the controller keeps of each unexpired join token (0600, TokenRecord lines)
//   replica-ca.key, replica-ca.crt  the replica CA (0600 both): it signs the certificates that
//                inference replicas on the nodes serve with (replica.crt, made by each join), and
//                nothing else, so that the account replicas run as holds no key that a node's
//                agent, its LXD or the store would take for the node (../shared/SECURITY.md).
//                Gateways trust it for https:// backends; a public copy is <state_dir>/
//                replica-ca.crt (0644).
//   node-certs   the node certificate it last signed for each host (0600, a JSON object
//                {"oss01": PEM, ...}): what the join hands out as LXD peer trust
//   lock         held while any of them changes
// Files are written to a temporary name and renamed, opened without following links, in a
// directory refused when another account owns it or may write it (common/private_files.h).

#include <cstdint>
#include <map>
#include <string>

#include "cluster/cluster_ca.h"
#include "cluster/join_service.h"
#include "cluster/join_token.h"
#include "common/env.h"
#include "common/result.h"

namespace bmas::cluster {

// <state_dir>/cluster
std::string ClusterDir(const std::string& state_dir);

// Where nodes reach the controller to join.
struct JoinEndpoint {
  std::string address;
  uint16_t port = 0;
};

// The port the controller serves joins on unless told otherwise (Slurm's daemons take
// 6817-6820).
inline constexpr uint16_t kDefaultJoinPort = 6830;

struct ClusterIdentity {
  CertAndKey ca;
  std::string ca_sha256;  // 32 raw bytes
  bool created = false;   // made by this call (false: it was there already)
  // The replica CA; empty in a cluster directory made before there was one (EnsureClusterCa
  // adds it).
  CertAndKey replica_ca;
};

// The public copy of the replica CA's certificate that `bmas cluster init` writes for the
// gateways: <state_dir>/replica-ca.crt.
std::string ReplicaCaPath(const std::string& state_dir);

// The cluster's CA and the replica CA, each made when absent (idempotent: one that exists is
// kept as it is), the replica CA's public copy (ReplicaCaPath), and the join endpoint, written each time (a second init may move it). Creates the state directory
// (0755) and the cluster directory (0700) when absent. kPermissionDenied naming the directory
// and the fix for one this account does not own or others may write; InvalidArgument for an
// endpoint that a token cannot carry.
Result<ClusterIdentity> EnsureClusterCa(const std::string& state_dir,
                                        const std::string& cluster_name,
                                        const JoinEndpoint& endpoint, int64_t unix_now);

// The CA that EnsureClusterCa made. NotFound naming `bmas cluster init` when there is none.
Result<ClusterIdentity> LoadClusterCa(const std::string& state_dir);

// A new join token for the cluster whose CA and endpoint are under `state_dir`, valid
// `ttl_seconds` from `unix_now`, with a secret from `env`. Its record is added to join-tokens
// (expired records are dropped there). NotFound when there is no CA yet.
Result<JoinToken> IssueJoinToken(const std::string& state_dir, Env& env, int64_t unix_now,
                                 int64_t ttl_seconds = kDefaultJoinTokenTtlSeconds);

// Where nodes join, as EnsureClusterCa wrote it. NotFound naming `bmas cluster init`.
Result<JoinEndpoint> LoadJoinEndpoint(const std::string& state_dir);

// The controller's own certificate for the join service (controller.crt, controller.key),
// issued by the CA for `controller` when absent or not for it; kept otherwise.
Result<CertAndKey> EnsureControllerCertificate(const std::string& state_dir,
                                               const NodeIdentity& controller, int64_t unix_now);

// The join token records kept under `state_dir` (none when there is no file).
Result<std::vector<TokenRecord>> LoadTokenRecords(const std::string& state_dir);

// The node certificates the controller signed, by host (none when there is no file).
Result<std::map<std::string, std::string>> LoadNodeCertificates(const std::string& state_dir);

// Keeps `cert_pem` as `host`'s node certificate, replacing the one signed before.
Result<void> KeepNodeCertificate(const std::string& state_dir, const std::string& host,
                                 const std::string& cert_pem);

// The join service's answer to `request`: DecideJoin with the node certificates kept under
// `state_dir` as material.node_certs, and the certificate it signs kept there for the next
// nodes' LXD peer trust.
Result<JoinReply> DecideJoinAndKeep(const std::string& state_dir, JoinMaterial& material,
                                    const std::vector<TokenRecord>& records,
                                    const JoinRequest& request, int64_t unix_now);

// DecideLxdPeers with the node certificates kept under `state_dir`.
Result<std::map<std::string, std::string>> DecideLxdPeersFromKept(const std::string& state_dir,
                                                                  JoinMaterial& material,
                                                                  const std::string& host,
                                                                  const std::string& cert_pem,
                                                                  int64_t unix_now);

}  // namespace bmas::cluster
