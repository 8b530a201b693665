#include "gateway/rate_limiter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace bmas::gateway {

namespace {

constexpr double kDayS = 86400;
constexpr double kConcurrentRetryS = 1;

int64_t DayOf(double now) { return static_cast<int64_t>(std::floor(now / kDayS)); }

constexpr double kBucketsPerS = 1 / RateLimiter::kBucketS;

int64_t BucketOf(double t) { return static_cast<int64_t>(std::floor(t * kBucketsPerS)); }

// What each limit counts, for messages.
const char* LimitUnit(std::string_view limit) {
  if (limit == "rpm") return "requests per minute";
  if (limit == "tpm") return "tokens per minute";
  if (limit == "tokens_per_day") return "tokens per day";
  return "concurrent requests";
}

void Block(LimitDecision& decision, const std::string& user, const char* limit, int64_t value,
           double retry_after_s) {
  if (!decision.allowed && decision.retry_after_s >= retry_after_s) return;
  decision.allowed = false;
  decision.limit = limit;
  decision.retry_after_s = retry_after_s;
  if (value <= 0) {
    decision.message = fmt::format("rate limit: user {} is allowed no {} ({} is {})", user,
                                   LimitUnit(limit), limit, value);
  } else {
    decision.message = fmt::format("rate limit: {} {} ({}) reached for user {}; retry in {} s",
                                   value, LimitUnit(limit), limit, user,
                                   static_cast<int64_t>(std::max(1.0, std::ceil(retry_after_s))));
  }
}

}  // namespace

void RateLimiter::Window::Add(double now, int64_t count) {
  if (!buckets.empty() && BucketOf(now) <= BucketOf(buckets.back().time)) {
    Bucket& last = buckets.back();
    last.time = std::max(last.time, now);
    last.count += count;
  } else {
    buckets.push_back(Bucket{now, count});
  }
  total += count;
}

void RateLimiter::Window::Expire(double now) {
  while (!buckets.empty() && buckets.front().time + kWindowS <= now) {
    total -= buckets.front().count;
    buckets.pop_front();
  }
}

int64_t RateLimiter::Window::CountAt(double now) const {
  int64_t count = total;
  for (const Bucket& b : buckets) {
    if (b.time + kWindowS > now) break;
    count -= b.count;
  }
  return count;
}

double RateLimiter::Window::WaitBelow(int64_t limit, double now) const {
  int64_t remaining = CountAt(now);
  if (remaining < limit) return 0;
  for (const Bucket& b : buckets) {
    if (b.time + kWindowS <= now) continue;
    remaining -= b.count;
    if (remaining < limit) return b.time + kWindowS - now;
  }
  return kWindowS;  // unreachable for limit >= 1: the window empties
}

bool RateLimiter::UserState::Idle(double now) const {
  return requests.CountAt(now) == 0 && tokens.CountAt(now) == 0 && in_flight == 0 &&
         (day_tokens == 0 || day != DayOf(now));
}

LimitDecision RateLimiter::Check(const std::string& user, const UserLimits& limits,
                                 double now) const {
  auto it = users_.find(user);
  return Decide(user, it == users_.end() ? nullptr : &it->second, limits, now);
}

LimitDecision RateLimiter::Start(const std::string& user, const UserLimits& limits, double now) {
  auto it = users_.find(user);
  LimitDecision decision = Decide(user, it == users_.end() ? nullptr : &it->second, limits, now);
  if (!decision.allowed) return decision;
  if (it == users_.end()) it = users_.try_emplace(user).first;
  Begin(it->second, now);
  return decision;
}

LimitDecision RateLimiter::Decide(const std::string& user, const UserState* state,
                                  const UserLimits& limits, double now) {
  LimitDecision decision;

  if (limits.rpm) {
    const int64_t limit = *limits.rpm;
    if (limit <= 0) {
      Block(decision, user, "rpm", limit, kWindowS);
    } else if (state != nullptr) {
      if (double wait = state->requests.WaitBelow(limit, now); wait > 0) {
        Block(decision, user, "rpm", limit, wait);
      }
    }
  }
  if (limits.tpm) {
    const int64_t limit = *limits.tpm;
    if (limit <= 0) {
      Block(decision, user, "tpm", limit, kWindowS);
    } else if (state != nullptr) {
      if (double wait = state->tokens.WaitBelow(limit, now); wait > 0) {
        Block(decision, user, "tpm", limit, wait);
      }
    }
  }
  if (limits.tokens_per_day) {
    const int64_t limit = *limits.tokens_per_day;
    const int64_t day = DayOf(now);
    const int64_t used = state != nullptr && state->day == day ? state->day_tokens : 0;
    if (limit <= 0 || used >= limit) {
      Block(decision, user, "tokens_per_day", limit, static_cast<double>(day + 1) * kDayS - now);
    }
  }
  if (limits.max_concurrent) {
    const int64_t limit = *limits.max_concurrent;
    const int64_t in_flight = state != nullptr ? state->in_flight : 0;
    if (limit <= 0 || in_flight >= limit) {
      Block(decision, user, "max_concurrent", limit, kConcurrentRetryS);
    }
  }
  return decision;
}

void RateLimiter::OnStart(const std::string& user, double now) { Begin(users_[user], now); }

void RateLimiter::Begin(UserState& state, double now) {
  state.requests.Expire(now);
  state.tokens.Expire(now);
  state.requests.Add(now, 1);
  ++state.in_flight;
}

void RateLimiter::OnTokens(const std::string& user, int64_t tokens, double now) {
  if (tokens <= 0) return;
  UserState& state = users_[user];
  state.requests.Expire(now);
  state.tokens.Expire(now);
  state.tokens.Add(now, tokens);
  const int64_t day = DayOf(now);
  if (state.day != day) {
    state.day = day;
    state.day_tokens = 0;
  }
  state.day_tokens += tokens;
}

void RateLimiter::OnEnd(const std::string& user) {
  auto it = users_.find(user);
  if (it == users_.end()) return;
  it->second.in_flight = std::max<int64_t>(0, it->second.in_flight - 1);
}

void RateLimiter::Prune(double now) {
  for (auto it = users_.begin(); it != users_.end();) {
    UserState& state = it->second;
    state.requests.Expire(now);
    state.tokens.Expire(now);
    it = state.Idle(now) ? users_.erase(it) : std::next(it);
  }
}

int64_t RateLimiter::in_flight(const std::string& user) const {
  auto it = users_.find(user);
  return it == users_.end() ? 0 : it->second.in_flight;
}

size_t RateLimiter::window_entries_for_test(const std::string& user) const {
  auto it = users_.find(user);
  if (it == users_.end()) return 0;
  return it->second.requests.buckets.size() + it->second.tokens.buckets.size();
}

LimitDecision SharedLimitRefusal(const std::string& user, const UserLimits& limits,
                                 const std::string& refused_by, double now) {
  LimitDecision decision;
  if (refused_by == "rpm") {
    Block(decision, user, "rpm", limits.rpm.value_or(0), RateLimiter::kWindowS);
  } else if (refused_by == "tpm") {
    Block(decision, user, "tpm", limits.tpm.value_or(0), RateLimiter::kWindowS);
  } else if (refused_by == "tokens_per_day") {
    Block(decision, user, "tokens_per_day", limits.tokens_per_day.value_or(0),
          static_cast<double>(DayOf(now) + 1) * kDayS - now);
  } else {
    Block(decision, user, "max_concurrent", limits.max_concurrent.value_or(0), kConcurrentRetryS);
  }
  const std::optional<int64_t>& value = decision.limit == "rpm"   ? limits.rpm
                                        : decision.limit == "tpm" ? limits.tpm
                                        : decision.limit == "tokens_per_day"
                                            ? limits.tokens_per_day
                                            : limits.max_concurrent;
  if (!value) {  // a limit set since this gateway last read the user's: no figure to name
    decision.message = fmt::format("rate limit: {} ({}) reached for user {}; retry in {} s",
                                   LimitUnit(decision.limit), decision.limit, user,
                                   static_cast<int64_t>(std::ceil(decision.retry_after_s)));
  }
  return decision;
}

}  // namespace bmas::gateway
