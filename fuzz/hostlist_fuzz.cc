// Fuzzes ExpandHostlist (host lists come from inventories and from slurmrestd's replies), and
// checks that CompressHostlist writes any list it returns in a form that reads back the same.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/hostlist.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto names = bmas::ExpandHostlist(text);
  if (!names) return 0;
  if (names->size() > bmas::kMaxHostlistNames) std::abort();
  if (names->empty()) return 0;
  auto again = bmas::ExpandHostlist(bmas::CompressHostlist(*names));
  if (!again || *again != *names) std::abort();
  return 0;
}
