#pragma once

// The gateway's admission: which waiting request goes to which backend, and when.
//
// Per model, a FairQueue of waiting tickets and when each user last sent a request (the
// reserve window); per backend, what admission counts (requests in flight, per user, the
// outstanding prompt tokens) next to what its health checks reported (healthy, draining,
// capacity, the engine's load and KV cache, the models it serves); and one Router.
//
// A request is admitted to a backend that serves its model, is healthy, is not draining and
// has fewer than `capacity` requests in flight. While another user waits or sent a request
// for the model within `reserve_window_s`, no user holds more than
//   max(1, capacity - floor(capacity * reserve_fraction))
// of a backend, so that users who come and go are never stuck behind a wave of one user's
// long requests. Among eligible users the FairQueue picks who goes next; among the backends
// that user may use, the Router picks where.
//
// Pure and single-threaded: time comes in as `now` (seconds, any epoch, non-decreasing), and
// every decision comes back as a value; no clock, no I/O. The gateway uses one instance under
// its lock and carries the decisions out; a simulator can drive it in virtual time.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gateway/fair_queue.h"
#include "gateway/fair_share.h"
#include "gateway/router.h"

namespace bmas::gateway {

struct AdmissionOptions {
  bool fair = true;                // VTC; false = FCFS
  double reserve_fraction = 0.25;  // of a backend's capacity, kept for other users
  int default_capacity = 64;       // capacity of a backend that reports none
  double reserve_window_s = 30;    // how long after a user's last request the reserve is kept
};

// A request as AdmitAtOnce and the router read it: the caller's strings and blocks, not copies.
struct AdmissionView {
  const std::string& model;
  const std::string& user;
  double weight = 1;
  int64_t prompt_estimate = 0;
  std::optional<uint64_t> prefix_key;
  std::span<const uint64_t> cache_blocks;
  size_t unhashed_blocks = 0;
};

// What admission needs to know of one request.
struct AdmissionRequest {
  std::string model;
  std::string user;
  double weight = 1;
  int64_t prompt_estimate = 0;  // tokens: charged to the user and the backend on admission
  std::optional<uint64_t> prefix_key;  // PrefixKey() of the prompt
  std::vector<uint64_t> cache_blocks;  // cache_aware: PrefixBlockHashes() of the prompt
  size_t unhashed_blocks = 0;
  double enqueued_at = 0;  // set by Enqueue
  // A stream cut by its backend, to continue: it goes before every new request of its model
  // (the client is mid-answer), in the order such streams came.
  bool resumed = false;

  AdmissionView view() const {
    return {model, user, weight, prompt_estimate, prefix_key, cache_blocks, unhashed_blocks};
  }
  // A copy of `v` for the queue (it outlives the caller's strings).
  static AdmissionRequest Of(const AdmissionView& v, bool resumed) {
    return {.model = v.model,
            .user = v.user,
            .weight = v.weight,
            .prompt_estimate = v.prompt_estimate,
            .prefix_key = v.prefix_key,
            .cache_blocks = {v.cache_blocks.begin(), v.cache_blocks.end()},
            .unhashed_blocks = v.unhashed_blocks,
            .resumed = resumed};
  }
};

// A decision: `ticket` goes to the backend `backend` (its id).
struct Admit {
  Ticket ticket;
  std::string backend;
  bool operator==(const Admit&) const = default;
};

// One backend as admission sees it.
struct AdmissionBackend {
  BackendState state;  // state.healthy starts false: nothing is sent before a check passes
  std::vector<std::string> models;
  std::unordered_map<std::string, int> user_in_flight;
  // This gateway's share of the backend's slots when gateways share it (fair_share.h); 0:
  // none, the capacity alone limits.
  int slot_limit = 0;

  bool Serves(const std::string& model) const;
  bool Open() const { return state.healthy && !state.draining; }
};

class Admission {
 public:
  Admission(AdmissionOptions options, RoutingPolicy routing);

  Admission(const Admission&) = delete;
  Admission& operator=(const Admission&) = delete;

  // ---- Backends, by id. Order of addition is kept (it is the router's order).

  // Adds a backend that is not healthy and serves nothing yet; nothing if it is known.
  void AddBackend(const std::string& id);
  // Forgets a backend at once, whatever it has in flight.
  void RemoveBackend(const std::string& id);
  // Stops (or resumes) sending new requests to a backend; a draining backend is removed once
  // nothing is in flight on it (see Release). False if the backend is unknown.
  bool SetDraining(const std::string& id, bool draining);
  // Whether a backend takes requests (its health check passed, and no request to it failed
  // since). Returns whether this changed.
  bool SetHealthy(const std::string& id, bool healthy);
  // Forgets the router's model of a backend's prefix cache (the engine restarted or died).
  void ForgetCache(const std::string& id) { router_.Forget(id); }
  // The models a backend serves, and its capacity (max_num_seqs; 0 = keep the last known).
  void SetModels(const std::string& id, std::vector<std::string> models, int capacity);
  // The engine's own view of its load and KV cache (its /metrics).
  void SetEngineLoad(const std::string& id, int waiting, int running, double kv_usage,
                     int64_t num_gpu_blocks, int64_t block_size);

  // The backend, or null. Valid until the next call that adds or removes a backend.
  const AdmissionBackend* backend(const std::string& id) const;
  const std::vector<std::unique_ptr<AdmissionBackend>>& backends() const { return backends_; }
  // Whether a backend that serves `model` could take a request now or when one finishes.
  bool AnyOpen(const std::string& model) const;
  // A backend's capacity, and its admission limit: the capacity, or this gateway's share of
  // it when one is set (SetSlotLimit).
  int Capacity(const AdmissionBackend& b) const;
  int Limit(const AdmissionBackend& b) const;
  // This gateway's share of a backend's slots (FairShare::Slots); 0 lifts it. Call Dispatch
  // or DispatchAll next: a larger share may admit waiting requests.
  void SetSlotLimit(const std::string& id, int slots);

  // ---- Requests.

  // Queues a request and returns its ticket; the user counts as active for the reserve from
  // `now`. Call Dispatch next: the request may be admitted at once.
  Ticket Enqueue(AdmissionRequest request, double now);
  // The common case without a ticket: a request of a model for which nothing waits, that a
  // backend can take now. Admits it exactly as Enqueue then Dispatch would (the same counts,
  // charges, counter and route) and returns the backend's id; null, with nothing changed that
  // Enqueue would not change too, if it would have to wait: then Enqueue and Dispatch it.
  // Valid until the next call that adds or removes a backend.
  // REQUIRES: not a resumed stream's request (those go through the queue, before new ones).
  const std::string* AdmitAtOnce(const AdmissionView& request, double now);
  // Admits waiting requests of `model` while a backend can take one, in the queue's order.
  // Each admission counts the request on its backend and charges its prompt estimate.
  std::vector<Admit> Dispatch(const std::string& model, double now);
  // Dispatch for every model (after a backend came up).
  std::vector<Admit> DispatchAll(double now);
  // Takes a waiting ticket out (deadline passed, client gone). False if it is not waiting.
  bool Remove(Ticket ticket);
  // A request of `user` for `model` admitted to `backend` has ended: frees its place and
  // admits what can go now. A draining backend with nothing left in flight is removed.
  std::vector<Admit> Release(const std::string& backend, const std::string& user,
                             const std::string& model, double now);
  // Charges `user`'s fair-queue counter for `model` (tokens served beyond the estimate).
  void Charge(const std::string& model, const std::string& user, double weight, int64_t tokens);
  // Charges the counter for tokens another gateway served (FairShare::Update); they are not
  // counted in Report()'s `charged`, so that gateways do not echo each other's charges.
  void ChargeRemote(const RemoteCharge& charge);
  // What this gateway publishes for fairness across gateways: per model and user, their
  // weight, waiting requests and the tokens charged here; per backend, its requests in flight.
  FairReport Report() const;

  // Waiting requests of one model, and in all.
  size_t queued(const std::string& model) const;
  size_t queued() const;
  // How long the oldest waiting request of `model` has waited at `now` (0: none waits).
  double OldestWait(const std::string& model, double now) const;
  // Every model a request was ever queued for, with its waiting requests (by model name).
  std::vector<std::pair<std::string, size_t>> QueuedByModel() const;

  const Router& router() const { return router_; }

 private:
  struct ModelQueue {
    explicit ModelQueue(bool fair) : queue(fair) {}
    FairQueue queue;
    std::unordered_map<Ticket, AdmissionRequest> waiting;
    // When each user last sent a request for this model.
    std::unordered_map<std::string, double> last_request;
    std::deque<Ticket> resumed;  // waiting resumed streams first; stale tickets skipped
    // Per user who ever queued or was charged: their weight, and the tokens charged here.
    struct Charged {
      double weight = 1;
      int64_t tokens = 0;
    };
    std::unordered_map<std::string, Charged> charged;
    static void CountCharge(Charged& c, double weight, int64_t tokens) {
      if (tokens <= 0) return;
      c.weight = weight;
      c.tokens += tokens;
    }
    void CountCharge(const std::string& user, double weight, int64_t tokens) {
      if (tokens > 0) CountCharge(charged[user], weight, tokens);
    }
  };

  AdmissionBackend* Find(const std::string& id);
  // Whether someone other than `user` waits for the model or sent a request within the
  // window (after idle users were forgotten).
  static bool OthersActive(const ModelQueue& mq, const std::string& user);
  bool MayUse(const AdmissionBackend& b, const std::string& user, bool others_active) const;
  void DispatchInto(const std::string& model, ModelQueue& mq, double now,
                    std::vector<Admit>& admitted);
  // Fills open_ with the backends that serve `model` and could take a request now; forgets
  // the model's users idle beyond the reserve window. False if none is open.
  bool GatherOpen(const std::string& model, ModelQueue& mq, double now);
  // Whether `user` may use one of open_; `others` is OthersActive(the model's queue, user).
  bool Eligible(const std::string& user, bool others) const;
  // Routes a request to one of open_ it may use (one must be) and counts it there, with its
  // prompt estimate. `others`: OthersActive(its model's queue, r.user) as it is now. The
  // caller charges the estimate to the user's counter.
  AdmissionBackend& Place(const AdmissionView& r, bool others);

  const AdmissionOptions options_;
  Router router_;
  std::vector<std::unique_ptr<AdmissionBackend>> backends_;
  std::map<std::string, ModelQueue> queues_;  // never removed
  // Waiting tickets, to their model's queue (queues_ never removes one: the pointers hold).
  std::unordered_map<Ticket, ModelQueue*> ticket_model_;
  Ticket next_ticket_ = 1;
  // Dispatch's scratch, kept between calls for its memory.
  std::vector<AdmissionBackend*> open_, candidates_;
  std::vector<BackendState> states_;
};

}  // namespace bmas::gateway
