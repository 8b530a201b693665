#pragma once

// What every Store checks, answers and keeps the same way, whatever holds the data (SQLite, or
// MemStore in memory): user names and limits, changes to them, API keys (only a SHA-256 of
// the secret is kept; a presented key is compared in constant time), and the errors callers
// see, with the command that fixes each.

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "store/store.h"

namespace bmas::store_rules {

using Digest = std::array<unsigned char, 32>;

// InvalidArgument, naming the rule, for a name that is not a Unix account name.
Result<void> CheckUserName(const std::string& name);
// InvalidArgument for a weight out of (0, 1e6], a negative limit, or a bad workspace limit.
Result<void> CheckLimits(const UserLimits& limits);
// `limits` with `change` applied (the fields it sets, then those it clears), checked.
Result<UserLimits> ApplyChange(UserLimits limits, const UserChange& change);

// `name`'s limits with `change` applied, read through `store`; NoSuchUser when there is none.
Result<UserLimits> ChangedLimits(Store& store, const std::string& name, const UserChange& change);
// NoSuchUser unless `store` has a user `name`.
Result<void> RequireUser(Store& store, const std::string& name);

// What a user's admitted reservations add up to at a moment (Store::Reserve).
struct ReservationTotals {
  int64_t requests_minute = 0;  // reserved in the 60 s up to now
  int64_t tokens_minute = 0;    // of those: used when settled, else reserved
  int64_t tokens_day = 0;       // the same, over the UTC day
  int64_t in_flight = 0;        // not settled, and younger than kStaleReservationSeconds
};
// A reservation unsettled for this long no longer counts as in flight.
inline constexpr int64_t kStaleReservationSeconds = 3600;
// Reservations older than this are deleted (they count towards no window).
inline constexpr int64_t kKeptReservationSeconds = 2 * 86400;
// Gateway reports (Store::PutGatewayReport) older than this, by their writers' clocks, are
// deleted: their gateways stopped (readers drop a report that stops changing much sooner).
inline constexpr int64_t kKeptGatewayReportMs = 600 * 1000;

// Whether one more request of `tokens` fits `limits` on top of `totals`.
Reservation Admit(const UserLimits& limits, const ReservationTotals& totals, int64_t tokens);
Error NoSuchReservation(const std::string& request_id);

// A deployment's timetable as every store keeps it, a JSON array:
// [{"days": 31, "from": 540, "to": 720, "min": 3}, ...] (days a bit mask, bit 0 = Monday; from
// and to minutes after local midnight). Text this version cannot read (written by hand) reads
// as no timetable, as the controller then keeps the deployment's plain min.
std::string TimetableJson(const std::vector<TimetableFloor>& timetable);
std::vector<TimetableFloor> ParseTimetableJson(const std::string& text);

// A new key: what the user is given once, its id, and what is kept of its secret.
struct NewKey {
  std::string key;  // "sk-bmas-<id>-<secret>"
  std::string id;
  Digest digest{};
};
NewKey MintKey();

// A presented key split into its id and its secret's digest; nullopt when it is not one.
struct PresentedKey {
  std::string id;
  Digest digest{};
};
std::optional<PresentedKey> ParseKey(std::string_view key);

// Whether a kept digest is the presented one (constant time).
bool SameDigest(std::string_view kept, const Digest& presented);

Error UserExists(const std::string& name);
Error NoSuchUser(const std::string& name);
Error NoSuchKey(const std::string& key_id);
Error BackendListed(const std::string& url);
Error NoSuchBackend(const std::string& url);
Error NoSuchDeployment(const std::string& model);

}  // namespace bmas::store_rules
