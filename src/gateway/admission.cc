#include "gateway/admission.h"

#include <algorithm>
#include <cmath>
#include <span>
#include <utility>

namespace bmas::gateway {

bool AdmissionBackend::Serves(const std::string& model) const {
  return std::find(models.begin(), models.end(), model) != models.end();
}

Admission::Admission(AdmissionOptions options, RoutingPolicy routing)
    : options_(options), router_(routing) {}

AdmissionBackend* Admission::Find(const std::string& id) {
  for (auto& b : backends_) {
    if (b->state.id == id) return b.get();
  }
  return nullptr;
}

const AdmissionBackend* Admission::backend(const std::string& id) const {
  for (const auto& b : backends_) {
    if (b->state.id == id) return b.get();
  }
  return nullptr;
}

void Admission::AddBackend(const std::string& id) {
  if (Find(id) != nullptr) return;
  auto b = std::make_unique<AdmissionBackend>();
  b->state.id = id;
  b->state.healthy = false;  // until the first check passes
  backends_.push_back(std::move(b));
}

void Admission::RemoveBackend(const std::string& id) {
  std::erase_if(backends_, [&](const auto& b) { return b->state.id == id; });
}

bool Admission::SetDraining(const std::string& id, bool draining) {
  AdmissionBackend* b = Find(id);
  if (b == nullptr) return false;
  b->state.draining = draining;
  if (draining) router_.Forget(id);
  return true;
}

bool Admission::SetHealthy(const std::string& id, bool healthy) {
  AdmissionBackend* b = Find(id);
  if (b == nullptr || b->state.healthy == healthy) return false;
  b->state.healthy = healthy;
  return true;
}

void Admission::SetModels(const std::string& id, std::vector<std::string> models, int capacity) {
  AdmissionBackend* b = Find(id);
  if (b == nullptr) return;
  b->models = std::move(models);
  if (capacity > 0) b->state.capacity = capacity;
}

void Admission::SetEngineLoad(const std::string& id, int waiting, int running, double kv_usage,
                              int64_t num_gpu_blocks, int64_t block_size) {
  AdmissionBackend* b = Find(id);
  if (b == nullptr) return;
  b->state.engine_waiting = waiting;
  b->state.engine_running = running;
  b->state.kv_usage = kv_usage;
  b->state.num_gpu_blocks = num_gpu_blocks;
  b->state.block_size = block_size;
}

bool Admission::AnyOpen(const std::string& model) const {
  return std::any_of(backends_.begin(), backends_.end(),
                     [&](const auto& b) { return b->Serves(model) && b->Open(); });
}

int Admission::Capacity(const AdmissionBackend& b) const {
  return b.state.capacity > 0 ? b.state.capacity : options_.default_capacity;
}

int Admission::Limit(const AdmissionBackend& b) const {
  const int cap = Capacity(b);
  return b.slot_limit > 0 ? std::min(cap, b.slot_limit) : cap;
}

void Admission::SetSlotLimit(const std::string& id, int slots) {
  AdmissionBackend* b = Find(id);
  if (b != nullptr) b->slot_limit = std::max(slots, 0);
}

Ticket Admission::Enqueue(AdmissionRequest request, double now) {
  const Ticket ticket = next_ticket_++;
  auto [it, added] = queues_.try_emplace(request.model, options_.fair);
  ModelQueue& mq = it->second;
  mq.queue.Push(ticket, request.user, request.weight);
  mq.last_request[request.user] = now;
  mq.charged[request.user].weight = request.weight;
  ticket_model_.emplace(ticket, &mq);
  request.enqueued_at = now;
  if (request.resumed) mq.resumed.push_back(ticket);
  mq.waiting.emplace(ticket, std::move(request));
  return ticket;
}

double Admission::OldestWait(const std::string& model, double now) const {
  auto it = queues_.find(model);
  if (it == queues_.end()) return 0;
  double oldest = now;
  for (const auto& [ticket, request] : it->second.waiting) oldest = std::min(oldest, request.enqueued_at);
  return now - oldest;
}

bool Admission::Remove(Ticket ticket) {
  auto t = ticket_model_.find(ticket);
  if (t == ticket_model_.end()) return false;
  ModelQueue& mq = *t->second;
  mq.queue.Remove(ticket);
  mq.waiting.erase(ticket);
  ticket_model_.erase(t);
  return true;
}

bool Admission::OthersActive(const ModelQueue& mq, const std::string& user) {
  // Look-ups only when the counts alone do not tell.
  const size_t waiting = mq.queue.size();
  if (waiting > 0 && waiting > mq.queue.queued(user)) return true;
  const size_t recent = mq.last_request.size();
  return recent > 1 || (recent == 1 && !mq.last_request.contains(user));
}

bool Admission::MayUse(const AdmissionBackend& b, const std::string& user,
                       bool others_active) const {
  if (!others_active) return true;
  const int cap = Capacity(b);
  const int limit =
      std::max(1, cap - static_cast<int>(std::floor(cap * options_.reserve_fraction)));
  auto u = b.user_in_flight.find(user);
  return u == b.user_in_flight.end() || u->second < limit;
}

std::vector<Admit> Admission::Dispatch(const std::string& model, double now) {
  std::vector<Admit> admitted;
  auto it = queues_.find(model);
  if (it != queues_.end()) DispatchInto(model, it->second, now, admitted);
  return admitted;
}

std::vector<Admit> Admission::DispatchAll(double now) {
  std::vector<Admit> admitted;
  for (auto& [model, mq] : queues_) DispatchInto(model, mq, now, admitted);
  return admitted;
}

bool Admission::GatherOpen(const std::string& model, ModelQueue& mq, double now) {
  open_.clear();
  for (const auto& b : backends_) {
    if (b->Serves(model) && b->Open() && b->state.in_flight < Limit(*b)) open_.push_back(b.get());
  }
  if (open_.empty()) return false;
  std::erase_if(mq.last_request,
                [&](const auto& e) { return now - e.second > options_.reserve_window_s; });
  return true;
}

bool Admission::Eligible(const std::string& user, bool others) const {
  return std::any_of(open_.begin(), open_.end(),
                     [&](const AdmissionBackend* b) { return MayUse(*b, user, others); });
}

AdmissionBackend& Admission::Place(const AdmissionView& r, bool others) {
  candidates_.clear();
  for (AdmissionBackend* b : open_) {
    if (MayUse(*b, r.user, others)) {
      if (states_.size() == candidates_.size()) states_.emplace_back();
      states_[candidates_.size()] = b->state;  // reuses the id's memory
      candidates_.push_back(b);
    }
  }
  std::optional<size_t> pick =
      router_.Pick(std::span(states_).first(candidates_.size()), r.prefix_key, r.cache_blocks,
                   r.unhashed_blocks);
  AdmissionBackend& b = *candidates_[pick.value_or(0)];
  ++b.state.in_flight;
  ++b.user_in_flight[r.user];
  b.state.outstanding_tokens += r.prompt_estimate;
  return b;
}

const std::string* Admission::AdmitAtOnce(const AdmissionView& request, double now) {
  ModelQueue& mq = queues_.try_emplace(request.model, options_.fair).first->second;
  if (mq.queue.size() > 0) return nullptr;  // others wait: it takes its place among them
  // What Enqueue does first; then Dispatch's steps for a queue of this one request.
  mq.last_request[request.user] = now;
  ModelQueue::Charged& charged = mq.charged[request.user];  // a node: the reference holds
  charged.weight = request.weight;
  if (!GatherOpen(request.model, mq, now)) return nullptr;
  const bool others = OthersActive(mq, request.user);
  if (!Eligible(request.user, others)) return nullptr;
  // Dispatch's pop and charge, with one look-up of the user each.
  AdmissionBackend& b = Place(request, others);
  mq.queue.ServeAtOnce(request.user, request.weight, request.prompt_estimate);
  ModelQueue::CountCharge(charged, request.weight, request.prompt_estimate);
  return &b.state.id;
}

void Admission::DispatchInto(const std::string& model, ModelQueue& mq, double now,
                             std::vector<Admit>& admitted) {
  while (mq.queue.size() > 0) {
    if (!GatherOpen(model, mq, now)) break;
    auto eligible = [&](const std::string& user) {
      return Eligible(user, OthersActive(mq, user));
    };
    // Resumed streams first; then the fair queue's order.
    std::optional<Ticket> ticket;
    while (!mq.resumed.empty() && !mq.waiting.contains(mq.resumed.front())) mq.resumed.pop_front();
    for (auto it = mq.resumed.begin(); it != mq.resumed.end(); ++it) {
      auto w = mq.waiting.find(*it);
      if (w == mq.waiting.end() || !eligible(w->second.user)) continue;
      ticket = *it;
      mq.resumed.erase(it);
      mq.queue.Remove(*ticket);
      break;
    }
    if (!ticket) ticket = mq.queue.PopNext(eligible);
    if (!ticket) break;
    auto w = mq.waiting.find(*ticket);
    const AdmissionRequest r = std::move(w->second);
    mq.waiting.erase(w);
    ticket_model_.erase(*ticket);
    AdmissionBackend& b = Place(r.view(), OthersActive(mq, r.user));
    mq.queue.Charge(r.user, r.weight, r.prompt_estimate);
    mq.CountCharge(r.user, r.weight, r.prompt_estimate);
    admitted.push_back(Admit{*ticket, b.state.id});
  }
}

std::vector<Admit> Admission::Release(const std::string& backend, const std::string& user,
                                      const std::string& model, double now) {
  AdmissionBackend* b = Find(backend);
  if (b != nullptr) {
    --b->state.in_flight;
    auto u = b->user_in_flight.find(user);
    if (u != b->user_in_flight.end() && --u->second <= 0) b->user_in_flight.erase(u);
    if (b->state.in_flight == 0) b->state.outstanding_tokens = 0;
  }
  // Nothing waits for any model (the common case): there is nothing to admit, and no queue
  // to look up.
  std::vector<Admit> admitted;
  if (!ticket_model_.empty()) admitted = Dispatch(model, now);
  if (b != nullptr && b->state.draining && b->state.in_flight == 0) RemoveBackend(backend);
  return admitted;
}

void Admission::Charge(const std::string& model, const std::string& user, double weight,
                       int64_t tokens) {
  auto it = queues_.find(model);
  if (it == queues_.end()) return;
  it->second.queue.Charge(user, weight, tokens);
  it->second.CountCharge(user, weight, tokens);
}

void Admission::ChargeRemote(const RemoteCharge& charge) {
  auto it = queues_.find(charge.model);
  if (it != queues_.end()) it->second.queue.Charge(charge.user, charge.weight, charge.tokens);
}

FairReport Admission::Report() const {
  FairReport report;
  for (const auto& [model, mq] : queues_) {
    for (const auto& [user, c] : mq.charged) {
      report.users.push_back(FairReport::User{model, user, c.weight,
                                              static_cast<int64_t>(mq.queue.queued(user)),
                                              c.tokens});
    }
  }
  for (const auto& b : backends_) {
    report.backends.push_back(FairReport::Backend{b->state.id, b->state.in_flight});
  }
  return report;
}

size_t Admission::queued(const std::string& model) const {
  auto it = queues_.find(model);
  return it != queues_.end() ? it->second.queue.size() : 0;
}

size_t Admission::queued() const {
  size_t n = 0;
  for (const auto& [model, mq] : queues_) n += mq.queue.size();
  return n;
}

std::vector<std::pair<std::string, size_t>> Admission::QueuedByModel() const {
  std::vector<std::pair<std::string, size_t>> out;
  out.reserve(queues_.size());
  for (const auto& [model, mq] : queues_) out.emplace_back(model, mq.queue.size());
  return out;
}

}  // namespace bmas::gateway
