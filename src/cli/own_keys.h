#pragma once

// A user's own API keys, for a user who cannot open the store (it is root's): the agent asks
// these on the caller's behalf, with the caller's name from the socket's credentials. Pure
// over the Store interface: no sockets here.

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace bmas {

// How many active keys a user may hold at once through this path (root is not bound by it).
constexpr size_t kMaxOwnKeys = 5;
// How many keys a user may create through this path in any 24 hours: a create-and-revoke loop
// would otherwise grow the store without end (revoked keys are kept, for the record).
constexpr size_t kMaxOwnKeysPerDay = 20;

// Answers `action` ("list", "create" or "revoke" of `key_id`) for `user` with the JSON reply
// the agent sends: {"keys": [...]}, {"key": "sk-bmas-..."} or {"revoked": "ID"}. A user who is
// not a gateway user, a sixth active key, a 21st key in 24 hours before `now` (unix seconds),
// and a key of someone else's are refused with the fix.
Result<std::string> AnswerOwnKeys(Store& store, const std::string& user,
                                  const std::string& action, const std::string& key_id,
                                  int64_t now);

// Reads the keys of a {"keys": [...]} reply back; InvalidArgument when it is not that shape.
Result<std::vector<KeyInfo>> ParseOwnKeys(std::string_view reply);

}  // namespace bmas
