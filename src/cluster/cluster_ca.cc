#include "cluster/cluster_ca.h"

#include <fmt/format.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include <boost/asio/ip/address.hpp>
#include <cctype>
#include <cstring>
#include <utility>

#include "common/openssl_ptr.h"

namespace bmas::cluster {
namespace {

// Backdates notBefore so that a peer whose clock runs a little behind accepts a new certificate.
constexpr int64_t kBackdateSeconds = 3600;
constexpr int64_t kSecondsPerDay = 86400;

using openssl::TakeError;
using Cert = openssl::X509Ptr;
using Key = openssl::PkeyPtr;
using Bio = openssl::BioPtr;
using Bn = openssl::BignumPtr;
using Ext = openssl::ExtensionPtr;
using Store = openssl::StorePtr;
using StoreCtx = openssl::StoreCtxPtr;
using Req = openssl::X509ReqPtr;

Bio MemoryOf(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

Cert ReadCert(const std::string& pem) {
  Bio bio = MemoryOf(pem);
  Cert cert(bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  ERR_clear_error();
  return cert;
}

Key ReadKey(const std::string& pem) {
  Bio bio = MemoryOf(pem);
  Key key(bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  ERR_clear_error();
  return key;
}

// What `write` put into a memory BIO, or "" when it failed.
template <class Write>
std::string WrittenPem(Write write) {
  Bio bio(BIO_new(BIO_s_mem()));
  if (!bio || !write(bio.get())) return {};
  char* data = nullptr;
  const long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

bool IsIpLiteral(const std::string& text) {
  boost::system::error_code ec;
  boost::asio::ip::make_address(text, ec);
  return !ec;
}

// A DNS name as RFC 1123 allows: letters, digits, '-' and '.', at most 253 characters.
bool IsHostName(const std::string& text) {
  if (text.empty() || text.size() > 253 || text.front() == '.' || text.front() == '-') {
    return false;
  }
  for (unsigned char c : text) {
    if (!std::isalnum(c) && c != '-' && c != '.') return false;
  }
  return true;
}

// A certificate for `key`'s public half, with a random serial, the times and the subject CN,
// unsigned.
Result<Cert> NewCertificate(EVP_PKEY* key, const std::string& common_name, int64_t unix_now,
                            int64_t valid_days) {
  Cert cert(X509_new());
  unsigned char serial[16];
  const bool random = cert && RAND_bytes(serial, sizeof serial) == 1;
  serial[0] &= 0x7f;  // a positive serial (RFC 5280 4.1.2.2)
  Bn bn(random ? BN_bin2bn(serial, sizeof serial, nullptr) : nullptr);
  time_t now = static_cast<time_t>(unix_now);
  X509_NAME* name = cert ? X509_get_subject_name(cert.get()) : nullptr;
  const bool ok =
      bn && X509_set_version(cert.get(), X509_VERSION_3) == 1 &&
      BN_to_ASN1_INTEGER(bn.get(), X509_get_serialNumber(cert.get())) != nullptr &&
      X509_time_adj_ex(X509_getm_notBefore(cert.get()), 0, -kBackdateSeconds, &now) != nullptr &&
      X509_time_adj_ex(X509_getm_notAfter(cert.get()), static_cast<int>(valid_days), 0, &now) !=
          nullptr &&
      X509_set_pubkey(cert.get(), key) == 1 &&
      X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                 reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                 -1, 0) == 1;
  if (!ok) return Internal("cannot fill in a certificate: " + TakeError());
  return cert;
}

Result<Key> NewKey() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) return Internal("cannot make an EC P-256 key: " + TakeError());
  return key;
}

// Adds X.509v3 extensions, given as OpenSSL config values, with `issuer` as the issuer.
bool AddExtensions(X509* cert, X509* issuer,
                   std::initializer_list<std::pair<int, std::string>> extensions) {
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, issuer, cert, nullptr, nullptr, 0);
  for (const auto& [nid, value] : extensions) {
    if (value.empty()) continue;
    Ext ext(X509V3_EXT_conf_nid(nullptr, &v3, nid, value.c_str()));
    if (!ext || X509_add_ext(cert, ext.get(), -1) != 1) return false;
  }
  return true;
}

Result<CertAndKey> Finish(X509* cert, EVP_PKEY* key) {
  CertAndKey out;
  out.cert_pem = WrittenPem([&](BIO* b) { return PEM_write_bio_X509(b, cert) == 1; });
  out.key_pem = WrittenPem([&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  });
  if (out.cert_pem.empty() || out.key_pem.empty()) {
    return Internal("cannot write a certificate or key as PEM: " + TakeError());
  }
  return out;
}

// The subjectAltName value a node's certificate carries: "DNS:<host>", then "IP:<address>" or
// "DNS:<address>". InvalidArgument for a malformed host or address.
Result<std::string> SubjectAltNames(const NodeIdentity& node) {
  if (!IsHostName(node.host)) {
    return InvalidArgument(
        fmt::format("'{}' is not a host name (letters, digits, '-' and '.')", node.host), "host");
  }
  std::string san = "DNS:" + node.host;
  if (!node.address.empty()) {
    if (IsIpLiteral(node.address)) {
      san += ",IP:" + node.address;
    } else if (IsHostName(node.address)) {
      if (node.address != node.host) san += ",DNS:" + node.address;
    } else {
      return InvalidArgument(
          fmt::format("'{}' is neither an IP address nor a host name", node.address), "address");
    }
  }
  return san;
}

// The subjectAltName extension's names in SubjectAltNames's form ("DNS:a,IP:10.0.0.1"); other
// kinds of name appear as "OTHER", so that they never match.
std::string NamesText(X509_EXTENSION* ext) {
  openssl::GeneralNamesPtr names(static_cast<GENERAL_NAMES*>(X509V3_EXT_d2i(ext)));
  std::string out;
  for (int i = 0; names && i < sk_GENERAL_NAME_num(names.get()); ++i) {
    const GENERAL_NAME* name = sk_GENERAL_NAME_value(names.get(), i);
    if (!out.empty()) out += ',';
    if (name->type == GEN_DNS) {
      const ASN1_STRING* s = name->d.dNSName;
      out += "DNS:";
      out.append(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                 static_cast<size_t>(ASN1_STRING_length(s)));
    } else if (name->type == GEN_IPADD) {
      const ASN1_STRING* s = name->d.iPAddress;
      boost::system::error_code ec;
      std::string text;
      if (ASN1_STRING_length(s) == 4) {
        boost::asio::ip::address_v4::bytes_type b;
        std::memcpy(b.data(), ASN1_STRING_get0_data(s), 4);
        text = boost::asio::ip::address_v4(b).to_string();
      } else if (ASN1_STRING_length(s) == 16) {
        boost::asio::ip::address_v6::bytes_type b;
        std::memcpy(b.data(), ASN1_STRING_get0_data(s), 16);
        text = boost::asio::ip::address_v6(b).to_string();
      }
      out += text.empty() ? std::string("OTHER") : "IP:" + text;
    } else {
      out += "OTHER";
    }
  }
  ERR_clear_error();
  return out;
}

// The first CN of `name`, or "".
std::string CommonNameOf(X509_NAME* name) {
  const int at = name ? X509_NAME_get_index_by_NID(name, NID_commonName, -1) : -1;
  if (at < 0) return {};
  const ASN1_STRING* s = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, at));
  return std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                     static_cast<size_t>(ASN1_STRING_length(s)));
}

// A node certificate for `key` (a public key), signed by `ca`.
Result<Cert> SignForKey(const CertAndKey& ca, EVP_PKEY* key, const NodeIdentity& node,
                        int64_t unix_now, int64_t valid_days) {
  auto san = SubjectAltNames(node);
  if (!san) return san.error();
  Cert ca_cert = ReadCert(ca.cert_pem);
  Key ca_key = ReadKey(ca.key_pem);
  if (!ca_cert || !ca_key) {
    return InvalidArgument("the cluster CA's certificate or key is not PEM", "ca");
  }
  if (X509_check_private_key(ca_cert.get(), ca_key.get()) != 1) {
    ERR_clear_error();
    return InvalidArgument("the cluster CA's key is not the key of its certificate", "ca");
  }
  auto made = NewCertificate(key, node.host, unix_now, valid_days);
  if (!made) return made.error();
  Cert& cert = *made;
  const bool ok = X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert.get())) == 1 &&
                  AddExtensions(cert.get(), ca_cert.get(),
                                {{NID_basic_constraints, "critical,CA:FALSE"},
                                 {NID_key_usage, "critical,digitalSignature"},
                                 {NID_ext_key_usage, "serverAuth,clientAuth"},
                                 {NID_subject_alt_name, *san},
                                 {NID_subject_key_identifier, "hash"},
                                 {NID_authority_key_identifier, "keyid:always"}}) &&
                  X509_sign(cert.get(), ca_key.get(), EVP_sha256()) > 0;
  if (!ok) {
    return Internal(fmt::format("cannot issue a certificate for {}: {}", node.host, TakeError()));
  }
  return std::move(cert);
}

}  // namespace

Result<CertAndKey> MakeClusterCa(const std::string& cluster_name, int64_t unix_now,
                                 int64_t valid_days) {
  auto key = NewKey();
  if (!key) return key.error();
  auto made = NewCertificate(key->get(), fmt::format("bmas cluster CA {}", cluster_name), unix_now,
                             valid_days);
  if (!made) return made.error();
  Cert& cert = *made;
  const bool ok = X509_set_issuer_name(cert.get(), X509_get_subject_name(cert.get())) == 1 &&
                  AddExtensions(cert.get(), cert.get(),
                                {{NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                 {NID_key_usage, "critical,keyCertSign,cRLSign"},
                                 {NID_subject_key_identifier, "hash"}}) &&
                  X509_sign(cert.get(), key->get(), EVP_sha256()) > 0;
  if (!ok) return Internal("cannot make the cluster CA certificate: " + TakeError());
  return Finish(cert.get(), key->get());
}

Result<CertAndKey> IssueNodeCertificate(const CertAndKey& ca, const NodeIdentity& node,
                                        int64_t unix_now, int64_t valid_days) {
  if (auto names = SubjectAltNames(node); !names) return names.error();
  auto key = NewKey();
  if (!key) return key.error();
  auto cert = SignForKey(ca, key->get(), node, unix_now, valid_days);
  if (!cert) return cert.error();
  return Finish(cert->get(), key->get());
}

Result<KeyAndCsr> MakeNodeCsr(const NodeIdentity& node) {
  auto names = SubjectAltNames(node);
  if (!names) return names.error();
  auto key = NewKey();
  if (!key) return key.error();
  Req req(X509_REQ_new());
  X509_NAME* name = req ? X509_REQ_get_subject_name(req.get()) : nullptr;
  X509V3_CTX v3;
  X509V3_set_ctx_nodb(&v3);
  X509V3_set_ctx(&v3, nullptr, nullptr, req.get(), nullptr, 0);
  Ext san(X509V3_EXT_conf_nid(nullptr, &v3, NID_subject_alt_name, names->c_str()));
  openssl::ExtensionStackPtr exts(sk_X509_EXTENSION_new_null());
  const bool ok = req && san && exts && X509_REQ_set_version(req.get(), 0) == 1 &&
                  X509_NAME_add_entry_by_txt(
                      name, "CN", MBSTRING_UTF8,
                      reinterpret_cast<const unsigned char*>(node.host.c_str()), -1, -1, 0) == 1 &&
                  X509_REQ_set_pubkey(req.get(), key->get()) == 1 &&
                  sk_X509_EXTENSION_push(exts.get(), san.get()) > 0 && san.release() != nullptr &&
                  X509_REQ_add_extensions(req.get(), exts.get()) == 1 &&
                  X509_REQ_sign(req.get(), key->get(), EVP_sha256()) > 0;
  if (!ok) return Internal(fmt::format("cannot make a CSR for {}: {}", node.host, TakeError()));
  KeyAndCsr out;
  out.csr_pem = WrittenPem([&](BIO* b) { return PEM_write_bio_X509_REQ(b, req.get()) == 1; });
  out.key_pem = WrittenPem([&](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key->get(), nullptr, nullptr, 0, nullptr, nullptr) == 1;
  });
  if (out.csr_pem.empty() || out.key_pem.empty()) {
    return Internal("cannot write a CSR or key as PEM: " + TakeError());
  }
  return out;
}

Result<std::string> SignNodeCsr(const CertAndKey& ca, const std::string& csr_pem,
                                const NodeIdentity& node, int64_t unix_now, int64_t valid_days) {
  auto expected = SubjectAltNames(node);
  if (!expected) return expected.error();
  Bio bio = MemoryOf(csr_pem);
  Req req(bio ? PEM_read_bio_X509_REQ(bio.get(), nullptr, nullptr, nullptr) : nullptr);
  ERR_clear_error();
  if (!req) return InvalidArgument("the certificate signing request is not PEM", "csr");
  EVP_PKEY* public_key = X509_REQ_get0_pubkey(req.get());
  if (public_key == nullptr || X509_REQ_verify(req.get(), public_key) != 1) {
    ERR_clear_error();
    return InvalidArgument("the certificate signing request's signature does not verify", "csr");
  }
  if (EVP_PKEY_get_base_id(public_key) != EVP_PKEY_EC || EVP_PKEY_get_bits(public_key) < 256) {
    return InvalidArgument("the certificate signing request's key is not EC P-256 or larger",
                           "csr");
  }
  const std::string cn = CommonNameOf(X509_REQ_get_subject_name(req.get()));
  if (cn != node.host) {
    return InvalidArgument(
        fmt::format("the certificate signing request is for '{}', not for {}", cn, node.host),
        "csr");
  }
  openssl::ExtensionStackPtr exts(X509_REQ_get_extensions(req.get()));
  std::string asked;
  for (int i = 0; exts && i < sk_X509_EXTENSION_num(exts.get()); ++i) {
    X509_EXTENSION* ext = sk_X509_EXTENSION_value(exts.get(), i);
    if (OBJ_obj2nid(X509_EXTENSION_get_object(ext)) == NID_subject_alt_name) {
      asked = NamesText(ext);
    }
  }
  if (asked != *expected) {
    return InvalidArgument(
        fmt::format("the certificate signing request names '{}', not '{}'", asked, *expected),
        "csr");
  }
  auto cert = SignForKey(ca, public_key, node, unix_now, valid_days);
  if (!cert) return cert.error();
  std::string pem = WrittenPem([&](BIO* b) { return PEM_write_bio_X509(b, cert->get()) == 1; });
  if (pem.empty()) return Internal("cannot write a certificate as PEM: " + TakeError());
  return pem;
}

Result<void> VerifyPeerCertificate(const std::string& ca_pem, const std::string& peer_pem,
                                   int64_t unix_now, const std::string& expect_host) {
  auto denied = [](std::string why) {
    return Error{ErrorCode::kPermissionDenied, std::move(why), {}};
  };
  Cert ca = ReadCert(ca_pem);
  if (!ca) return InvalidArgument("the cluster CA certificate is not PEM", "ca");
  Cert peer = ReadCert(peer_pem);
  if (!peer) return denied("the peer's certificate is not a PEM certificate");
  if (X509_check_ca(peer.get()) != 0) {
    return denied("the peer presented a CA certificate, not a node certificate");
  }
  Store store(X509_STORE_new());
  StoreCtx ctx(X509_STORE_CTX_new());
  if (!store || !ctx || X509_STORE_add_cert(store.get(), ca.get()) != 1 ||
      X509_STORE_CTX_init(ctx.get(), store.get(), peer.get(), nullptr) != 1) {
    return Internal("cannot set up certificate verification: " + TakeError());
  }
  X509_VERIFY_PARAM* param = X509_STORE_CTX_get0_param(ctx.get());
  X509_VERIFY_PARAM_set_time(param, static_cast<time_t>(unix_now));
  X509_VERIFY_PARAM_set_flags(param, X509_V_FLAG_X509_STRICT);
  if (X509_verify_cert(ctx.get()) != 1) {
    const int code = X509_STORE_CTX_get_error(ctx.get());
    ERR_clear_error();
    return denied(fmt::format("the peer's certificate does not chain to the cluster CA: {}",
                              X509_verify_cert_error_string(code)));
  }
  if (!expect_host.empty()) {
    const int named = IsIpLiteral(expect_host)
                          ? X509_check_ip_asc(peer.get(), expect_host.c_str(), 0)
                          : X509_check_host(peer.get(), expect_host.data(), expect_host.size(),
                                            X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS, nullptr);
    if (named != 1) {
      return denied(fmt::format("the peer's certificate is not for {}", expect_host));
    }
  }
  return {};
}

Result<std::string> CertificateSha256(const std::string& pem) {
  Cert cert = ReadCert(pem);
  if (!cert) return InvalidArgument("not a PEM certificate");
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (X509_digest(cert.get(), EVP_sha256(), md, &len) != 1) {
    return Internal("cannot hash a certificate: " + TakeError());
  }
  return std::string(reinterpret_cast<const char*>(md), len);
}

std::string Hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += fmt::format("{:02x}", b);
  return out;
}

}  // namespace bmas::cluster
