#pragma once

// The store conformance suite's hook for stores that need a server (PostgreSQL): a test binary
// that starts one sets the opener, and instantiates the suite with its kind
// (tests/integration/pg_store_test.cc). The suite itself is store_conformance_test.cc.

#include <functional>
#include <string>

#include "store/store.h"

namespace bmas {

// Opens the store of the test named `test`: new and empty the first time, the same store
// again (another connection) after.
using ConformanceStoreOpener = std::function<Result<StorePtr>(const std::string& test)>;

// The opener for any kind other than "sqlite" and "memory".
inline ConformanceStoreOpener& ExternalConformanceStore() {
  static ConformanceStoreOpener opener;
  return opener;
}

}  // namespace bmas
