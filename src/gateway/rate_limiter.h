#pragma once

// Per-user request limits (a user's UserLimits from the store): requests per minute, tokens
// per minute, tokens per UTC day and requests in flight.
//
// Pure and single-threaded: every call takes the time (`now`, unix seconds, as a double) and
// no clock is read, so the simulator can drive it in virtual time. Times given for one user
// must not go backwards.
//
// Windows. rpm and tpm are sliding 60 s windows: an event at time t counts while
// now < t + 60. Events are merged into 100 ms buckets stamped with the latest event in the
// bucket, so a user holds at most 600 entries per window; an event may therefore count up
// to 100 ms longer than exactly (the limiter errs towards blocking, never past the limit).
// tokens_per_day counts from the start of the current UTC day (unix time is UTC).
//
// Memory: a user's windows hold at most 600 buckets each; buckets older than 60 s are dropped
// on every OnStart/OnTokens of that user. Check() does not change state and skips expired
// buckets itself. Prune() drops idle users (the gateway calls it now and then, e.g. every
// minute); without it the state is bounded by the users that ever sent a request.

#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>

#include "store/store.h"

namespace bmas::gateway {

struct LimitDecision {
  bool allowed = true;
  // The limit that blocked: "rpm", "tpm", "tokens_per_day" or "max_concurrent".
  std::string limit;
  double retry_after_s = 0;  // when retrying can succeed, if nothing else changes
  // For the client, e.g. "rate limit: 60 requests per minute (rpm) reached for user alice;
  // retry in 12 s".
  std::string message;
};

class RateLimiter {
 public:
  static constexpr double kWindowS = 60;
  static constexpr double kBucketS = 0.1;

  // Whether `user` may start a request now under `limits`. A limit blocks when the count it
  // covers has reached it: requests started in the window (rpm), tokens in the window (tpm),
  // tokens today (tokens_per_day), requests in flight (max_concurrent). An unset limit never
  // blocks; a limit of 0 blocks everything. When several limits block, the one with the
  // longest retry_after_s is reported. retry_after_s: rpm and tpm, until enough entries
  // leave the window to go below the limit (a limit of 0: the window length); tokens_per_day,
  // until the next UTC midnight; max_concurrent, 1 s. Tokens are known only as they are
  // metered, so the request that crosses tpm or tokens_per_day runs to completion and the
  // next one waits. Allocates only when blocking.
  LimitDecision Check(const std::string& user, const UserLimits& limits, double now) const;

  // A request was admitted: counts towards rpm and in flight.
  void OnStart(const std::string& user, double now);
  // Check, then OnStart when it allows the request: the same decision and counts, with one
  // look-up of a known user rather than two.
  LimitDecision Start(const std::string& user, const UserLimits& limits, double now);
  // Tokens metered for the user (prompt and completion); count towards tpm and
  // tokens_per_day. Tokens at or below 0 change nothing.
  void OnTokens(const std::string& user, int64_t tokens, double now);
  // A request ended (finished, failed or cancelled): in flight - 1, never below 0.
  void OnEnd(const std::string& user);

  // Drops expired buckets of every user and forgets users with nothing in their windows,
  // nothing in flight and no tokens today. O(users).
  void Prune(double now);

  // Requests of the user in flight.
  int64_t in_flight(const std::string& user) const;
  // Users with state kept; for tests of the memory bound.
  size_t known_users_for_test() const { return users_.size(); }
  // Window entries kept for the user (rpm + tpm); for tests of the memory bound.
  size_t window_entries_for_test(const std::string& user) const;

 private:
  struct Bucket {
    double time;    // the latest event merged into this bucket
    int64_t count;  // requests or tokens
  };
  // A sliding window of buckets, oldest first, with the sum of their counts.
  struct Window {
    std::deque<Bucket> buckets;
    int64_t total = 0;
    void Add(double now, int64_t count);
    void Expire(double now);
    // The count in the window at `now`, skipping expired buckets without removing them.
    int64_t CountAt(double now) const;
    // Seconds from `now` until the count in the window is below `limit` (limit >= 1).
    double WaitBelow(int64_t limit, double now) const;
  };
  struct UserState {
    Window requests;
    Window tokens;
    int64_t day = 0;  // UTC day number of day_tokens
    int64_t day_tokens = 0;
    int64_t in_flight = 0;
    bool Idle(double now) const;
  };

  // Check's decision for `user`, whose state is `state` (null: none kept).
  static LimitDecision Decide(const std::string& user, const UserState* state,
                              const UserLimits& limits, double now);
  // OnStart's counts.
  static void Begin(UserState& state, double now);

  std::unordered_map<std::string, UserState> users_;
};

// A refusal by the limits shared through the store (Store::Reserve's `refused_by`: "rpm",
// "tpm", "tokens_per_day" or "max_concurrent"), as a decision of `user` under `limits` at `now`
// (unix seconds). The store keeps no window to read a wait from, so retry_after_s is its bound:
// rpm and tpm, the window's length; tokens_per_day, until the next UTC midnight;
// max_concurrent, 1 s.
LimitDecision SharedLimitRefusal(const std::string& user, const UserLimits& limits,
                                 const std::string& refused_by, double now);

}  // namespace bmas::gateway
