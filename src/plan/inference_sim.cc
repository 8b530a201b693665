#include "plan/inference_sim.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "autoscale/autoscaler.h"
#include "autoscale/timetable.h"
#include "engine/engine_core.h"
#include "engine/tokenizer.h"
#include "gateway/admission.h"
#include "gateway/prefix_cache_model.h"

namespace bmas::plan {
namespace {

using engine::TokenId;

// Tokens per modelled cache block: vLLM's block of 16 tokens (the gateway's 64 bytes of text
// at 4 characters per token).
constexpr size_t kBlockTokens = 16;
// How long the TTFT p95 the controller reads looks back.
constexpr double kTtftWindow = 60;
// The simulated week's Monday 00:00 as a unix time in UTC (1970-01-05), for timetable floors.
constexpr double kSimMonday = 4 * 86400;

enum class Kind { kSend, kEnter, kStepEnd, kReady, kSlots, kControl };

struct Event {
  double time;
  int64_t seq;
  Kind kind;
  int a;  // session, request, replica or slot index
  int generation;
  bool operator>(const Event& o) const { return std::tie(time, seq) > std::tie(o.time, o.seq); }
};

struct Replica {
  std::string id;
  bool floor = false;
  ReplicaState state = ReplicaState::kPending;
  double since = 0;
  double pending_since = 0;  // for the order in which pending jobs start
  int generation = 0;        // bumped when it starts or stops, so stale events are ignored
  bool gone = false;
  std::unique_ptr<engine::EngineCore> core;
  bool stepping = false;
  std::vector<int> assigned;  // requests admitted to it (entering or in the engine)
  std::unordered_map<engine::RequestId, int> live;  // engine id -> request
};

struct Session {
  const SessionPlan* plan = nullptr;
  Rng rng{0};
  std::string user;
  int sent = 0;
  std::vector<TokenId> history;  // system prompt, then earlier questions and answers
};

struct Req {
  int session = 0;
  std::vector<TokenId> prompt;  // what the next replica is sent (grows on a resume)
  int max_tokens = 0;           // what is left to generate
  int lead_tokens = 0;          // the prompt's shared part, which the router hashes
  int replica = -1;
  int replica_generation = 0;
  gateway::Ticket ticket = 0;
  engine::RequestId engine_id = 0;
};

gateway::RoutingPolicy Routing(const std::string& name) {
  auto policy = gateway::ParseRoutingPolicy(name);
  return policy ? *policy : gateway::RoutingPolicy::kCacheAware;  // the scenario checked it
}

uint64_t BlockHash(uint64_t prev, std::span<const TokenId> block) {
  uint64_t h = prev ^ 0x2545f4914f6cdd1dULL;
  for (TokenId t : block) h = gateway::Mix64(h ^ static_cast<uint64_t>(t));
  return h;
}

class Sim {
 public:
  Sim(const Scenario& s, const engine::Profile& p, const std::vector<SessionPlan>& sessions,
      const std::vector<SlotChange>& slots, const InferenceSettings& settings)
      : scenario_(s),
        profile_(p),
        plans_(sessions),
        slots_(slots),
        settings_(settings),
        autoscale_(s.policies.autoscale),
        admission_(gateway::AdmissionOptions{.fair = s.policies.fairness == "vtc",
                                             .reserve_fraction = s.policies.reserve_fraction,
                                             .default_capacity = s.policies.autoscale.max_in_flight_per_replica},
                   Routing(s.policies.routing)) {
    config_ = SchedulerConfigOf(p);
    capacity_ = std::min(autoscale_.max_in_flight_per_replica, p.max_num_seqs);
    autoscale_.max_in_flight_per_replica = capacity_;
    const int hours = static_cast<int>(std::ceil(settings.horizon_s / 3600)) + 1;
    result_.gpu_seconds_by_hour.assign(hours, 0);
  }

  InferenceResult Run() {
    const int gpus = std::max(1, scenario_.engine.gpus_per_replica);
    for (int i = 0; i < autoscale_.min_replicas; ++i) {
      const int r = NewReplica(0, true);
      Start(r, 0);
    }
    for (size_t i = 0; i < plans_.size(); ++i) {
      Session s;
      s.plan = &plans_[i];
      s.rng = Rng(plans_[i].seed);
      s.user = MemberName(scenario_.cohorts[plans_[i].cohort].name, plans_[i].member);
      sessions_.push_back(std::move(s));
      Push(plans_[i].start, Kind::kSend, static_cast<int>(i));
    }
    for (size_t i = 0; i < slots_.size(); ++i) Push(slots_[i].time, Kind::kSlots, static_cast<int>(i));
    Push(0, Kind::kControl, 0);
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      ++result_.events;
      now_ = e.time;
      switch (e.kind) {
        case Kind::kSend: Send(e.a); break;
        case Kind::kEnter: Enter(e.a, e.generation); break;
        case Kind::kStepEnd: StepEnd(e.a, e.generation); break;
        case Kind::kReady: Ready(e.a, e.generation); break;
        case Kind::kSlots:
          slot_count_ = slots_[e.a].replicas;
          FitToSlots();
          break;
        case Kind::kControl:
          Control(gpus);
          if (now_ < settings_.horizon_s || open_requests_ > 0) {
            Push(now_ + settings_.control_period_s, Kind::kControl, 0);
          }
          break;
      }
    }
    return std::move(result_);
  }

 private:
  void Push(double t, Kind kind, int a, int generation = 0) {
    events_.push(Event{t, seq_++, kind, a, generation});
  }

  int NewReplica(double now, bool floor) {
    auto r = std::make_unique<Replica>();
    r->id = fmt::format("r{}", replicas_.size() + 1);
    r->floor = floor;
    r->state = ReplicaState::kPending;
    r->since = r->pending_since = now;
    replicas_.push_back(std::move(r));
    active_.push_back(static_cast<int>(replicas_.size()) - 1);
    return static_cast<int>(replicas_.size()) - 1;
  }

  bool Holds(const Replica& r) const { return !r.gone && r.state != ReplicaState::kPending; }

  // A replica is done: its job ended or was cancelled.
  void MarkGone(int i) {
    Replica& r = *replicas_[i];
    r.gone = true;
    ++r.generation;
    r.core.reset();
    std::erase(active_, i);
  }

  // A replica job runs: it holds GPUs and loads the model.
  void Start(int i, double now) {
    Replica& r = *replicas_[i];
    r.state = ReplicaState::kStarting;
    r.since = now;
    ++r.generation;
    r.core = std::make_unique<engine::EngineCore>(config_, profile_.time, scenario_.engine.model, nullptr);
    Push(now + settings_.launch_delay_s + profile_.startup_s, Kind::kReady, i, r.generation);
  }

  void Ready(int i, int generation) {
    Replica& r = *replicas_[i];
    if (r.gone || r.generation != generation || r.state != ReplicaState::kStarting) return;
    r.state = ReplicaState::kReady;
    r.since = now_;
    admission_.AddBackend(r.id);
    admission_.SetModels(r.id, {scenario_.engine.model}, capacity_);
    admission_.SetEngineLoad(r.id, 0, 0, 0, config_.num_kv_blocks, config_.block_size);
    admission_.SetHealthy(r.id, true);
    Carry(admission_.DispatchAll(now_));
  }

  // Replicas above the floor that hold GPUs, youngest last.
  int ElasticHeld() const {
    int n = 0;
    for (int i : active_) n += Holds(*replicas_[i]) && !replicas_[i]->floor;
    return n;
  }

  // Preempts the youngest replicas above the floor while they hold more than the slots, and
  // starts pending ones while there is room.
  void FitToSlots() {
    while (ElasticHeld() > slot_count_) {
      int youngest = -1;
      for (int i : active_) {
        const Replica& r = *replicas_[i];
        if (!Holds(r) || r.floor) continue;
        if (youngest < 0 || r.since >= replicas_[youngest]->since) youngest = i;
      }
      Preempt(youngest);
    }
    while (ElasticHeld() < slot_count_) {
      int oldest = -1;
      for (int i : active_) {
        const Replica& r = *replicas_[i];
        if (r.floor || r.state != ReplicaState::kPending) continue;
        if (oldest < 0 || r.pending_since < replicas_[oldest]->pending_since) oldest = i;
      }
      if (oldest < 0) break;
      Start(oldest, now_);
    }
  }

  // Training takes the replica's GPUs: its job is requeued, its requests go elsewhere.
  void Preempt(int i) {
    Replica& r = *replicas_[i];
    ++result_.preemptions;
    const bool draining = r.state == ReplicaState::kDraining;
    StopServing(i);
    if (draining) {
      MarkGone(i);  // it was leaving anyway
    } else {
      r.state = ReplicaState::kPending;  // requeued: it comes back when GPUs free up
      r.since = r.pending_since = now_;
    }
  }

  // Takes the replica out of admission and sends its requests back to the queue: those that
  // streamed already resume with what they have.
  void StopServing(int i) {
    Replica& r = *replicas_[i];
    ++r.generation;
    r.stepping = false;
    std::vector<int> assigned = std::move(r.assigned);
    r.assigned.clear();
    r.live.clear();
    r.core.reset();
    admission_.RemoveBackend(r.id);
    admission_.ForgetCache(r.id);
    for (int q : assigned) {
      RequestRecord& rec = result_.requests[q];
      if (rec.output_tokens > 0 && !rec.resumed) {
        rec.resumed = true;
        ++result_.resumed_streams;
      }
      Enqueue(q, rec.output_tokens > 0);
    }
    Carry(admission_.DispatchAll(now_));
  }

  void Send(int s) {
    if (now_ >= settings_.stop_sending_s) return;
    Session& session = sessions_[s];
    const Cohort& cohort = scenario_.cohorts[session.plan->cohort];
    const InferenceBehaviour& ib = cohort.inference;
    if (session.sent == 0 && ib.system_prompt_tokens > 0) {
      const int course = (session.plan->member - 1) % std::max(1, ib.system_prompts);
      const uint64_t seed = gateway::Mix64((static_cast<uint64_t>(session.plan->cohort) << 32) | course);
      for (int k = 0; k < ib.system_prompt_tokens; ++k) session.history.push_back(engine::SampleToken(seed, k));
    }
    ++session.sent;
    const int q = static_cast<int>(reqs_.size());
    Req req;
    req.session = s;
    req.prompt = session.history;
    req.lead_tokens = static_cast<int>(req.prompt.size());
    const int question = session.rng.AroundMean(ib.prompt_tokens, ib.length_spread);
    const uint64_t qseed = session.rng.Next();
    for (int k = 0; k < question; ++k) req.prompt.push_back(engine::SampleToken(qseed, k));
    req.max_tokens = session.rng.AroundMean(ib.output_tokens, ib.length_spread);
    reqs_.push_back(std::move(req));
    RequestRecord rec;
    rec.cohort = session.plan->cohort;
    rec.sent = now_;
    result_.requests.push_back(rec);
    ++open_requests_;
    Enqueue(q, false);
    Carry(admission_.Dispatch(scenario_.engine.model, now_));
  }

  void Enqueue(int q, bool resumed) {
    Req& req = reqs_[q];
    const Session& session = sessions_[req.session];
    gateway::AdmissionRequest a;
    a.model = scenario_.engine.model;
    a.user = session.user;
    a.prompt_estimate = static_cast<int64_t>(req.prompt.size());
    a.resumed = resumed;
    const size_t lead_blocks = static_cast<size_t>(req.lead_tokens) / kBlockTokens;
    uint64_t h = 0;
    for (size_t b = 0; b < lead_blocks; ++b) {
      h = BlockHash(h, std::span<const TokenId>(req.prompt).subspan(b * kBlockTokens, kBlockTokens));
      a.cache_blocks.push_back(h);
      if (b + 1 == std::min<size_t>(lead_blocks, 8)) a.prefix_key = h;
    }
    a.unhashed_blocks = (req.prompt.size() - lead_blocks * kBlockTokens) / kBlockTokens + 1;
    req.ticket = admission_.Enqueue(std::move(a), now_);
    req.replica = -1;
    ticket_req_[req.ticket] = q;
    wait_order_.emplace_back(now_, req.ticket);
  }

  // Carries out admissions: each request goes to its replica after the frontend's delay.
  void Carry(const std::vector<gateway::Admit>& admits) {
    for (const gateway::Admit& a : admits) {
      auto it = ticket_req_.find(a.ticket);
      if (it == ticket_req_.end()) continue;
      const int q = it->second;
      ticket_req_.erase(it);
      Req& req = reqs_[q];
      const int i = ReplicaIndex(a.backend);
      Replica& r = *replicas_[i];
      req.replica = i;
      req.replica_generation = r.generation;
      r.assigned.push_back(q);
      Push(now_ + profile_.time.frontend_s, Kind::kEnter, q, r.generation);
    }
  }

  int ReplicaIndex(const std::string& id) const { return std::stoi(id.substr(1)) - 1; }

  void Enter(int q, int generation) {
    Req& req = reqs_[q];
    if (req.replica < 0 || req.replica_generation != generation) return;  // moved on
    Replica& r = *replicas_[req.replica];
    if (r.generation != generation || !r.core) return;
    auto er = std::make_unique<engine::Request>();
    er->id = next_engine_id_++;
    er->seed = er->id;
    er->tokens = req.prompt;
    er->num_prompt_tokens = static_cast<int>(req.prompt.size());
    er->max_tokens = std::max(1, req.max_tokens);
    req.engine_id = er->id;
    if (!r.core->AddRequest(std::move(er), now_)) {  // longer than the model takes
      std::erase(r.assigned, q);
      Carry(admission_.Release(r.id, sessions_[req.session].user, scenario_.engine.model, now_));
      Fail(q);
      return;
    }
    r.live[req.engine_id] = q;
    Kick(req.replica);
  }

  void Kick(int i) {
    Replica& r = *replicas_[i];
    if (r.stepping || !r.core || !r.core->HasWork()) return;
    r.stepping = true;
    const double step = r.core->BeginStep(now_);
    result_.busy_gpu_seconds += step * std::max(1, scenario_.engine.gpus_per_replica);
    Push(now_ + step, Kind::kStepEnd, i, r.generation);
  }

  void StepEnd(int i, int generation) {
    Replica& r = *replicas_[i];
    if (r.generation != generation || !r.stepping) return;
    r.stepping = false;
    for (const engine::TokenEvent& e : r.core->FinishStep(now_)) {
      auto it = r.live.find(e.id);
      if (it == r.live.end()) continue;
      const int q = it->second;
      Req& req = reqs_[q];
      RequestRecord& rec = result_.requests[q];
      if (rec.output_tokens == 0) {
        rec.ttft = now_ - rec.sent;
        ttfts_.emplace_back(now_, rec.ttft);
      }
      ++rec.output_tokens;
      ++result_.tokens_served;
      req.prompt.push_back(e.token);  // what a resume would send
      --req.max_tokens;
      if (e.finish_reason == engine::FinishReason::kNone) continue;
      r.live.erase(it);
      Finish(q, i);
    }
    if (r.state == ReplicaState::kDraining && r.assigned.empty()) {
      Leave(i);  // after the loop: the events live in its core
      return;
    }
    Kick(i);
  }

  void Finish(int q, int i) {
    Req& req = reqs_[q];
    RequestRecord& rec = result_.requests[q];
    rec.e2e = now_ - rec.sent;
    if (rec.output_tokens > 1) rec.itl = (rec.e2e - rec.ttft) / (rec.output_tokens - 1);
    Replica& r = *replicas_[i];
    std::erase(r.assigned, q);
    Session& session = sessions_[req.session];
    admission_.Charge(scenario_.engine.model, session.user, 1, rec.output_tokens);
    Carry(admission_.Release(r.id, session.user, scenario_.engine.model, now_));
    --open_requests_;
    // The session goes on: the next question after reading this answer.
    if (scenario_.cohorts[session.plan->cohort].inference.carry_history) {
      session.history = std::move(req.prompt);
    }
    req.prompt = {};
    req.prompt.shrink_to_fit();
    if (session.sent < session.plan->requests) {
      const double think = session.rng.Exponential(scenario_.cohorts[session.plan->cohort].inference.think_time_s);
      Push(now_ + think, Kind::kSend, req.session);
    } else {
      session.history = {};
      session.history.shrink_to_fit();
    }
  }

  void Fail(int q) {
    Req& req = reqs_[q];
    RequestRecord& rec = result_.requests[q];
    rec.failed = true;
    req.prompt = {};
    req.prompt.shrink_to_fit();
    --open_requests_;
    sessions_[req.session].history = {};  // the student gives up on this session
  }

  void Leave(int i) {
    Replica& r = *replicas_[i];
    MarkGone(i);
    admission_.RemoveBackend(r.id);
    admission_.ForgetCache(r.id);
    FitToSlots();  // its GPUs may start a pending replica
  }

  std::optional<double> TtftP95() {
    while (!ttfts_.empty() && ttfts_.front().first < now_ - kTtftWindow) ttfts_.pop_front();
    if (ttfts_.empty()) return std::nullopt;
    std::vector<double> v;
    v.reserve(ttfts_.size());
    for (const auto& [t, x] : ttfts_) v.push_back(x);
    const size_t k = static_cast<size_t>(std::ceil(0.95 * v.size())) - 1;
    std::nth_element(v.begin(), v.begin() + k, v.end());
    return v[k] * 1000;
  }

  void Control(int gpus) {
    // GPUs held, sampled once a period.
    int held = 0;
    for (int i : active_) held += Holds(*replicas_[i]);
    const double gs = held * gpus * settings_.control_period_s;
    result_.gpu_seconds += gs;
    const size_t hour = static_cast<size_t>(now_ / 3600);
    if (hour < result_.gpu_seconds_by_hour.size()) result_.gpu_seconds_by_hour[hour] += gs;
    // The queue's deadline.
    while (!wait_order_.empty() && wait_order_.front().first + scenario_.policies.queue_timeout_s <= now_) {
      const gateway::Ticket t = wait_order_.front().second;
      wait_order_.pop_front();
      auto it = ticket_req_.find(t);
      if (it == ticket_req_.end()) continue;
      const int q = it->second;
      ticket_req_.erase(it);
      admission_.Remove(t);
      Fail(q);
    }
    // The autoscaler.
    autoscale::ModelSnapshot snap;
    for (int i : active_) {
      const auto& r = replicas_[i];
      snap.replicas.push_back({r->id, r->state, TimePoint{r->since}, static_cast<int>(r->assigned.size())});
    }
    result_.replicas_max = std::max(result_.replicas_max, held);
    snap.queued = static_cast<int>(admission_.queued(scenario_.engine.model));
    snap.oldest_queued_wait = Duration{admission_.OldestWait(scenario_.engine.model, now_)};
    snap.ttft_p95_ms = TtftP95();
    autoscale_.min_replicas = MinReplicasAt(now_);
    const autoscale::AutoscaleDecision d = DecideReplicas(autoscale_, snap, TimePoint{now_}, memory_);
    int current = 0;
    for (const auto& r : snap.replicas) current += r.state != ReplicaState::kDraining;
    for (int k = current; k < d.target_replicas; ++k) NewReplica(now_, false);
    if (d.target_replicas < current) {
      std::vector<autoscale::ReplicaSnapshot> elastic;
      for (const auto& r : snap.replicas) {
        if (!replicas_[ReplicaIndex(r.id)]->floor) elastic.push_back(r);
      }
      for (const std::string& id : autoscale::ChooseDrain(elastic, current - d.target_replicas)) {
        Drain(ReplicaIndex(id));
      }
    }
    FitToSlots();
  }

  // The floor at `t`: min_replicas, raised by a timetable floor in force (from its lead on), as
  // autoscale::EffectiveMinReplicas has the controller do. The replicas it adds run in the slots
  // training leaves and are chosen to drain only once it ends; unlike the controller's (in the
  // floor partition), the model lets training preempt them, as training's schedule comes first.
  int MinReplicasAt(double t) const {
    const Policies& p = scenario_.policies;
    const int floor = autoscale::TimetableFloorAt(p.timetable, autoscale::TimeZone(),
                                                  TimePoint{kSimMonday + t},
                                                  Duration{p.timetable_lead_s});
    return std::max(p.autoscale.min_replicas, std::min(floor, autoscale_.max_replicas));
  }

  void Drain(int i) {
    Replica& r = *replicas_[i];
    if (r.state == ReplicaState::kPending || r.state == ReplicaState::kStarting) {
      MarkGone(i);
      return;
    }
    r.state = ReplicaState::kDraining;
    r.since = now_;
    admission_.SetDraining(r.id, true);
    if (r.assigned.empty()) Leave(i);
  }

  const Scenario& scenario_;
  const engine::Profile& profile_;
  const std::vector<SessionPlan>& plans_;
  const std::vector<SlotChange>& slots_;
  const InferenceSettings settings_;
  autoscale::AutoscaleSettings autoscale_;
  autoscale::AutoscaleMemory memory_;
  gateway::Admission admission_;
  engine::SchedulerConfig config_;
  int capacity_ = 1;
  int slot_count_ = 0;
  double now_ = 0;
  int64_t seq_ = 0;
  int open_requests_ = 0;
  engine::RequestId next_engine_id_ = 1;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::vector<std::unique_ptr<Replica>> replicas_;  // every replica ever, by index
  std::vector<int> active_;                         // those not gone
  std::vector<Session> sessions_;
  std::vector<Req> reqs_;
  std::unordered_map<gateway::Ticket, int> ticket_req_;
  std::deque<std::pair<double, gateway::Ticket>> wait_order_;
  std::deque<std::pair<double, double>> ttfts_;
  InferenceResult result_;
};

}  // namespace

engine::SchedulerConfig SchedulerConfigOf(const engine::Profile& p) {
  engine::SchedulerConfig c;
  c.max_num_seqs = p.max_num_seqs;
  c.max_num_batched_tokens = p.max_num_batched_tokens;
  c.block_size = p.block_size;
  c.num_kv_blocks = p.num_kv_blocks > 0 ? p.num_kv_blocks : p.DerivedKvBlocks(p.block_size);
  c.max_model_len = p.max_model_len;
  return c;
}

InferenceResult RunInference(const Scenario& scenario, const engine::Profile& profile,
                             const std::vector<SessionPlan>& sessions,
                             const std::vector<SlotChange>& slots,
                             const InferenceSettings& settings) {
  return Sim(scenario, profile, sessions, slots, settings).Run();
}

}  // namespace bmas::plan
