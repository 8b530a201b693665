#include "cluster/join_token.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <ctime>

#include "cluster/cluster_ca.h"
#include "slurm/jwt.h"

namespace bmas::cluster {
namespace {

constexpr char kPurposeJoin = 'J';
constexpr size_t kCheckBytes = 4;
constexpr size_t kMaxAddress = 253;
// purpose, expiry, port, fingerprint, secret, address length; then the address and the check.
constexpr size_t kFixedBytes = 1 + 8 + 2 + kSha256Bytes + kJoinSecretBytes + 1;

std::string Sha256(std::string_view bytes) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<const char*>(md), len);
}

void PutBigEndian(std::string& out, uint64_t value, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

uint64_t GetBigEndian(std::string_view in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | static_cast<unsigned char>(in[at + i]);
  return value;
}

bool IsAddressText(std::string_view text) {
  if (text.empty() || text.size() > kMaxAddress) return false;
  return std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '-' || c == '.' || c == ':';
  });
}

Error Damaged(std::string_view why) {
  return InvalidArgument(fmt::format("the join token is damaged ({}): copy the whole `bmas node "
                                     "join` line that the controller printed, or make a new one "
                                     "there with `bmas cluster token`",
                                     why),
                         "token");
}

std::string_view Trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

}  // namespace

std::string NewJoinSecret(Env& env) {
  std::string secret(kJoinSecretBytes, '\0');
  env.RandomBytes(std::span(reinterpret_cast<uint8_t*>(secret.data()), secret.size()));
  return secret;
}

std::string FormatJoinToken(const JoinToken& token) {
  std::string payload;
  payload += kPurposeJoin;
  PutBigEndian(payload, static_cast<uint64_t>(token.expires_at), 8);
  PutBigEndian(payload, token.port, 2);
  payload += token.ca_sha256;
  payload += token.secret;
  payload += static_cast<char>(token.address.size());
  payload += token.address;
  payload += Sha256(payload).substr(0, kCheckBytes);
  return std::string(kJoinTokenPrefix) + Base64UrlEncode(payload);
}

Result<JoinToken> ParseJoinToken(std::string_view text, int64_t unix_now) {
  text = Trimmed(text);
  for (std::string_view lead : {"bmas node join ", "node join "}) {
    if (text.starts_with(lead)) text = Trimmed(text.substr(lead.size()));
  }
  if (text.empty()) {
    return InvalidArgument(
        "no join token given: pass the token that `bmas cluster init` or "
        "`bmas cluster token` printed on the controller",
        "token");
  }
  const size_t dot = text.find('.');
  const std::string_view head = text.substr(0, dot == std::string_view::npos ? 0 : dot);
  const bool versioned =
      head.size() > 4 && head.starts_with("bmas") &&
      std::all_of(head.begin() + 4, head.end(), [](unsigned char c) { return std::isdigit(c); });
  if (!versioned) {
    return InvalidArgument(fmt::format("this is not a bmas join token (one starts with \"{}\"): "
                                       "pass the token that `bmas cluster init` or `bmas cluster "
                                       "token` printed on the controller",
                                       kJoinTokenPrefix),
                           "token");
  }
  if (head != kJoinTokenPrefix.substr(0, kJoinTokenPrefix.size() - 1)) {
    return InvalidArgument(fmt::format("this join token is version {}, and this bmas reads "
                                       "version {} tokens: run the same bmas version on the "
                                       "controller and on the node",
                                       head.substr(4), kJoinTokenVersion),
                           "token");
  }
  auto payload = Base64UrlDecode(text.substr(dot + 1));
  if (!payload) return Damaged("not base64url");
  const std::string& p = *payload;
  if (p.size() < kFixedBytes + 1 + kCheckBytes) return Damaged("too short");
  const size_t address_size = static_cast<unsigned char>(p[kFixedBytes - 1]);
  if (p.size() != kFixedBytes + address_size + kCheckBytes) return Damaged("wrong length");
  const std::string_view body(p.data(), p.size() - kCheckBytes);
  const std::string check = Sha256(body).substr(0, kCheckBytes);
  if (CRYPTO_memcmp(check.data(), p.data() + body.size(), kCheckBytes) != 0) {
    return Damaged("its check digits do not match");
  }
  if (p[0] != kPurposeJoin) return Damaged("not a token for joining a node");

  JoinToken token;
  token.expires_at = static_cast<int64_t>(GetBigEndian(p, 1, 8));
  token.port = static_cast<uint16_t>(GetBigEndian(p, 9, 2));
  token.ca_sha256 = p.substr(11, kSha256Bytes);
  token.secret = p.substr(11 + kSha256Bytes, kJoinSecretBytes);
  token.address = p.substr(kFixedBytes, address_size);
  if (token.port == 0) return Damaged("port 0");
  if (!IsAddressText(token.address)) return Damaged("the controller's address is not an address");
  if (token.expires_at <= unix_now) {
    return InvalidArgument(
        fmt::format("the join token expired at {} ({} s ago): make a new one on the controller "
                    "with `bmas cluster token`",
                    UtcStamp(token.expires_at), unix_now - token.expires_at),
        "token");
  }
  return token;
}

Result<void> CheckControllerCa(const JoinToken& token, const std::string& ca_pem) {
  auto presented = CertificateSha256(ca_pem);
  if (!presented) {
    return Error{ErrorCode::kPermissionDenied,
                 "the controller presented a CA certificate that is not PEM",
                 {}};
  }
  if (presented->size() != token.ca_sha256.size() ||
      CRYPTO_memcmp(presented->data(), token.ca_sha256.data(), presented->size()) != 0) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the controller at {}:{} presented CA sha256:{}, not the token's "
                             "sha256:{}: it is not the controller that made the token (check "
                             "the address, or make a new token there)",
                             token.address, token.port, Hex(*presented), Hex(token.ca_sha256)),
                 {}};
  }
  return {};
}

TokenRecord RecordOf(const JoinToken& token) {
  return TokenRecord{Sha256(token.secret), token.expires_at};
}

std::string FormatTokenRecords(const std::vector<TokenRecord>& records) {
  std::string out;
  for (const TokenRecord& r : records) {
    out += fmt::format("v1 {} {}\n", Hex(r.secret_sha256), r.expires_at);
  }
  return out;
}

Result<std::vector<TokenRecord>> ParseTokenRecords(std::string_view text) {
  std::vector<TokenRecord> out;
  int line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (line.empty()) continue;
    auto bad = [&] {
      return InvalidArgument(
          fmt::format("line {} of the join token records is not "
                      "\"v1 <64 hex digits> <expiry>\"",
                      line_number));
    };
    if (!line.starts_with("v1 ") || line.size() < 3 + 2 * kSha256Bytes + 2 ||
        line[3 + 2 * kSha256Bytes] != ' ') {
      return bad();
    }
    TokenRecord record;
    for (size_t i = 0; i < kSha256Bytes; ++i) {
      unsigned value = 0;
      const std::string_view pair = line.substr(3 + 2 * i, 2);
      if (!std::isxdigit(static_cast<unsigned char>(pair[0])) ||
          !std::isxdigit(static_cast<unsigned char>(pair[1]))) {
        return bad();
      }
      value = static_cast<unsigned>(std::stoul(std::string(pair), nullptr, 16));
      record.secret_sha256 += static_cast<char>(value);
    }
    const std::string_view expiry = line.substr(4 + 2 * kSha256Bytes);
    if (expiry.empty() || expiry.size() > 18 ||
        !std::all_of(expiry.begin(), expiry.end(),
                     [](unsigned char c) { return std::isdigit(c); })) {
      return bad();
    }
    record.expires_at = std::stoll(std::string(expiry));
    out.push_back(std::move(record));
  }
  return out;
}

std::vector<TokenRecord> Unexpired(std::vector<TokenRecord> records, int64_t unix_now) {
  std::erase_if(records, [&](const TokenRecord& r) { return r.expires_at <= unix_now; });
  return records;
}

Result<void> CheckJoinSecret(const std::vector<TokenRecord>& records, std::string_view secret,
                             int64_t unix_now) {
  const std::string presented = Sha256(secret);
  // Every record is compared, whatever matched before; the branch-free fold keeps the time
  // independent of which record matched and where the bytes differ.
  int64_t expires_at = 0;
  for (const TokenRecord& r : records) {
    const bool same =
        r.secret_sha256.size() == presented.size() &&
        CRYPTO_memcmp(r.secret_sha256.data(), presented.data(), presented.size()) == 0;
    expires_at = std::max(expires_at, same ? r.expires_at : int64_t{0});
  }
  if (expires_at == 0) {
    return Error{ErrorCode::kPermissionDenied,
                 "the join token is not one this controller issued: make a new one on the "
                 "controller with `bmas cluster token`",
                 {}};
  }
  if (expires_at <= unix_now) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the join token expired at {}: make a new one on the controller "
                             "with `bmas cluster token`",
                             UtcStamp(expires_at)),
                 {}};
  }
  return {};
}

std::string UtcStamp(int64_t unix_seconds) {
  return fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(static_cast<std::time_t>(unix_seconds)));
}

}  // namespace bmas::cluster
