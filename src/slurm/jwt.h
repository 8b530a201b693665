#pragma once

// JSON Web Tokens for Slurm's auth/jwt plugin, minted locally from the cluster's HS256 key
// (AuthAltParameters=jwt_key=...), so that bmas never spawns `scontrol token`.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace bmas {

// URL-safe base64 without padding (RFC 7515's base64url).
std::string Base64UrlEncode(std::string_view bytes);
// The inverse; accepts padding. InvalidArgument for text that is not base64url.
Result<std::string> Base64UrlDecode(std::string_view text);

// What a Slurm JWT claims.
struct JwtClaims {
  int64_t issued_at = 0;   // "iat"
  int64_t expires_at = 0;  // "exp"
  std::string username;    // "sun"
};

// The claims of `token` WITHOUT checking its signature (only slurmctld holds the key): for
// telling an expired token from other failures. InvalidArgument when it is not a JWT with
// a numeric "exp".
Result<JwtClaims> DecodeJwtClaims(std::string_view token);

// A token Slurm accepts for `username`: header {"alg":"HS256","typ":"JWT"}, payload
// {"exp": issued_at + lifetime_s, "iat": issued_at, "sun": username}, signed with HMAC-SHA256
// over `key` (the raw bytes of the key file). The same bytes as `scontrol token` would give
// at that second. Pure: the caller passes the time.
// Errors: InvalidArgument for an empty key, an empty username or lifetime_s <= 0.
Result<std::string> MintSlurmJwt(std::string_view key, std::string_view username, int64_t issued_at,
                                 int64_t lifetime_s);

// The raw contents of a JWT key file. Errors: NotFound / PermissionDenied / Internal naming
// the path when it cannot be read; InvalidArgument when it is empty.
Result<std::string> ReadJwtKeyFile(const std::string& path);

// ReadJwtKeyFile + MintSlurmJwt.
Result<std::string> MintSlurmJwtFromKeyFile(const std::string& key_path, std::string_view username,
                                            int64_t issued_at, int64_t lifetime_s);

}  // namespace bmas
