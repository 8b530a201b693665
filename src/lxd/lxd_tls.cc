#include "lxd/lxd_tls.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ssl.hpp>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/asio.h"
#include "common/openssl_ptr.h"
#include "lxd/lxd_internal.h"

namespace bmas::lxd {
namespace {

namespace fs = std::filesystem;
namespace ssl = net::ssl;

constexpr const char* kDefaultPort = "8443";
constexpr long kValidDays = 3650;
// Backdates notBefore so that a peer whose clock runs a little behind accepts a new certificate.
constexpr long kBackdateSeconds = 3600;

using openssl::BignumPtr;
using openssl::BioPtr;
using openssl::ExtensionPtr;
using openssl::PkeyPtr;
using openssl::X509Ptr;

X509Ptr ParsePem(const std::string& pem) {
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  if (!bio) return nullptr;
  X509Ptr cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  ERR_clear_error();
  return cert;
}

std::string Der(X509* cert) {
  const int n = i2d_X509(cert, nullptr);
  if (n <= 0) return {};
  std::string out(static_cast<size_t>(n), '\0');
  auto* p = reinterpret_cast<unsigned char*>(out.data());
  i2d_X509(cert, &p);
  return out;
}

std::string Fingerprint(X509* cert) { return internal::Sha256Hex(Der(cert)); }

Result<std::string> ToPem(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), cert) != 1) {
    return Internal("cannot write a certificate as PEM: " + openssl::TakeError());
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

Result<std::string> KeyToPem(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return Internal("cannot write a private key as PEM: " + openssl::TakeError());
  }
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

bool IsIpAddress(const std::string& host) {
  beast::error_code ec;
  net::ip::make_address(host, ec);
  return !ec;
}

// "host:port" for the Host header, with an IPv6 address in brackets.
std::string Authority(const HostPort& hp) {
  return hp.host.find(':') == std::string::npos ? fmt::format("{}:{}", hp.host, hp.port)
                                                : fmt::format("[{}]:{}", hp.host, hp.port);
}

ssl::context ClientContext() {
  ssl::context ctx(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  return ctx;
}

// Loads bmas's client certificate and key into `ctx`.
Result<void> UseClientCertificate(ssl::context& ctx, const HttpsEndpoint& e) {
  for (const std::string* file : {&e.cert_file, &e.key_file}) {
    const bool is_cert = file == &e.cert_file;
    const char* what = is_cert ? "client certificate" : "client key";
    const char* param = is_cert ? "cert_file" : "key_file";
    if (file->empty()) return InvalidArgument(fmt::format("no {} file given", what), param);
    const int fd = ::open(file->c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return InvalidArgument(
          fmt::format("cannot read the {} {}: {}", what, *file, std::strerror(errno)), param);
    }
    ::close(fd);
  }
  SSL_CTX* c = ctx.native_handle();
  if (SSL_CTX_use_certificate_chain_file(c, e.cert_file.c_str()) != 1) {
    return InvalidArgument(fmt::format("the client certificate {} is not a PEM certificate: {}",
                                       e.cert_file, openssl::TakeError()),
                           "cert_file");
  }
  if (SSL_CTX_use_PrivateKey_file(c, e.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return InvalidArgument(
        fmt::format("the client key {} is not a PEM private key: {}", e.key_file, openssl::TakeError()),
        "key_file");
  }
  if (SSL_CTX_check_private_key(c) != 1) {
    return InvalidArgument(fmt::format("the client key {} is not the key of {}: {}", e.key_file,
                                       e.cert_file, openssl::TakeError()),
                           "key_file");
  }
  return {};
}

// One TLS connection: the TCP connect bounded by the timeout, then every read and write by
// SO_RCVTIMEO/SO_SNDTIMEO. Not movable: the verify callback holds `this`.
class TlsConnection {
 public:
  using Stream = ssl::stream<internal::BoundedSocket<tcp::socket>>;

  explicit TlsConnection(ssl::context& ctx)
      : socket_(io_), stream_(internal::BoundedSocket<tcp::socket>(socket_), ctx) {}
  TlsConnection(const TlsConnection&) = delete;
  TlsConnection& operator=(const TlsConnection&) = delete;

  // Connects and handshakes. The server's certificate is kept even when the handshake fails
  // after it came (a server that refuses bmas's client certificate still showed its own).
  Result<void> Open(const HostPort& hp, const std::string& where,
                    std::chrono::milliseconds timeout) {
    beast::error_code ec;
    // Name lookups are not bounded; peers are given by address.
    tcp::resolver resolver(io_);
    auto endpoints = resolver.resolve(hp.host, hp.port, ec);
    if (ec) return internal::TransportError("resolve", where, ec, timeout);
    // Asio's sync connect waits without a limit, so the connect runs async under run_for.
    bool done = false;
    net::async_connect(socket_, endpoints, [&](const beast::error_code& e, const tcp::endpoint&) {
      ec = e;
      done = true;
    });
    io_.run_for(timeout);
    if (!done) {
      socket_.close();
      io_.run();
      ec = net::error::timed_out;
    }
    if (ec) return internal::TransportError("connect", where, ec, timeout);
    // Blocking again (async_connect left the fd non-blocking) so that the timeouts apply.
    socket_.non_blocking(false, ec);
    if (ec) return internal::TransportError("connect", where, ec, timeout);
    internal::SetSocketTimeouts(socket_.native_handle(), timeout);

    // SNI takes host names only (RFC 6066).
    if (!IsIpAddress(hp.host)) SSL_set_tlsext_host_name(stream_.native_handle(), hp.host.c_str());
    // The chain is not checked against CAs: the caller compares the server's certificate with
    // the pinned one, or takes it on first use.
    stream_.set_verify_mode(ssl::verify_peer);
    stream_.set_verify_callback([this](bool, ssl::verify_context& vc) {
      X509_STORE_CTX* store = vc.native_handle();
      X509* cert = X509_STORE_CTX_get_current_cert(store);
      if (X509_STORE_CTX_get_error_depth(store) == 0 && cert != nullptr && !server_cert_) {
        X509_up_ref(cert);
        server_cert_.reset(cert);
      }
      return true;
    });
    stream_.handshake(ssl::stream_base::client, ec);
    if (ec) return internal::TransportError("TLS handshake", where, ec, timeout);
    return {};
  }

  // The server's certificate; null before the handshake got it.
  X509* server_cert() const { return server_cert_.get(); }
  Stream& stream() { return stream_; }

 private:
  net::io_context io_;
  tcp::socket socket_;
  Stream stream_;
  X509Ptr server_cert_;
};

class HttpsLxdTransport final : public HttpTransport {
 public:
  HttpsLxdTransport(HttpsEndpoint endpoint, std::chrono::milliseconds timeout)
      : e_(std::move(endpoint)), timeout_(timeout) {}

  Result<ClientResponse> RoundTrip(const ClientRequest& request) override {
    auto hp = ParseHttpsUrl(e_.url);
    if (!hp) return hp.error();
    X509Ptr pinned = ParsePem(e_.server_cert);
    if (!pinned) {
      return InvalidArgument(
          fmt::format("the pinned server certificate of {} is not a PEM certificate", e_.url),
          "server_cert");
    }
    // The files are read for each connection: a replaced certificate takes effect at once.
    ssl::context ctx = ClientContext();
    if (auto used = UseClientCertificate(ctx, e_); !used) return used.error();

    TlsConnection conn(ctx);
    auto opened = conn.Open(*hp, e_.url, timeout_);
    // Before the handshake's own error: a wrong server is the likelier story.
    if (conn.server_cert() != nullptr && Der(conn.server_cert()) != Der(pinned.get())) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("the TLS server at {} presented certificate {}, not the pinned {}",
                               e_.url, Fingerprint(conn.server_cert()), Fingerprint(pinned.get())),
                   {}};
    }
    if (!opened) return opened.error();
    if (conn.server_cert() == nullptr) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("the TLS server at {} presented no certificate", e_.url),
                   {}};
    }
    return internal::Exchange(conn.stream(), request, Authority(*hp), e_.url, timeout_);
  }

  std::string Where() const override { return e_.url; }

 private:
  HttpsEndpoint e_;
  std::chrono::milliseconds timeout_;
};

}  // namespace

HttpTransportPtr NewHttpsLxdTransport(HttpsEndpoint endpoint, std::chrono::milliseconds timeout) {
  return std::make_unique<HttpsLxdTransport>(std::move(endpoint), timeout);
}

Result<std::string> FetchServerCertificate(const std::string& url,
                                           std::chrono::milliseconds timeout) {
  auto hp = ParseHttpsUrl(url);
  if (!hp) return hp.error();
  ssl::context ctx = ClientContext();
  TlsConnection conn(ctx);
  auto opened = conn.Open(*hp, url, timeout);
  if (conn.server_cert() != nullptr) return ToPem(conn.server_cert());
  if (!opened) return opened.error();
  return Error{ErrorCode::kUnavailable,
               fmt::format("the TLS server at {} presented no certificate", url),
               {}};
}

Result<bool> EnsureClientCertificate(const std::string& cert_file, const std::string& key_file,
                                     const std::string& common_name) {
  if (cert_file.empty() || key_file.empty()) {
    return InvalidArgument("a client certificate needs both a certificate and a key file");
  }
  std::error_code fec;
  if (fs::exists(cert_file, fec)) return false;
  if (fec) return Internal(fmt::format("cannot look at {}: {}", cert_file, fec.message()));
  for (const std::string* file : {&cert_file, &key_file}) {
    const fs::path dir = fs::path(*file).parent_path();
    if (dir.empty()) continue;
    fs::create_directories(dir, fec);
    if (fec) {
      return Internal(
          fmt::format("cannot create {} for {}: {}", dir.string(), *file, fec.message()));
    }
  }

  // P-384, as LXD's own certificates.
  PkeyPtr key(EVP_EC_gen("P-384"));
  if (!key) return Internal(fmt::format("cannot make a key for {}: {}", key_file, openssl::TakeError()));
  X509Ptr cert(X509_new());
  unsigned char serial[16];
  bool ok = cert && RAND_bytes(serial, sizeof serial) == 1;
  BignumPtr bn(ok ? BN_bin2bn(serial, sizeof serial, nullptr) : nullptr);
  ok = ok && bn && X509_set_version(cert.get(), X509_VERSION_3) == 1 &&
       BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) != nullptr &&
       X509_gmtime_adj(X509_getm_notBefore(cert.get()), -kBackdateSeconds) != nullptr &&
       X509_time_adj_ex(X509_getm_notAfter(cert.get()), kValidDays, 0, nullptr) != nullptr &&
       X509_set_pubkey(cert.get(), key.get()) == 1;
  X509_NAME* name = ok ? X509_get_subject_name(cert.get()) : nullptr;
  ok = ok &&
       X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                  -1, 0) == 1 &&
       X509_set_issuer_name(cert.get(), name) == 1;
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  if (ok) X509V3_set_ctx(&v3, cert.get(), cert.get(), nullptr, nullptr, 0);
  for (const auto& [nid, value] : {std::pair{NID_basic_constraints, "critical,CA:FALSE"},
                                   {NID_key_usage, "critical,digitalSignature"},
                                   {NID_ext_key_usage, "clientAuth"},
                                   {NID_subject_key_identifier, "hash"}}) {
    if (!ok) break;
    ExtensionPtr ext(X509V3_EXT_conf_nid(nullptr, &v3, nid, value));
    ok = ext && X509_add_ext(cert.get(), ext.get(), -1) == 1;
  }
  ok = ok && X509_sign(cert.get(), key.get(), EVP_sha384()) > 0;
  if (!ok) {
    return Internal(fmt::format("cannot make the certificate {}: {}", cert_file, openssl::TakeError()));
  }

  auto key_pem = KeyToPem(key.get());
  if (!key_pem) return key_pem.error();
  auto cert_pem = ToPem(cert.get());
  if (!cert_pem) return cert_pem.error();
  // The key first: the certificate's presence says both are there.
  if (auto w = internal::WriteAtomically(key_file, *key_pem, 0600); !w) return w.error();
  if (auto w = internal::WriteAtomically(cert_file, *cert_pem, 0644); !w) return w.error();
  return true;
}

Result<std::string> CertificateFingerprint(const std::string& pem) {
  X509Ptr cert = ParsePem(pem);
  if (!cert) return InvalidArgument("not a PEM certificate");
  return Fingerprint(cert.get());
}

Result<HostPort> ParseHttpsUrl(const std::string& url) {
  auto bad = [&] {
    return InvalidArgument(fmt::format("'{}' is not an HTTPS URL of the form https://HOST[:PORT] "
                                       "(e.g. https://10.0.0.2:8443; the port defaults to {})",
                                       url, kDefaultPort),
                           "url");
  };
  constexpr std::string_view kScheme = "https://";
  std::string_view rest(url);
  if (!rest.starts_with(kScheme)) return bad();
  rest.remove_prefix(kScheme.size());
  if (rest.ends_with('/')) rest.remove_suffix(1);

  HostPort out;
  std::string_view port;
  bool has_port = false;
  if (rest.starts_with('[')) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return bad();
    out.host = std::string(rest.substr(1, close - 1));
    rest.remove_prefix(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return bad();
      port = rest.substr(1);
      has_port = true;
    }
    if (!IsIpAddress(out.host)) return bad();
  } else {
    const size_t colon = rest.find(':');
    out.host = std::string(rest.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = rest.substr(colon + 1);
      has_port = true;
    }
    for (unsigned char c : out.host) {
      if (!std::isalnum(c) && c != '.' && c != '-' && c != '_') return bad();
    }
  }
  if (out.host.empty()) return bad();
  if (!has_port) {
    out.port = kDefaultPort;
    return out;
  }
  if (port.empty() || port.size() > 5) return bad();
  int value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return bad();
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > 65535) return bad();
  out.port = std::string(port);
  return out;
}

}  // namespace bmas::lxd
