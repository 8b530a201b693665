#pragma once

// Who a backend is. Each backend has a key of its own (vLLM's --api-key), derived from the
// backend secret that the gateway and whoever starts the backends share. Before the gateway sends
// a key or a request on a new connection, the backend proves it holds its key by answering a
// challenge: `GET /bmas/challenge?nonce=N` (no key sent), answered 200 with
// ChallengeAnswer(key, N). A listener that took the backend's port learns only a nonce.
//
// HMAC-SHA256 from OpenSSL; thread-safe.

#include <string>
#include <string_view>

namespace bmas {

inline constexpr std::string_view kChallengePath = "/bmas/challenge";

// The key of the backend that listens on `port`: hex HMAC-SHA256(secret, "bmas-backend:PORT").
// Replica ports are unique in a cluster, so no two replicas share a key.
std::string DeriveBackendKey(std::string_view secret, int port);

// A fresh random nonce of 32 hex digits (getrandom).
std::string NewChallengeNonce();

// True when `nonce` is 16 to 128 hex digits: what a backend agrees to answer.
bool IsChallengeNonce(std::string_view nonce);

// hex HMAC-SHA256(key, "bmas-challenge:" + nonce): the backend's answer to `nonce`.
std::string ChallengeAnswer(std::string_view key, std::string_view nonce);

// Compares secrets in time that does not depend on where they differ.
bool SecretsEqual(std::string_view a, std::string_view b);

}  // namespace bmas
