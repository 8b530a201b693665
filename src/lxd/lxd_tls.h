#pragma once

// LXD on a peer node, over HTTPS (its core.https_address): the transport that the workspace
// copy between nodes (LXD migration, pull mode) talks through, and the certificates it needs.
//
// Trust runs both ways by certificate, not by CA: the peer's LXD trusts bmas's client
// certificate (added to its trust store), and bmas pins the peer's self-signed server
// certificate, which it may first learn with FetchServerCertificate (trust on first use).

#include <chrono>
#include <string>

#include "common/result.h"
#include "lxd/lxd_client.h"

namespace bmas::lxd {

// A peer's LXD over HTTPS.
struct HttpsEndpoint {
  std::string url;          // "https://10.0.0.2:8443" (port defaults to 8443 when absent)
  std::string cert_file;    // bmas's client certificate (PEM), which the peer's LXD trusts
  std::string key_file;     // its private key (PEM)
  std::string server_cert;  // PEM the peer must present, compared exactly (pinned; LXD's are
                            // self-signed). Required.
};

// HTTP/1.1 over TLS to the endpoint, one connection per request, reads/writes bounded by timeout.
// Where() returns the URL. A server certificate other than the pinned one is kUnavailable with a
// message that names the URL and both SHA-256 fingerprints. A missing/unreadable cert or key file
// is kInvalidArgument naming the file.
HttpTransportPtr NewHttpsLxdTransport(HttpsEndpoint endpoint, std::chrono::milliseconds timeout);

// The certificate (PEM) a TLS server at `url` presents, not verified: for trust on first use.
Result<std::string> FetchServerCertificate(const std::string& url,
                                           std::chrono::milliseconds timeout);

// Creates a self-signed client certificate (EC P-384 or RSA 3072, valid 10 years, CN = common_name)
// and its key as PEM files when cert_file does not exist (key written 0600, parent dirs created);
// true when it made them, false when they were there. Errors name the file.
Result<bool> EnsureClientCertificate(const std::string& cert_file, const std::string& key_file,
                                     const std::string& common_name);

// The lowercase hex SHA-256 of a PEM certificate's DER (LXD's certificate fingerprint).
Result<std::string> CertificateFingerprint(const std::string& pem);

// "https://host:port" split; InvalidArgument for anything else (message shows the expected form).
struct HostPort {
  std::string host;  // without brackets for an IPv6 address
  std::string port;
};
Result<HostPort> ParseHttpsUrl(const std::string& url);

}  // namespace bmas::lxd
