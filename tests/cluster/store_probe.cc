// A node's side of the store across the network, for the bed test: opens the store at the URL
// given (as a node's agent does) and records an idle-GPU action, reads a user's limits, or lists
// a user's keys. Prints the answer; on an error prints it and exits 1.
//
//   bmas_store_probe URL record JOB USER | limits USER | keys USER

#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "store/postgres_store.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    fmt::print(stderr, "usage: {} URL record JOB USER | limits USER | keys USER\n", argv[0]);
    return 2;
  }
  const std::string what = argv[2];
  auto store = bmas::OpenPostgresStore(argv[1]);
  if (!store) {
    fmt::print(stderr, "{}\n", store.error().message);
    return 1;
  }
  if (what == "record" && argc == 5) {
    bmas::IdleRecord r{std::strtoll(argv[3], nullptr, 10), argv[4], "batch", "warn", 1700000000,
                       1699999000, 1, 1000, "idle for 16 min"};
    auto done = (*store)->RecordIdle(r);
    if (!done) {
      fmt::print(stderr, "{}\n", done.error().message);
      return 1;
    }
    fmt::print("recorded\n");
    return 0;
  }
  if (what == "limits") {
    auto user = (*store)->FindUser(argv[3]);
    if (!user || !*user) {
      fmt::print(stderr, "{}\n", user ? "no such user" : user.error().message);
      return 1;
    }
    fmt::print("cpus={}\n", (*user)->limits.workspace.cpus.value_or(0));
    return 0;
  }
  if (what == "keys") {
    auto keys = (*store)->ListKeys(argv[3]);
    if (!keys) {
      fmt::print(stderr, "{}\n", keys.error().message);
      return 1;
    }
    fmt::print("{} keys\n", keys->size());
    return 0;
  }
  fmt::print(stderr, "unknown request {}\n", what);
  return 2;
}
