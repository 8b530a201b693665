#pragma once

// Operator data (/metrics, /gpus, /load) is for operators only (../shared/SECURITY.md): every
// operator listener asks for `Authorization: Bearer <operator secret>`, the secret that `bmas
// up` keeps in <state_dir>/run/operator.secret (daemon/secret.h), readable by root and the
// service account alone. "Safe because it is on loopback" is not: every student has loopback.

#include <string>
#include <string_view>

#include "common/asio.h"
#include "common/http_server.h"

namespace bmas {

// Whether `authorization` (an Authorization header's value) is "Bearer <secret>". Compares in
// time that depends only on the lengths, never on where the bytes differ. An empty `secret`
// matches nothing.
bool OperatorBearerMatches(std::string_view authorization, std::string_view secret);

// The 401 an operator listener answers without the secret: names the header and the file.
std::string OperatorUnauthorizedMessage();

// For an operator listener's handler: true when `request` carries the secret; otherwise sends
// the 401 (an OpenAI-style JSON error, with WWW-Authenticate: Bearer) and returns false.
// /health is the caller's to leave open.
awaitable<bool> RequireOperator(const HttpRequest& request, ResponseWriter& writer,
                                const std::string& secret);

// The header's value a client of an operator listener sends: "Bearer <secret>".
inline std::string OperatorBearer(const std::string& secret) { return "Bearer " + secret; }

}  // namespace bmas
