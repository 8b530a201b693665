#include "slurm/jwt.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/json_object.h"

namespace bmas {

// Both directions go through OpenSSL's standard base64 and swap the two characters that
// base64url replaces ("+/" for "-_") and its padding.
std::string Base64UrlEncode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  while (!out.empty() && out.back() == '=') out.pop_back();
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  return out;
}

Result<std::string> Base64UrlDecode(std::string_view text) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return InvalidArgument("truncated base64url text");
  std::string standard(text);
  for (char& c : standard) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  const size_t padding = (4 - standard.size() % 4) % 4;
  standard.append(padding, '=');
  std::string out(standard.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(standard.data()),
                                static_cast<int>(standard.size()));
  // EVP_DecodeBlock also skips blanks at either end; base64url has none.
  if (n < 0 || standard.find_first_of(" \t\r\n") != std::string::npos) {
    return InvalidArgument("the text is not base64url");
  }
  out.resize(static_cast<size_t>(n) - padding);  // it counts the zero bytes of the padding
  return out;
}

Result<JwtClaims> DecodeJwtClaims(std::string_view token) {
  const size_t first = token.find('.');
  const size_t second = first == std::string_view::npos ? first : token.find('.', first + 1);
  if (second == std::string_view::npos) {
    return InvalidArgument("the token is not a JWT (header.payload.signature)", "token");
  }
  auto payload = Base64UrlDecode(token.substr(first + 1, second - first - 1));
  if (!payload) return InvalidArgument("the JWT payload is not base64url", "token");
  rapidjson::Document doc;
  doc.Parse(payload->data(), payload->size());
  if (doc.HasParseError() || !doc.IsObject() || !doc.HasMember("exp") || !doc["exp"].IsInt64()) {
    return InvalidArgument("the JWT payload has no numeric \"exp\"", "token");
  }
  JwtClaims claims;
  claims.expires_at = doc["exp"].GetInt64();
  if (doc.HasMember("iat") && doc["iat"].IsInt64()) claims.issued_at = doc["iat"].GetInt64();
  if (doc.HasMember("sun") && doc["sun"].IsString()) claims.username = doc["sun"].GetString();
  return claims;
}

Result<std::string> MintSlurmJwt(std::string_view key, std::string_view username, int64_t issued_at,
                                 int64_t lifetime_s) {
  if (key.empty()) return InvalidArgument("the JWT key is empty", "jwt_key");
  if (username.empty()) return InvalidArgument("a JWT needs a user name", "username");
  if (lifetime_s <= 0) {
    return InvalidArgument(fmt::format("JWT lifetime must be positive, got {}", lifetime_s),
                           "lifetime");
  }
  // Slurm's own tokens put the claims in this order; the signature covers these exact bytes.
  rapidjson::StringBuffer payload;
  rapidjson::Writer<rapidjson::StringBuffer> w(payload);
  w.StartObject();
  Member(w, "exp", issued_at + lifetime_s);
  Member(w, "iat", issued_at);
  w.Key("sun");
  w.String(username.data(), static_cast<rapidjson::SizeType>(username.size()));
  w.EndObject();

  std::string signing_input = Base64UrlEncode(R"({"alg":"HS256","typ":"JWT"})");
  signing_input += '.';
  signing_input += Base64UrlEncode(std::string_view(payload.GetString(), payload.GetSize()));

  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int mac_len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size(), mac,
           &mac_len) == nullptr) {
    return Internal("HMAC-SHA256 failed in OpenSSL");
  }
  signing_input += '.';
  signing_input += Base64UrlEncode(std::string_view(reinterpret_cast<const char*>(mac), mac_len));
  return signing_input;
}

Result<std::string> ReadJwtKeyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string why = fmt::format("cannot read the JWT key {}: {}", path, std::strerror(err));
    if (err == ENOENT) return NotFound(why, "jwt_key");
    if (err == EACCES) return Error{ErrorCode::kPermissionDenied, why, "jwt_key"};
    return Internal(why);
  }
  std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return Internal(fmt::format("cannot read the JWT key {}", path));
  if (key.empty()) return InvalidArgument(fmt::format("the JWT key {} is empty", path), "jwt_key");
  return key;
}

Result<std::string> MintSlurmJwtFromKeyFile(const std::string& key_path, std::string_view username,
                                            int64_t issued_at, int64_t lifetime_s) {
  auto key = ReadJwtKeyFile(key_path);
  if (!key) return key.error();
  return MintSlurmJwt(*key, username, issued_at, lifetime_s);
}

}  // namespace bmas
