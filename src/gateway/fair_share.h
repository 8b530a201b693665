#pragma once

// Token fairness across gateways that share a store (GatewayOptions::shared_limits).
//
// What fair means: each backlogged user's share of the completion tokens a backend serves is
// their share of the weights of the backlogged users, however their requests spread over the
// gateways. One gateway gets this from its VTC queue (fair_queue.h) alone. Two do not: each
// queue sees only its own users, and each gateway admits up to the backend's slots, so a
// backend shared by two gateways serves their requests in arrival order.
//
// So each gateway publishes a report through the store every refresh (~200 ms): per model and
// user, the tokens its queue charged them (cumulative), their weight and how many of their
// requests wait; per backend, its requests in flight. From every gateway's latest report,
// FairShare decides
//  (a) the VTC order with global counters: the tokens other gateways charged a user since the
//      last snapshot are charged to this gateway's queue too (RemoteCharges), so each queue
//      orders by what the user got everywhere; counter lifting stays local, so no one banks
//      credit on one gateway by waiting on another;
//  (b) each gateway's share of each backend's slots (Slots): proportional to the weights of
//      the users backlogged on it, where a user backlogged on several gateways counts on each
//      in proportion to their waiting requests there; never below 1 slot while it has a
//      backlog; all slots when no other live gateway reports on the backend.
//
// A report counts once it has been seen to change, and drops out when it has not changed for
// `stale_after_s` of this gateway's time (its gateway stopped writing for a few refreshes). Staleness is judged by when a report last
// changed as seen here, not by the writer's clock, so gateways need no synchronised clocks.
//
// Pure and single-threaded: time comes in as `now` (seconds, any epoch, non-decreasing).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/store.h"

namespace bmas::gateway {

// One gateway's state as it publishes it.
struct FairReport {
  struct User {
    std::string model;
    std::string user;
    double weight = 1;
    int64_t queued = 0;   // requests waiting in this gateway's queue
    int64_t charged = 0;  // tokens this gateway's queue charged the user, since it started
    bool operator==(const User&) const = default;
  };
  struct Backend {
    std::string backend;  // its URL, as every gateway names it
    int64_t in_flight = 0;
    bool operator==(const Backend&) const = default;
  };
  std::vector<User> users;
  std::vector<Backend> backends;
  bool operator==(const FairReport&) const = default;
};

// The report as the store keeps it (GatewayReport::body): one line per entry, tab-separated
// fields, with '%', tab and newline in names escaped. Decode returns nullopt for a body it
// cannot read (written by a newer bmas): that gateway is then ignored.
std::string EncodeFairReport(const FairReport& report);
std::optional<FairReport> DecodeFairReport(std::string_view body);

// Tokens other gateways charged one user of one model since the previous snapshot.
struct RemoteCharge {
  std::string model;
  std::string user;
  double weight = 1;
  int64_t tokens = 0;
  bool operator==(const RemoteCharge&) const = default;
};

class FairShare {
 public:
  // `self`: this gateway's instance id (its reports are read back but never charged).
  FairShare(std::string self, double stale_after_s);

  // Takes every gateway's latest report (Store::ListGatewayReports) at `now`, and returns
  // what others charged each user since the previous call. A gateway seen for the first time
  // charges nothing (its history is its own); a counter that went down restarts from there.
  std::vector<RemoteCharge> Update(const std::vector<GatewayReport>& reports, double now);

  // How many of `backend`'s `capacity` slots this gateway may fill, given the models the
  // backend serves, from the last Update's live reports (this gateway's own included: call
  // Update with the report it has just written).
  //  - No other live gateway reports on the backend: `capacity`.
  //  - This gateway has no backlog on it: the slots the others leave free, at least 1.
  //  - Otherwise: the slots the non-backlogged gateways leave free, split among the
  //    backlogged ones by the weights backlogged on each (largest remainders, ties by id),
  //    at least 1.
  int Slots(const std::string& backend, int capacity,
            const std::vector<std::string>& models) const;

  // Gateways whose reports are live after the last Update (this one's included).
  std::vector<std::string> LiveGateways() const;

 private:
  struct Seen {
    int64_t at_ms = 0;          // the report's at_ms when it last changed
    double changed_at = 0;      // this gateway's time then
    std::optional<FairReport> report;  // the last one decoded
    bool live = false;
    // (model, user) -> the charged counter last seen.
    std::map<std::pair<std::string, std::string>, int64_t> charged;
  };

  const std::string self_;
  const double stale_after_s_;
  std::map<std::string, Seen> seen_;  // by gateway id
};

}  // namespace bmas::gateway
