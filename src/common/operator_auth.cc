#include "common/operator_auth.h"

#include <cstddef>
#include <utility>

namespace bmas {

bool OperatorBearerMatches(std::string_view authorization, std::string_view secret) {
  constexpr std::string_view kBearer = "Bearer ";
  if (secret.empty() || authorization.size() != kBearer.size() + secret.size()) return false;
  unsigned char differ = 0;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    differ |= static_cast<unsigned char>(authorization[i] ^ kBearer[i]);
  }
  for (size_t i = 0; i < secret.size(); ++i) {
    differ |= static_cast<unsigned char>(authorization[kBearer.size() + i] ^ secret[i]);
  }
  // Through a volatile read, so that the compiler cannot end the loops at the first difference.
  volatile unsigned char result = differ;
  return result == 0;
}

std::string OperatorUnauthorizedMessage() {
  return "operator data: send Authorization: Bearer <secret>, the operator secret in "
         "<state_dir>/run/operator.secret (readable by root and the bmas service account; "
         "`bmas up` writes a Prometheus scrape config that carries it: "
         "<state_dir>/run/prometheus.yml)";
}

awaitable<bool> RequireOperator(const HttpRequest& request, ResponseWriter& writer,
                                const std::string& secret) {
  if (OperatorBearerMatches(request[http::field::authorization], secret)) co_return true;
  ResponseWriter::Headers headers;
  headers.emplace_back(http::field::www_authenticate, "Bearer");
  co_await writer.SendError(http::status::unauthorized, OperatorUnauthorizedMessage(), "",
                            std::move(headers));
  co_return false;
}

}  // namespace bmas
