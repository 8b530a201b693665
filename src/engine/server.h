#pragma once

// EngineServer: `bmas engine`, the EngineCore driven in real time behind vLLM's
// OpenAI-compatible HTTP API (/v1/models, /v1/completions, /v1/chat/completions, /health,
// /version, /metrics), and vLLM's sleep mode in dev mode (/sleep, /wake_up, /is_sleeping).
//
// A step loop runs the core: it schedules a step, waits until the step's modelled duration has
// passed on the steady clock, then hands each request its new token. Request handlers turn
// tokens into text, apply stop strings and stream SSE events.
//
// Everything runs on one io_context thread; not thread-safe.

#include <chrono>
#include <memory>
#include <string>
#include <unordered_map>

#include "common/asio.h"
#include "common/env.h"
#include "common/http_server.h"
#include "common/metrics.h"
#include "engine/engine_core.h"
#include "engine/openai_api.h"
#include "engine/timing.h"

namespace bmas::engine {

struct EngineServerOptions {
  std::string model = "meta-llama/Llama-3.1-8B-Instruct";
  std::string profile_name;
  SchedulerConfig scheduler;
  StepTimeModel time;
  HttpServerOptions http;
  // max_tokens of a chat completion that gives none: stands in for where a real model would
  // end its answer (vLLM's own default is the rest of the context window).
  int default_chat_max_tokens = 256;
  // vLLM's --api-key: when set, /v1/* answers 401 without `Authorization: Bearer <api_key>`;
  // /health, /version and /metrics stay open, as in vLLM. A secret: never logged. Also what
  // the engine proves it holds at /bmas/challenge.
  std::string api_key;
  // When api_key is empty: the backend secret that `bmas up` shares with the gateway; the key
  // is then DeriveBackendKey(backend_secret, the port listened on). Dropped after Listen().
  std::string backend_secret;
  // The port clients dial, from which the key is derived, when not the port this server
  // listens on: the TLS listener's in front of it (engine/tls_listener.h). 0 = the same.
  uint16_t key_port = 0;
  // Seconds that RunEngine answers 503 after Listen() (the simulated start-up).
  double startup_s = 0;
  // vLLM's sleep mode endpoints (POST /sleep?level=1|2, POST /wake_up, GET /is_sleeping):
  // served only in vLLM's dev mode (VLLM_SERVER_DEV_MODE=1), else 404 as in vLLM. They need
  // the API key when one is set. Waking takes the profile's wake time for the level slept at.
  bool dev_mode = false;
  double wake_s_level1 = 0;
  double wake_s_level2 = 0;
  // Where the server reads the time and its random id salt. Its timers still wait on the
  // steady clock, for as long as the env's time says is left. Not owned; outlives the server.
  Env* env = &Env::Default();
};

class EngineServer {
 public:
  EngineServer(net::io_context& io, EngineServerOptions options);
  ~EngineServer();

  EngineServer(const EngineServer&) = delete;
  EngineServer& operator=(const EngineServer&) = delete;

  // Binds and listens at once (a port bound but not listened on can be taken by any account);
  // returns the port.
  Result<uint16_t> Listen();
  void Start();
  // While loading, every path but the identity challenge answers 503, as vLLM's does while it
  // loads the model.
  void SetLoading(bool loading) { loading_ = loading; }
  // Stops accepting, lets in-flight requests finish up to `deadline`, then stops the loop.
  awaitable<void> Stop(std::chrono::steady_clock::duration deadline);

 private:
  struct Stream;

  awaitable<void> Handle(HttpRequest& request, ResponseWriter& writer);
  awaitable<void> HandleCompletion(HttpRequest& request, ResponseWriter& writer,
                                   Endpoint endpoint);
  // POST /sleep, POST /wake_up, GET /is_sleeping.
  awaitable<void> HandleSleepMode(HttpRequest& request, ResponseWriter& writer,
                                  std::string_view target);
  // GET /bmas/challenge?nonce=N: proves this engine holds api_key (common/backend_identity.h).
  awaitable<void> AnswerChallenge(HttpRequest& request, ResponseWriter& writer);
  awaitable<void> StepLoop();
  double Now() const;
  double ToVirtual(TimePoint t) const;

  net::io_context& io_;
  EngineServerOptions options_;
  Env& env_;
  TimePoint epoch_;
  int64_t created_;     // unix seconds at start: the model card's `created`
  uint64_t id_salt_;    // random: makes completion ids unique across servers
  MetricsRegistry metrics_;
  EngineCore core_;
  HttpServer http_;
  RequestParser parser_;
  net::steady_timer idle_;
  bool loading_ = false;
  bool loop_stop_ = false;
  bool loop_done_ = false;
  RequestId next_id_ = 1;
  std::unordered_map<RequestId, Stream*> streams_;
  Histogram& step_lateness_;
  Counter& steps_;
};

}  // namespace bmas::engine
