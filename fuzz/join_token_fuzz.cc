// Fuzzes ParseJoinToken (a token is pasted by an admin and, for `bmas node join`, comes from
// outside) and ParseTokenRecords: a token that parses writes back to one that parses the same,
// and records that parse write back to the same records.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cluster/join_token.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr int64_t kNow = 1'700'000'000;  // before the seeds expire
  if (auto token = bmas::cluster::ParseJoinToken(text, kNow)) {
    auto again = bmas::cluster::ParseJoinToken(bmas::cluster::FormatJoinToken(*token), kNow);
    if (!again || again->address != token->address || again->port != token->port ||
        again->ca_sha256 != token->ca_sha256 || again->secret != token->secret ||
        again->expires_at != token->expires_at) {
      std::abort();
    }
  }
  if (auto records = bmas::cluster::ParseTokenRecords(text)) {
    auto again = bmas::cluster::ParseTokenRecords(bmas::cluster::FormatTokenRecords(*records));
    if (!again || again->size() != records->size()) std::abort();
    for (size_t i = 0; i < records->size(); ++i) {
      if ((*again)[i].secret_sha256 != (*records)[i].secret_sha256 ||
          (*again)[i].expires_at != (*records)[i].expires_at) {
        std::abort();
      }
    }
  }
  return 0;
}
