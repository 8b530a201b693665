#pragma once

// The cluster's certificate authority: the identity of bmas's own channels between the
// controller and the nodes (../shared/SECURITY.md: "each node has credentials of its own").
// `bmas cluster init` makes the CA on the controller; every node gets a certificate of its own,
// issued for its host name and address; a peer is trusted when its certificate chains to the
// CA. A node learns which CA to trust from the join token, which carries the CA certificate's
// SHA-256 fingerprint. Pure apart from OpenSSL's random generator: times are arguments.

#include <cstdint>
#include <string>

#include "common/result.h"

namespace bmas::cluster {

// A certificate and its private key, both PEM.
struct CertAndKey {
  std::string cert_pem;
  std::string key_pem;
};

inline constexpr int64_t kCaValidDays = 3650;
inline constexpr int64_t kNodeCertValidDays = 3650;

// A new CA: an EC P-256 key and a self-signed certificate (CN "bmas cluster CA <cluster>",
// CA:TRUE with path length 0, keyCertSign and cRLSign), valid from an hour before `unix_now`
// (for peers whose clock lags) for `valid_days`.
Result<CertAndKey> MakeClusterCa(const std::string& cluster_name, int64_t unix_now,
                                 int64_t valid_days = kCaValidDays);

// Who a node certificate is for: its host name (a DNS SAN and the CN) and its address (an IP
// SAN; a host name there becomes a second DNS SAN). `address` may be empty.
struct NodeIdentity {
  std::string host;
  std::string address;
};

// A new EC P-256 key and a certificate for `node` signed by `ca`, for both TLS server and client
// use. InvalidArgument for an empty or malformed host name, or a CA whose key is not its own.
Result<CertAndKey> IssueNodeCertificate(const CertAndKey& ca, const NodeIdentity& node,
                                        int64_t unix_now, int64_t valid_days = kNodeCertValidDays);

// A node's private key and a certificate signing request for it (PEM both).
struct KeyAndCsr {
  std::string key_pem;
  std::string csr_pem;
};

// A new EC P-256 key and a CSR for `node` (the CN and names IssueNodeCertificate would give),
// made on the node, whose key never leaves it. InvalidArgument for a malformed host or address.
Result<KeyAndCsr> MakeNodeCsr(const NodeIdentity& node);

// A certificate for the key of the CSR `csr_pem` (PEM), issued by `ca` for `node` as
// IssueNodeCertificate issues them: the extensions are the CA's, none is taken from the CSR.
// InvalidArgument (param "csr") when the CSR is not PEM, its signature does not verify, its key
// is not EC of 256 bits or more, or its CN or subjectAltNames are not exactly `node`'s.
Result<std::string> SignNodeCsr(const CertAndKey& ca, const std::string& csr_pem,
                                const NodeIdentity& node, int64_t unix_now,
                                int64_t valid_days = kNodeCertValidDays);

// Whether `peer_pem` chains to the CA `ca_pem` at `unix_now` (signature, validity, purpose).
// With `expect_host` non-empty, the certificate must also name that host or address.
// kPermissionDenied naming the reason when it does not.
Result<void> VerifyPeerCertificate(const std::string& ca_pem, const std::string& peer_pem,
                                   int64_t unix_now, const std::string& expect_host = {});

// The SHA-256 of a PEM certificate's DER form: 32 bytes, raw.
Result<std::string> CertificateSha256(const std::string& pem);

// 64 lower-case hex digits for 32 raw bytes (any bytes, as hex).
std::string Hex(std::string_view bytes);

}  // namespace bmas::cluster
