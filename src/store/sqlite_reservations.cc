// The SQLite store's reservations against users' shared limits (Store::Reserve).

#include "store/sqlite_statement.h"
#include "store/store_rules.h"

namespace bmas::sqlite_internal {

std::optional<Reservation> Reserve(sqlite3* db, const std::string& request_id,
                                   const std::string& user, const UserLimits& limits,
                                   int64_t tokens, int64_t now) {
  Statement held(db, "SELECT 1 FROM reservations WHERE request_id = ?");
  held.Bind(1, request_id);
  const int rc = held.Step();
  if (rc == SQLITE_ROW) return Reservation{true, ""};  // admitted before: counted once
  if (rc != SQLITE_DONE) return std::nullopt;
  Statement prune(db, "DELETE FROM reservations WHERE at < ?");
  prune.Bind(1, now - store_rules::kKeptReservationSeconds);
  if (prune.Step() != SQLITE_DONE) return std::nullopt;
  Statement sums(db,
                 "SELECT COALESCE(SUM(at > ?1), 0), "
                 "COALESCE(SUM(CASE WHEN at > ?1 THEN COALESCE(used, tokens) ELSE 0 END), 0), "
                 "COALESCE(SUM(CASE WHEN at >= ?2 THEN COALESCE(used, tokens) ELSE 0 END), 0), "
                 "COALESCE(SUM(used IS NULL AND at > ?3), 0) FROM reservations WHERE user = ?4");
  sums.Bind(1, now - 60).Bind(2, now - now % 86400);
  sums.Bind(3, now - store_rules::kStaleReservationSeconds).Bind(4, user);
  if (sums.Step() != SQLITE_ROW) return std::nullopt;
  const store_rules::ReservationTotals totals{sums.Int(0), sums.Int(1), sums.Int(2), sums.Int(3)};
  const Reservation answer = store_rules::Admit(limits, totals, tokens);
  if (!answer.admitted) return answer;
  Statement add(db, "INSERT INTO reservations (request_id, user, at, tokens) VALUES (?, ?, ?, ?)");
  add.Bind(1, request_id).Bind(2, user).Bind(3, now).Bind(4, tokens);
  if (add.Step() != SQLITE_DONE) return std::nullopt;
  return answer;
}

std::optional<bool> Settle(sqlite3* db, const std::string& request_id, int64_t used_tokens) {
  Statement s(db, "UPDATE reservations SET used = ? WHERE request_id = ? AND used IS NULL");
  s.Bind(1, used_tokens).Bind(2, request_id);
  if (s.Step() != SQLITE_DONE) return std::nullopt;
  if (sqlite3_changes(db) > 0) return true;
  Statement held(db, "SELECT 1 FROM reservations WHERE request_id = ?");
  held.Bind(1, request_id);
  const int rc = held.Step();
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return std::nullopt;
  return rc == SQLITE_ROW;  // settled before, or never reserved
}

}  // namespace bmas::sqlite_internal
