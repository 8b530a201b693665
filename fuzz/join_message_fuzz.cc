// Fuzzes ParseJoinRequest (what any client sends the controller's join service) and
// ParseJoinReply (what a node reads back): a message that parses writes back to one that
// parses the same.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "cluster/join_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using namespace bmas::cluster;
  if (auto r = ParseJoinRequest(text)) {
    auto again = ParseJoinRequest(FormatJoinRequest(*r));
    if (!again || again->secret != r->secret || again->host != r->host ||
        again->address != r->address || again->csr_pem != r->csr_pem ||
        again->replica_csr_pem != r->replica_csr_pem) {
      std::abort();
    }
  }
  if (auto r = ParseJoinReply(text)) {
    auto again = ParseJoinReply(FormatJoinReply(*r));
    if (!again || again->munge_key != r->munge_key || again->bmas_toml != r->bmas_toml ||
        again->node_cert_pem != r->node_cert_pem || again->prolog != r->prolog ||
        again->replica_cert_pem != r->replica_cert_pem) {
      std::abort();
    }
  }
  return 0;
}
