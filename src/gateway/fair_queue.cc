#include "gateway/fair_queue.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace bmas::gateway {

namespace {

// A user's deque is compacted once it holds at least this many entries, most of them dead.
constexpr size_t kCompactMin = 32;

}  // namespace

FairQueue::FairQueue(bool fair) : fair_(fair) {}

void FairQueue::Push(Ticket ticket, const std::string& user, double /*weight*/) {
  assert(!tickets_.contains(ticket));
  auto [it, inserted] = users_.try_emplace(user);
  UserRef ref = &*it;
  UserState& state = ref->second;
  if (state.live == 0) {
    const double min_active = MinActiveCounter();
    state.counter = std::max(state.counter, active_.empty() ? floor_ : min_active);
    Activate(ref);
  }
  const uint64_t seq = next_seq_++;
  state.entries.push_back(Entry{seq, ticket, true});
  ++state.live;
  tickets_.emplace(ticket, Location{ref, seq});
  if (inserted) MaybeSweep();
}

std::optional<Ticket> FairQueue::PopNext(
    const std::function<bool(const std::string& user)>& eligible) {
  UserRef best = nullptr;
  for (UserRef ref : active_) {
    const UserState& state = ref->second;
    if (best != nullptr) {
      const UserState& b = best->second;
      const uint64_t seq = state.entries.front().seq;
      const uint64_t best_seq = b.entries.front().seq;
      const bool better =
          fair_ ? (state.counter < b.counter || (state.counter == b.counter && seq < best_seq))
                : seq < best_seq;
      if (!better) continue;
    }
    if (eligible && !eligible(ref->first)) continue;
    best = ref;
  }
  if (best == nullptr) return std::nullopt;

  UserState& state = best->second;
  const Ticket ticket = state.entries.front().ticket;
  state.entries.pop_front();
  --state.live;
  tickets_.erase(ticket);
  floor_ = std::max(floor_, state.counter);
  if (state.live == 0) {
    Deactivate(best);
  } else {
    Trim(state);
  }
  return ticket;
}

void FairQueue::ServeAtOnce(const std::string& user, double weight, int64_t tokens) {
  assert(tickets_.empty() && active_.empty());
  auto [it, inserted] = users_.try_emplace(user);
  UserState& state = it->second;
  state.counter = std::max(state.counter, floor_);  // Push's lift, with no one queued
  floor_ = state.counter;                           // PopNext's floor
  if (tokens > 0) state.counter += static_cast<double>(tokens) / std::max(weight, kMinWeight);
  if (inserted) MaybeSweep();
}

bool FairQueue::Remove(Ticket ticket) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return false;
  const Location loc = it->second;
  tickets_.erase(it);
  UserState& state = loc.user->second;
  auto entry = std::lower_bound(state.entries.begin(), state.entries.end(), loc.seq,
                                [](const Entry& e, uint64_t seq) { return e.seq < seq; });
  assert(entry != state.entries.end() && entry->seq == loc.seq && entry->live);
  entry->live = false;
  --state.live;
  if (state.live == 0) {
    Deactivate(loc.user);
  } else {
    Trim(state);
  }
  return true;
}

void FairQueue::Charge(const std::string& user, double weight, int64_t tokens) {
  if (tokens <= 0) return;
  auto it = users_.find(user);
  bool inserted = false;
  if (it == users_.end()) {
    it = users_.try_emplace(user).first;
    it->second.counter = ForgetLevel();
    inserted = true;
  }
  UserState& state = it->second;
  state.counter += static_cast<double>(tokens) / std::max(weight, kMinWeight);
  if (inserted) MaybeSweep();
}

size_t FairQueue::queued(const std::string& user) const {
  auto it = users_.find(user);
  return it == users_.end() ? 0 : it->second.live;
}

double FairQueue::counter(const std::string& user) const {
  auto it = users_.find(user);
  return it == users_.end() ? 0 : it->second.counter;
}

double FairQueue::MinActiveCounter() const {
  double min = std::numeric_limits<double>::infinity();
  for (UserRef ref : active_) min = std::min(min, ref->second.counter);
  return min;
}

void FairQueue::Activate(UserRef user) {
  user->second.active_index = active_.size();
  active_.push_back(user);
}

void FairQueue::Deactivate(UserRef user) {
  UserState& state = user->second;
  const size_t index = state.active_index;
  assert(index < active_.size() && active_[index] == user);
  active_[index] = active_.back();
  active_[index]->second.active_index = index;
  active_.pop_back();
  state.entries.clear();
}

void FairQueue::Trim(UserState& state) {
  while (!state.entries.empty() && !state.entries.front().live) state.entries.pop_front();
  const size_t dead = state.entries.size() - state.live;
  if (state.entries.size() >= kCompactMin && dead > state.live) {
    std::erase_if(state.entries, [](const Entry& e) { return !e.live; });
  }
}

void FairQueue::MaybeSweep() {
  if (users_.size() < sweep_at_) return;
  const double level = ForgetLevel();
  std::erase_if(users_, [level](const UserMap::value_type& user) {
    return user.second.live == 0 && user.second.counter <= level;
  });
  sweep_at_ = std::max(kMinSweepUsers, 2 * users_.size());
}

}  // namespace bmas::gateway
