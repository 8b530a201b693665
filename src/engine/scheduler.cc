#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>

#include <fmt/format.h>

namespace bmas::engine {

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kAbort: return "abort";
  }
  return "";
}

void StepBatch::Clear() {
  requests.clear();
  num_decode_tokens = 0;
  num_prefill_tokens = 0;
  num_context_tokens = 0;
  num_preemptions = 0;
  prefix_queries = 0;
  prefix_hits = 0;
}

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      kv_(config.num_kv_blocks, config.block_size, config.enable_prefix_caching) {}

Request* Scheduler::Find(RequestId id) {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

std::vector<RequestId> Scheduler::RequestIds() const {
  std::vector<RequestId> ids;
  ids.reserve(requests_.size());
  for (const auto& [id, request] : requests_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

Result<void> Scheduler::Add(std::unique_ptr<Request> request) {
  const int64_t prompt = request->num_prompt_tokens;
  if (prompt + request->max_tokens > config_.max_model_len) {
    return InvalidArgument(
        fmt::format("This model's maximum context length is {} tokens. However, you requested "
                    "{} tokens ({} in the prompt, {} in the completion). Please reduce the "
                    "length of the prompt or max_tokens.",
                    config_.max_model_len, prompt + request->max_tokens, prompt,
                    request->max_tokens),
        "max_tokens");
  }
  if (prompt == 0) return InvalidArgument("the prompt is empty", "prompt");
  const int64_t blocks = (prompt + config_.block_size) / config_.block_size;  // prompt + 1 token
  if (blocks > config_.num_kv_blocks) {
    // Never admissible: it would block the queue for good. (The server refuses to start with a
    // max_model_len the KV cache cannot hold, as vLLM does, so this guards direct users.)
    return InvalidArgument(
        fmt::format("the prompt needs {} KV blocks but the cache has only {}", blocks,
                    config_.num_kv_blocks),
        "prompt");
  }
  if (requests_.contains(request->id)) {
    return InvalidArgument(fmt::format("request id {} is already in use", request->id));
  }
  request->arrival_seq = next_arrival_seq_++;
  kv_.UpdateHashes(request->blocks, request->tokens);
  Request* r = request.get();
  requests_.emplace(r->id, std::move(request));
  InsertWaiting(r, /*front=*/false);
  return {};
}

std::unique_ptr<Request> Scheduler::Remove(RequestId id, FinishReason reason) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return nullptr;
  std::unique_ptr<Request> request = std::move(it->second);
  requests_.erase(it);
  Request* r = request.get();
  if (r->running) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else {
    auto w = std::find(waiting_.begin(), waiting_.end(), r);
    if (w != waiting_.end()) waiting_.erase(w);
  }
  // A request removed mid-step must not be accounted when the step completes.
  auto& scheduled = batch_.requests;
  scheduled.erase(std::remove_if(scheduled.begin(), scheduled.end(),
                                 [r](const ScheduledRequest& s) { return s.request == r; }),
                  scheduled.end());
  kv_.Free(r->blocks);
  r->running = false;
  if (r->finish_reason == FinishReason::kNone) r->finish_reason = reason;
  return request;
}

bool Scheduler::Worse(const Request* a, const Request* b) const {
  if (config_.policy == SchedulingPolicy::kPriority && a->priority != b->priority) {
    return a->priority > b->priority;
  }
  return a->arrival_seq > b->arrival_seq;
}

Request* Scheduler::WorstRunning() {
  if (running_.empty()) return nullptr;
  if (config_.policy == SchedulingPolicy::kFcfs) return running_.back();
  return *std::max_element(running_.begin(), running_.end(),
                           [this](const Request* a, const Request* b) { return Worse(b, a); });
}

void Scheduler::InsertWaiting(Request* request, bool front) {
  if (config_.policy == SchedulingPolicy::kFcfs) {
    if (front) waiting_.push_front(request); else waiting_.push_back(request);
    return;
  }
  // Priority order (lower value first), ties by arrival: a preempted request returns ahead of
  // later arrivals of its priority.
  auto pos = std::find_if(waiting_.begin(), waiting_.end(),
                          [&](const Request* w) { return Worse(w, request); });
  waiting_.insert(pos, request);
}

void Scheduler::Preempt(Request* victim, int& budget) {
  running_.erase(std::find(running_.begin(), running_.end(), victim));
  auto& scheduled = batch_.requests;
  auto s = std::find_if(scheduled.begin(), scheduled.end(),
                        [victim](const ScheduledRequest& x) { return x.request == victim; });
  if (s != scheduled.end()) {
    budget += s->num_new_tokens;
    scheduled.erase(s);
  }
  kv_.Free(victim->blocks);
  victim->running = false;
  victim->num_computed_tokens = 0;
  ++batch_.num_preemptions;
  InsertWaiting(victim, /*front=*/true);
}

const StepBatch& Scheduler::Schedule(double now) {
  batch_.Clear();
  int budget = config_.max_num_batched_tokens;

  // 1. Running requests, in order: decodes and the ongoing chunked prefill. The requests
  // already taken form a prefix of running_ (a preemption removes from both), so the next
  // one to look at is always running_[batch_.requests.size()].
  while (batch_.requests.size() < running_.size() && budget > 0) {
    Request* r = running_[batch_.requests.size()];
    int64_t n = std::min<int64_t>(r->num_tokens() - r->num_computed_tokens, budget);
    assert(n > 0);
    bool scheduled = false;
    while (true) {
      if (kv_.Allocate(r->blocks, {}, r->num_computed_tokens + n)) {
        scheduled = true;
        break;
      }
      Request* victim = WorstRunning();
      Preempt(victim, budget);
      if (victim == r) break;
    }
    if (!scheduled) break;  // r itself was preempted, as vLLM does the step ends here
    batch_.requests.push_back({r, static_cast<int>(n)});
    budget -= static_cast<int>(n);
  }
  const bool preempted_for_running = batch_.num_preemptions > 0;

  // 2. Waiting requests, unless this step had to preempt.
  while (!preempted_for_running && !waiting_.empty() && budget > 0) {
    Request* r = waiting_.front();
    bool seats = static_cast<int>(running_.size()) < config_.max_num_seqs;
    std::vector<BlockId> hit;
    int64_t cached_tokens = 0;
    bool allocated = false;
    int64_t n = 0;
    if (seats) {
      // Never take the whole request from the cache: its last token must be computed to
      // produce the next one.
      size_t max_blocks = static_cast<size_t>((r->num_tokens() - 1) / config_.block_size);
      hit = kv_.FindCachedPrefix(r->blocks, max_blocks);
      cached_tokens = static_cast<int64_t>(hit.size()) * config_.block_size;
      n = std::min<int64_t>(r->num_tokens() - cached_tokens, budget);
      allocated = kv_.Allocate(r->blocks, hit, cached_tokens + n);
    }
    if (!allocated) {
      // Under priority scheduling a better waiting request pushes out a worse running one.
      Request* victim = WorstRunning();
      if (config_.policy == SchedulingPolicy::kPriority && victim != nullptr &&
          victim->priority > r->priority) {
        Preempt(victim, budget);
        continue;
      }
      break;
    }
    waiting_.pop_front();
    running_.push_back(r);
    r->running = true;
    r->num_computed_tokens = cached_tokens;
    batch_.prefix_queries += r->num_tokens();
    batch_.prefix_hits += cached_tokens;
    if (!r->scheduled_once) {
      r->scheduled_once = true;
      r->scheduled_time = now;
      r->num_cached_tokens = static_cast<int>(cached_tokens);
    }
    batch_.requests.push_back({r, static_cast<int>(n)});
    budget -= static_cast<int>(n);
  }

  for (const ScheduledRequest& s : batch_.requests) {
    const Request* r = s.request;
    bool decode = s.num_new_tokens == 1 && r->num_computed_tokens + 1 == r->num_tokens() &&
                  r->num_output_tokens() > 0;
    if (decode) ++batch_.num_decode_tokens; else batch_.num_prefill_tokens += s.num_new_tokens;
    batch_.num_context_tokens += r->num_computed_tokens + s.num_new_tokens;
  }
  return batch_;
}

const std::vector<Request*>& Scheduler::Complete(double now) {
  produced_.clear();
  for (const ScheduledRequest& s : batch_.requests) {
    Request* r = s.request;
    r->num_computed_tokens += s.num_new_tokens;
    kv_.CacheComputedBlocks(r->blocks, r->num_computed_tokens);
    if (r->num_computed_tokens < r->num_tokens()) continue;  // a prefill chunk
    r->tokens.push_back(SampleToken(r->seed, r->num_output_tokens()));
    kv_.UpdateHashes(r->blocks, r->tokens);
    if (r->first_token_time < 0) r->first_token_time = now;
    r->prev_token_time = r->last_token_time;
    r->last_token_time = now;
    produced_.push_back(r);
    if (r->num_output_tokens() >= r->max_tokens || r->num_tokens() >= config_.max_model_len) {
      r->finish_reason = FinishReason::kLength;
    }
  }
  return produced_;
}

}  // namespace bmas::engine
