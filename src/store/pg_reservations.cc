// The PostgreSQL store's reservations against users' shared limits (Store::Reserve): one
// statement each, a call of a server-side function (bmas_reserve, bmas_settle: migration 5 in
// pg_store.cc), so a request costs the gateway one round trip to reserve and one to settle.
// bmas_reserve locks the user's row before it reads what the user holds, so gateways reserving
// for one user take turns; it reads per-user counters by second and by day, not every
// reservation of the day.
//
// A single SQL statement (a CTE) would not do: it reads with the snapshot taken when it starts,
// before it waits for the user's row, and so misses what the gateway it waited for committed. A
// plpgsql function takes a new snapshot for each statement.
//
// Reservations and settlements commit without waiting for the disk (the functions set
// synchronous_commit off for their own transaction): a gateway makes two per request, and a flush
// each cost milliseconds. What a server crash can lose is its last fraction of a second: a lost
// reservation lets that minute admit a little more, a lost settlement counts the request at its
// worst case; metered usage (RecordUsage) stays durable.

#include "store/pg_store.h"
#include "store/store_rules.h"

namespace bmas::pg_internal {

Result<Reservation> Reserve(Connection& c, const std::string& request_id, const std::string& user,
                            int64_t tokens, int64_t now) {
  auto refused = c.Exec("reserving", "SELECT bmas_reserve($1, $2, $3, $4, $5, $6)",
                        {P(request_id), P(user), P(tokens), P(now),
                         P(store_rules::kKeptReservationSeconds),
                         P(store_rules::kStaleReservationSeconds)});
  if (!refused) return refused.error();
  std::string by = refused->Text(0, 0);
  return Reservation{by.empty(), std::move(by)};
}

Result<void> Settle(Connection& c, const std::string& request_id, int64_t used_tokens) {
  auto held = c.Exec("settling a reservation", "SELECT bmas_settle($1, $2)",
                     {P(request_id), P(used_tokens)});
  if (!held) return held.error();
  if (held->Text(0, 0) != "t") return store_rules::NoSuchReservation(request_id);
  return {};
}

}  // namespace bmas::pg_internal
