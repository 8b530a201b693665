#include "common/backend_identity.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

#include <array>
#include <stdexcept>

namespace bmas {
namespace {

std::string Hex(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 0xf];
  }
  return out;
}

std::string HmacHex(std::string_view key, std::string_view message) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> mac;
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(),
           &len) == nullptr) {
    throw std::runtime_error("HMAC-SHA256 failed");
  }
  return Hex(mac.data(), len);
}

}  // namespace

std::string DeriveBackendKey(std::string_view secret, int port) {
  return HmacHex(secret, "bmas-backend:" + std::to_string(port));
}

std::string NewChallengeNonce() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return Hex(bytes, sizeof bytes);
}

bool IsChallengeNonce(std::string_view nonce) {
  if (nonce.size() < 16 || nonce.size() > 128) return false;
  for (char c : nonce) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return false;
  }
  return true;
}

std::string ChallengeAnswer(std::string_view key, std::string_view nonce) {
  return HmacHex(key, "bmas-challenge:" + std::string(nonce));
}

bool SecretsEqual(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace bmas
