#pragma once

// The join token `bmas cluster init` prints as `bmas node join TOKEN`: what a new node needs to
// find the controller, pin its identity and prove it was invited.
//
//   bmas1.<base64url of: 'J' | expiry (8 bytes) | port (2) | CA SHA-256 (32) | secret (32) |
//                        address length (1) | address | check (4)>
//
// "bmas1." names the format's version; 'J' its one purpose (joining a node); integers are
// big-endian; `check` is the first 4 bytes of the SHA-256 of everything before it, so that a
// token cut short or mistyped is named as damaged rather than failing later. The token is not
// signed: each field is checked where it is used. The CA fingerprint pins the controller (a
// server whose certificate does not chain to that CA is refused), and the controller checks
// the secret against the hash it kept, with its own record of the expiry. The controller keeps
// only the SHA-256 of each secret, with its expiry (TokenRecord). Pure: times are arguments.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/env.h"
#include "common/result.h"

namespace bmas::cluster {

inline constexpr std::string_view kJoinTokenPrefix = "bmas1.";
inline constexpr int kJoinTokenVersion = 1;
inline constexpr int64_t kDefaultJoinTokenTtlSeconds = 3600;
inline constexpr size_t kJoinSecretBytes = 32;
inline constexpr size_t kSha256Bytes = 32;

struct JoinToken {
  std::string address;     // the controller's IP address or host name
  uint16_t port = 0;       // where it serves joins
  std::string ca_sha256;   // the cluster CA certificate's SHA-256, 32 raw bytes
  std::string secret;      // kJoinSecretBytes random bytes
  int64_t expires_at = 0;  // Unix seconds
};

// kJoinSecretBytes fresh random bytes from `env`.
std::string NewJoinSecret(Env& env);

// The token's text form. REQUIRES: a token that ParseJoinToken would accept before it expires
// (address of 1..253 host-name or IP characters, 32-byte fingerprint and secret).
std::string FormatJoinToken(const JoinToken& token);

// Reads a token (blanks around it, and a leading "bmas node join ", are ignored). InvalidArgument
// naming the problem and the fix: not a bmas token, another version, damaged (bad base64url,
// wrong length, check mismatch, another purpose, a bad field), or expired at `unix_now` (with
// the UTC time it expired).
Result<JoinToken> ParseJoinToken(std::string_view text, int64_t unix_now);

// What a node checks of the controller before it sends the secret: that the CA certificate it
// presented (PEM) is the one whose SHA-256 the token carries. kPermissionDenied naming both
// fingerprints when it is not (someone else answered at the token's address).
Result<void> CheckControllerCa(const JoinToken& token, const std::string& ca_pem);

// What the controller keeps of a token it issued.
struct TokenRecord {
  std::string secret_sha256;  // 32 raw bytes
  int64_t expires_at = 0;     // Unix seconds
};

TokenRecord RecordOf(const JoinToken& token);

// The records file's text: one "v1 <64 hex digits> <expires_at>" line per record.
std::string FormatTokenRecords(const std::vector<TokenRecord>& records);
// InvalidArgument naming the line for a line that is not a record.
Result<std::vector<TokenRecord>> ParseTokenRecords(std::string_view text);

// The records that have not expired at `unix_now`.
std::vector<TokenRecord> Unexpired(std::vector<TokenRecord> records, int64_t unix_now);

// Whether `secret` is one of the records' and has not expired at `unix_now`. Compares every
// record in time that does not depend on where the bytes differ or which record matched.
// kPermissionDenied: not a secret this controller issued, or expired (with when).
Result<void> CheckJoinSecret(const std::vector<TokenRecord>& records, std::string_view secret,
                             int64_t unix_now);

// Unix seconds as 2026-11-28T08:22:45Z.
std::string UtcStamp(int64_t unix_seconds);

}  // namespace bmas::cluster
