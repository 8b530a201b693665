#pragma once

// The step scheduler of a vLLM V1 engine: continuous batching under a token budget, chunked
// prefill, paged KV allocation with prefix caching, and recompute preemption.
//
// Pure and single-threaded: it takes decisions from its state and the times it is given and
// never reads a clock, so the same code runs in real time (the server) and in virtual time
// (calibration, simulations).

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/result.h"
#include "engine/kv_cache.h"
#include "engine/tokenizer.h"

namespace bmas::engine {

using RequestId = uint64_t;

enum class SchedulingPolicy { kFcfs, kPriority };
enum class FinishReason { kNone, kLength, kStop, kAbort };

const char* FinishReasonName(FinishReason reason);

struct SchedulerConfig {
  int max_num_seqs = 1024;
  int max_num_batched_tokens = 8192;
  int block_size = 16;
  int num_kv_blocks = 25000;
  int max_model_len = 131072;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  bool enable_prefix_caching = true;
};

struct Request {
  RequestId id = 0;
  std::vector<TokenId> tokens;  // prompt, then output
  int num_prompt_tokens = 0;
  int max_tokens = 16;
  int priority = 0;
  uint64_t seed = 0;
  uint64_t arrival_seq = 0;  // order of arrival; breaks priority ties

  int64_t num_computed_tokens = 0;
  int num_cached_tokens = 0;  // prefix-cache hit at first scheduling
  BlockTable blocks;
  bool running = false;
  bool scheduled_once = false;
  FinishReason finish_reason = FinishReason::kNone;

  // Virtual times, seconds.
  double arrival_time = 0;
  double scheduled_time = -1;
  double first_token_time = -1;
  double last_token_time = -1;
  double prev_token_time = -1;

  int num_output_tokens() const { return static_cast<int>(tokens.size()) - num_prompt_tokens; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

struct ScheduledRequest {
  Request* request;
  int num_new_tokens;
};

// What one step computes.
struct StepBatch {
  std::vector<ScheduledRequest> requests;
  int num_decode_tokens = 0;   // requests computing exactly their last known token
  int num_prefill_tokens = 0;  // every other scheduled token
  int64_t num_context_tokens = 0;  // KV entries read: the scheduled requests' lengths
  int num_preemptions = 0;
  int64_t prefix_queries = 0;  // tokens looked up in the prefix cache this step
  int64_t prefix_hits = 0;     // of which found
  void Clear();
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Fails (400) when prompt + max_tokens exceeds max_model_len.
  Result<void> Add(std::unique_ptr<Request> request);

  // Removes a request, waiting or running; its blocks are freed at once. Returns the
  // request (finish_reason set to `reason`) or nullptr if unknown.
  std::unique_ptr<Request> Remove(RequestId id, FinishReason reason);

  // Picks this step's batch: running requests first (decodes and an ongoing chunked
  // prefill), preempting on a KV shortage, then waiting ones while budget and blocks allow.
  const StepBatch& Schedule(double now);

  // Accounts a finished step: computed tokens advance; a request whose known tokens are all
  // computed samples its next token. Returns the requests that produced a token, valid until
  // the next call. Requests that reached max_tokens get finish_reason kLength and stay until
  // the caller Remove()s them.
  const std::vector<Request*>& Complete(double now);

  const StepBatch& batch() const { return batch_; }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  bool HasWork() const { return !running_.empty() || !waiting_.empty(); }
  const KvCacheManager& kv() const { return kv_; }
  // Forgets every cached prefix; fails while a request holds blocks.
  bool ResetPrefixCache() { return kv_.ResetPrefixCache(); }
  // The ids of every request queued or running.
  std::vector<RequestId> RequestIds() const;
  const SchedulerConfig& config() const { return config_; }
  Request* Find(RequestId id);

 private:
  void Preempt(Request* victim, int& budget);
  void InsertWaiting(Request* request, bool front);
  Request* WorstRunning();
  bool Worse(const Request* a, const Request* b) const;

  const SchedulerConfig config_;
  KvCacheManager kv_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;
  std::deque<Request*> waiting_;
  StepBatch batch_;
  std::vector<Request*> produced_;
  uint64_t next_arrival_seq_ = 0;
};

}  // namespace bmas::engine
