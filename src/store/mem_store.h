#pragma once

// A Store held in memory, for unit tests and simulations of code that reads and writes the
// store (the gateway's policies, the controller, the agent's answers) without SQLite or a file.
// It answers as the SQLite store does: the same checks, errors and orders (store/store_rules.h),
// proven by the store conformance suite that runs against both (store/store_conformance_test.cc).
// The time it stamps (a user's or key's creation, a backend added) comes from `now`.

#include <cstdint>
#include <functional>

#include "store/store.h"

namespace bmas {

// `now`: unix seconds; Env::Default()'s wall time when unset.
StorePtr NewMemStore(std::function<int64_t()> now = {});

}  // namespace bmas
