// The PostgreSQL store's reservations against users' shared limits (Store::Reserve): one
// transaction that locks the user's row, so that gateways reserving for one user take turns.
//
// Reservations and settlements commit without waiting for the disk (synchronous_commit off): a
// gateway makes two per request, and a flush each cost milliseconds. What a server crash can lose
// is its last fraction of a second: a lost reservation lets that minute admit a little more, a
// lost settlement counts the request at its worst case; metered usage (RecordUsage) stays durable.

#include "store/pg_store.h"
#include "store/store_rules.h"

namespace bmas::pg_internal {

Result<Reservation> Reserve(Connection& c, const std::string& request_id, const std::string& user,
                            int64_t tokens, int64_t now) {
  Transaction t(c);
  if (auto r = t.Begin(/*durable=*/false); !r) return r.error();
  auto limits = c.Exec("reserving",
                       "SELECT rpm, tpm, tokens_per_day, max_concurrent FROM users "
                       "WHERE name = $1 FOR UPDATE",
                       {P(user)});
  if (!limits) return limits.error();
  if (limits->size() == 0) return Reservation{false, "user"};
  auto held =
      c.Exec("reserving", "SELECT 1 FROM reservations WHERE request_id = $1", {P(request_id)});
  if (!held) return held.error();
  if (held->size() > 0) return Reservation{true, ""};  // admitted before: counted once
  auto pruned = c.Exec("pruning reservations", "DELETE FROM reservations WHERE at < $1",
                       {P(now - store_rules::kKeptReservationSeconds)});
  if (!pruned) return pruned.error();
  auto sums = c.Exec(
      "reserving",
      "SELECT COUNT(*) FILTER (WHERE at > $2), "
      "COALESCE(SUM(COALESCE(used, tokens)) FILTER (WHERE at > $2), 0)::bigint, "
      "COALESCE(SUM(COALESCE(used, tokens)) FILTER (WHERE at >= $3), 0)::bigint, "
      "COUNT(*) FILTER (WHERE used IS NULL AND at > $4) FROM reservations WHERE user_name = $1",
      {P(user), P(now - 60), P(now - now % 86400), P(now - store_rules::kStaleReservationSeconds)});
  if (!sums) return sums.error();
  UserLimits l;
  l.rpm = limits->OptInt(0, 0);
  l.tpm = limits->OptInt(0, 1);
  l.tokens_per_day = limits->OptInt(0, 2);
  l.max_concurrent = limits->OptInt(0, 3);
  const store_rules::ReservationTotals totals{sums->Int(0, 0), sums->Int(0, 1), sums->Int(0, 2),
                                              sums->Int(0, 3)};
  const Reservation answer = store_rules::Admit(l, totals, tokens);
  if (!answer.admitted) return answer;
  auto added = c.Exec("reserving",
                      "INSERT INTO reservations (request_id, user_name, at, tokens) "
                      "VALUES ($1, $2, $3, $4)",
                      {P(request_id), P(user), P(now), P(tokens)});
  if (!added) return added.error();
  if (auto r = t.Commit(); !r) return r.error();
  return answer;
}

Result<void> Settle(Connection& c, const std::string& request_id, int64_t used_tokens) {
  Transaction t(c);
  if (auto r = t.Begin(/*durable=*/false); !r) return r;
  auto settled = c.Exec("settling a reservation",
                        "UPDATE reservations SET used = $1 WHERE request_id = $2 AND used IS NULL",
                        {P(used_tokens), P(request_id)});
  if (!settled) return settled.error();
  if (settled->Changed() > 0) return t.Commit();
  auto held = c.Exec("settling a reservation", "SELECT 1 FROM reservations WHERE request_id = $1",
                     {P(request_id)});
  if (!held) return held.error();
  if (held->size() == 0) return store_rules::NoSuchReservation(request_id);
  return {};  // settled before: nothing changes
}

}  // namespace bmas::pg_internal
