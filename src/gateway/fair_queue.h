#pragma once

// The gateway's waiting room: token-fair queuing across users with Virtual Token Counters
// (VTC; Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024), or plain FCFS.
//
// Each user has a counter of the tokens served to them divided by their weight. The next
// request comes from the backlogged user with the smallest counter, so under contention
// users receive tokens in proportion to their weights whatever their request sizes.
//
// Counter lifting (no credit is banked while idle). When a user with no queued requests
// pushes one, their counter becomes
//   max(counter, min counter of the users with queued requests)  if anyone else has some,
//   max(counter, floor())                                         otherwise,
// where floor() is the largest counter a served user had at the moment PopNext chose them
// (non-decreasing).
//
// Memory: a user is known while they have queued requests or their counter could still
// matter. A user with nothing queued whose counter is at or below L = min(floor(), every
// queued user's counter) would be lifted to at least L on their next Push, and L never
// decreases, so forgetting them changes no ordering decision. Such users are forgotten
// lazily: a sweep, O(known users), runs when the number of known users has doubled since the
// last one (amortised O(1) per new user). Charge() for an unknown user starts from the
// current L: a user forgotten while their requests still stream is charged from L instead of
// their old counter (at most L), so forgetting can cost a user a little, never credit them.
//
// Pure and single-threaded: no clock, no I/O; one instance per gateway worker.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace bmas::gateway {

using Ticket = uint64_t;

class FairQueue {
 public:
  // fair = true: VTC as above; fair = false: FCFS by arrival (counters are still kept).
  explicit FairQueue(bool fair);

  FairQueue(const FairQueue&) = delete;
  FairQueue& operator=(const FairQueue&) = delete;

  // Enqueues a waiting request of `user`, lifting the user's counter as described above if
  // they had nothing queued. `weight` is accepted for symmetry with Charge(); counters are
  // already normalised by weight, so it does not affect ordering.
  // REQUIRES: `ticket` is not queued.
  void Push(Ticket ticket, const std::string& user, double weight);

  // Removes and returns the next ticket among users for whom eligible(user) is true: fair
  // mode, the oldest ticket of the user with the smallest counter (ties: the user whose
  // oldest ticket arrived first); FCFS mode, the oldest eligible ticket. nullopt if none.
  // O(users with queued tickets); eligible() is called at most once per such user; an empty
  // eligible means everyone is eligible.
  std::optional<Ticket> PopNext(const std::function<bool(const std::string& user)>& eligible);

  // A request of `user` served the moment it came, while nothing was queued: the same
  // counter and floor() as Push then PopNext, without a ticket; then Charge(user, weight,
  // tokens), with the one look-up of the user.
  // REQUIRES: size() == 0.
  void ServeAtOnce(const std::string& user, double weight = 1, int64_t tokens = 0);

  // Removes a waiting ticket (deadline passed, client gone). False if it is not queued.
  bool Remove(Ticket ticket);

  // Adds tokens / weight to the user's counter. A weight at or below 0 counts as
  // kMinWeight. Tokens at or below 0 change nothing.
  void Charge(const std::string& user, double weight, int64_t tokens);

  // Queued tickets, in all and of one user.
  size_t size() const { return tickets_.size(); }
  size_t queued(const std::string& user) const;
  // The user's counter; 0 for a user the queue does not know.
  double counter(const std::string& user) const;
  // The largest counter a user had when PopNext served them.
  double floor() const { return floor_; }
  // Users whose state is kept (queued or not yet forgotten); for tests of the memory bound.
  size_t known_users_for_test() const { return users_.size(); }

  static constexpr double kMinWeight = 1e-6;

 private:
  struct Entry {
    uint64_t seq;  // arrival order
    Ticket ticket;
    bool live;  // false once removed; dropped from the front or by compaction
  };
  struct UserState {
    double counter = 0;
    std::deque<Entry> entries;  // by seq; the front entry is live while live > 0
    size_t live = 0;
    size_t active_index = 0;  // position in active_ while live > 0
  };
  using UserMap = std::unordered_map<std::string, UserState>;
  using UserRef = UserMap::value_type*;  // stable: unordered_map nodes do not move

  struct Location {
    UserRef user;
    uint64_t seq;
  };

  // The smallest counter among users with queued tickets; +infinity if there are none.
  double MinActiveCounter() const;
  // L above: min(floor_, MinActiveCounter()).
  double ForgetLevel() const { return std::min(floor_, MinActiveCounter()); }
  void Activate(UserRef user);
  void Deactivate(UserRef user);
  // Drops dead entries from the front, and compacts when most entries are dead.
  void Trim(UserState& state);
  void MaybeSweep();

  const bool fair_;
  UserMap users_;
  std::vector<UserRef> active_;  // users with queued tickets, in no particular order
  std::unordered_map<Ticket, Location> tickets_;
  uint64_t next_seq_ = 0;
  double floor_ = 0;
  size_t sweep_at_ = kMinSweepUsers;

  static constexpr size_t kMinSweepUsers = 64;
};

}  // namespace bmas::gateway
