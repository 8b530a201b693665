#include "engine/server.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/backend_identity.h"
#include "common/version.h"

namespace bmas::engine {

using Clock = std::chrono::steady_clock;

namespace {

// What a steady_timer waits for `d` of the env's time.
Clock::duration TimerWait(Duration d) { return std::chrono::duration_cast<Clock::duration>(d); }

uint64_t RandomSalt(Env& env) {
  std::array<uint8_t, 8> bytes;
  env.RandomBytes(bytes);
  uint64_t salt = 0;
  for (uint8_t b : bytes) salt = salt << 8 | b;
  return salt;
}

}  // namespace

// Finds the first stop string in text[from..]; returns its position and which one.
std::optional<std::pair<size_t, size_t>> FindStop(const std::string& text, size_t from,
                                                  const std::vector<std::string>& stops) {
  std::optional<std::pair<size_t, size_t>> best;
  for (size_t i = 0; i < stops.size(); ++i) {
    size_t pos = text.find(stops[i], from);
    if (pos != std::string::npos && (!best || pos < best->first)) best = {pos, i};
  }
  return best;
}

// A request in flight. The step loop appends each token's text (checking stop strings as
// vLLM's output processor does, before a length finish is reported); the handler sends it.
struct EngineServer::Stream {
  Stream(net::io_context& io, std::string echo, std::vector<std::string> stop_strings)
      : wake(io), stops(std::move(stop_strings)), text(std::move(echo)), generated_from(text.size()) {
    for (const std::string& s : stops) max_stop = std::max(max_stop, s.size());
  }

  // Appends a token's text; returns true when a stop string now ends the request.
  bool Append(TokenId token) {
    const size_t before = text.size();
    text += TokenText(token);
    if (!stops.empty()) {
      size_t from = before >= generated_from + max_stop ? before - max_stop + 1 : generated_from;
      if (auto hit = FindStop(text, from, stops)) {
        text.resize(hit->first);
        stop_reason = stops[hit->second];
      }
    }
    token_ends.push_back(text.size());
    return !stop_reason.empty();
  }

  // Bytes of `text` that can be sent once it has `end` bytes: all of them after the last
  // token, else all but what could still become the start of a stop string.
  size_t SafeEnd(size_t end, bool last) const {
    if (last || max_stop == 0) return std::min(end, text.size());
    return std::min(end >= max_stop - 1 ? end - (max_stop - 1) : 0, text.size());
  }

  net::steady_timer wake;
  const std::vector<std::string> stops;
  size_t max_stop = 0;
  std::string text;             // the echoed prompt, then the generated text
  const size_t generated_from;  // where generated text starts
  std::vector<size_t> token_ends;  // text end after each token not yet taken by the handler
  std::string stop_reason;
  FinishReason finish = FinishReason::kNone;
  int num_prompt_tokens = 0;
  int num_cached_tokens = 0;
  int num_output_tokens = 0;
  bool client_gone = false;
};

EngineServer::EngineServer(net::io_context& io, EngineServerOptions options)
    : io_(io),
      options_(std::move(options)),
      env_(*options_.env),
      epoch_(env_.Now()),
      created_(static_cast<int64_t>(env_.UnixNow())),
      id_salt_(RandomSalt(env_)),
      core_(options_.scheduler, options_.time, options_.model, &metrics_),
      http_(io, options_.http,
            [this](HttpRequest& r, ResponseWriter& w) { return Handle(r, w); }),
      idle_(io),
      step_lateness_(metrics_.AddHistogram(
          "bmas_engine_step_lateness_seconds",
          "How much later than its modelled end each simulated step completed.", "",
          {0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1})),
      steps_(metrics_.AddCounter("bmas_engine_steps_total", "Simulated engine steps run.", "")) {
  metrics_
      .AddGauge("bmas_engine_simulated_info",
                "Set to 1: this server is bmas's simulated vLLM engine, not a real one.",
                fmt::format("model_name=\"{}\",profile=\"{}\"", EscapeLabelValue(options_.model),
                            EscapeLabelValue(options_.profile_name)))
      .Set(1);
  metrics_
      .AddGauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig.",
                fmt::format("block_size=\"{}\",num_gpu_blocks=\"{}\",enable_prefix_caching=\"{}\"",
                            options_.scheduler.block_size, options_.scheduler.num_kv_blocks,
                            options_.scheduler.enable_prefix_caching ? "True" : "False"))
      .Set(1);
}

EngineServer::~EngineServer() = default;

double EngineServer::ToVirtual(TimePoint t) const { return (t - epoch_).count(); }

double EngineServer::Now() const { return ToVirtual(env_.Now()); }

Result<uint16_t> EngineServer::Listen() {
  auto port = http_.Listen();
  if (port && options_.api_key.empty() && !options_.backend_secret.empty()) {
    options_.api_key = DeriveBackendKey(options_.backend_secret,
                                        options_.key_port != 0 ? options_.key_port : *port);
  }
  options_.backend_secret.clear();
  return port;
}

void EngineServer::Start() {
  http_.Start();
  net::co_spawn(io_, StepLoop(), LogFailure("engine step loop"));
}

awaitable<void> EngineServer::Stop(Clock::duration deadline) {
  co_await http_.Stop(deadline);
  loop_stop_ = true;
  idle_.cancel();
  net::steady_timer t(io_);
  while (!loop_done_) {
    t.expires_after(std::chrono::milliseconds(1));
    beast::error_code ec;
    co_await t.async_wait(net::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> EngineServer::StepLoop() {
  net::steady_timer timer(io_);
  TimePoint deadline = env_.Now();
  bool busy = false;
  while (!loop_stop_) {
    if (!core_.HasWork()) {
      busy = false;
      idle_.expires_at(Clock::time_point::max());
      beast::error_code ec;
      co_await idle_.async_wait(net::redirect_error(use_awaitable, ec));
      continue;
    }
    // Back-to-back steps start where the previous one was due to end, so that timer
    // lateness does not add up; after idleness or a long stall, they start now.
    const TimePoint now = env_.Now();
    const TimePoint start = busy && now - deadline < std::chrono::milliseconds(20) ? deadline : now;
    busy = true;
    double seconds = core_.BeginStep(ToVirtual(start));
    deadline = start + Duration{seconds};
    beast::error_code ec;
    if (seconds > 0) {
      timer.expires_after(TimerWait(deadline - env_.Now()));
      co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
      step_lateness_.Observe(std::max(0.0, (env_.Now() - deadline).count()));
    } else {
      co_await net::post(io_, use_awaitable);  // let the I/O run between instant steps
    }
    steps_.Inc();
    auto stop_check = [this](RequestId id, TokenId token) {
      auto it = streams_.find(id);
      return it != streams_.end() && it->second->Append(token);
    };
    for (const TokenEvent& e : core_.FinishStep(ToVirtual(deadline), stop_check)) {
      auto it = streams_.find(e.id);
      if (it == streams_.end()) continue;
      Stream* s = it->second;
      s->finish = e.finish_reason;
      s->num_prompt_tokens = e.num_prompt_tokens;
      s->num_cached_tokens = e.num_cached_tokens;
      s->num_output_tokens = e.num_output_tokens;
      s->wake.cancel();
    }
  }
  loop_done_ = true;
}

awaitable<void> EngineServer::Handle(HttpRequest& request, ResponseWriter& writer) {
  std::string_view target = request.target();
  target = target.substr(0, target.find('?'));
  const bool get = request.method() == http::verb::get;
  const bool post = request.method() == http::verb::post;

  if (target == kChallengePath) {
    co_await AnswerChallenge(request, writer);
    co_return;
  }
  if (loading_) {
    // As vLLM while it loads: the port is held, everything else answers 503.
    co_await writer.SendError(http::status::service_unavailable,
                              "the engine is loading its model; retry when /health answers 200");
    co_return;
  }
  const bool sleep_mode =
      options_.dev_mode && (target == "/sleep" || target == "/wake_up" || target == "/is_sleeping");
  if (!options_.api_key.empty() && (target.starts_with("/v1") || sleep_mode)) {
    const std::string_view auth = request[http::field::authorization];
    constexpr std::string_view kBearer = "Bearer ";
    // Compared in time independent of where the first difference lies.
    const std::string_view given =
        auth.starts_with(kBearer) ? auth.substr(kBearer.size()) : std::string_view();
    unsigned char diff = given.size() == options_.api_key.size() ? 0 : 1;
    for (size_t i = 0; i < options_.api_key.size(); ++i) {
      diff |= static_cast<unsigned char>(options_.api_key[i] ^ (i < given.size() ? given[i] : 0));
    }
    if (diff != 0) {
      co_await writer.Send(http::status::unauthorized, "application/json",
                           R"({"error":"Unauthorized"})");
      co_return;
    }
  }
  if (target == "/v1/completions" || target == "/v1/chat/completions" ||
      target == "/v1/responses") {
    if (!post) {
      co_await writer.SendError(http::status::method_not_allowed,
                                fmt::format("{} takes POST", target));
      co_return;
    }
    co_await HandleCompletion(request, writer,
                              target == "/v1/completions"        ? Endpoint::kCompletions
                              : target == "/v1/chat/completions" ? Endpoint::kChatCompletions
                                                                 : Endpoint::kResponses);
    co_return;
  }
  if (sleep_mode) {
    co_await HandleSleepMode(request, writer, target);
    co_return;
  }
  if (!get && (target == "/v1/models" || target == "/health" || target == "/version" ||
               target == "/metrics")) {
    co_await writer.SendError(http::status::method_not_allowed, fmt::format("{} takes GET", target));
    co_return;
  }
  if (target == "/v1/models") {
    // Built outside the co_await: GCC 12 destroys braced temporaries in a co_await twice.
    ModelCard card{options_.model, created_, options_.scheduler.max_model_len,
                   options_.scheduler.max_num_seqs, options_.profile_name};
    std::string body = ModelsJson(card);
    co_await writer.Send(http::status::ok, "application/json", std::move(body));
  } else if (target == "/health") {
    co_await writer.Send(http::status::ok, "application/json",
                         R"({"status":"ok","simulated":true})");
  } else if (target == "/version") {
    co_await writer.Send(
        http::status::ok, "application/json",
        fmt::format(R"json({{"version":"{}","engine":"bmas engine: a simulated vLLM server (no GPU, no model weights)","simulated":true,"profile":"{}"}})json",
                    kBmasVersion, options_.profile_name));
  } else if (target == "/metrics") {
    core_.UpdateGauges(Now());
    co_await writer.Send(http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                         metrics_.Render());
  } else {
    co_await writer.SendError(http::status::not_found,
                              fmt::format("no such path: {}", std::string(target)));
  }
}

// As vLLM's dev-mode endpoints: /sleep and /wake_up answer 200 with no body once done;
// /wake_up answers once the engine is awake, after the profile's wake time.
awaitable<void> EngineServer::HandleSleepMode(HttpRequest& request, ResponseWriter& writer,
                                              std::string_view target) {
  const http::verb want = target == "/is_sleeping" ? http::verb::get : http::verb::post;
  if (request.method() != want) {
    co_await writer.SendError(
        http::status::method_not_allowed,
        fmt::format("{} takes {}", target, want == http::verb::get ? "GET" : "POST"));
    co_return;
  }
  if (target == "/is_sleeping") {
    const bool sleeping = core_.sleep_state(Now()) != SleepState::kAwake;
    co_await writer.Send(http::status::ok, "application/json",
                         fmt::format(R"({{"is_sleeping":{}}})", sleeping));
    co_return;
  }
  if (target == "/sleep") {
    std::string_view query = request.target();
    const size_t q = query.find('?');
    query = q == std::string_view::npos ? std::string_view() : query.substr(q + 1);
    int level = 1;
    for (size_t at = 0; at <= query.size();) {
      const size_t end = std::min(query.find('&', at), query.size());
      const std::string_view param = query.substr(at, end - at);
      if (param.starts_with("level=")) level = param == "level=2" ? 2 : param == "level=1" ? 1 : 0;
      at = end + 1;
    }
    if (level == 0) {
      co_await writer.SendError(http::status::bad_request, "level must be 1 or 2", "level");
      co_return;
    }
    // As vLLM's sleep (mode "abort"): requests in flight end with finish_reason "abort".
    for (RequestId id : core_.Sleep(level, Now())) {
      auto it = streams_.find(id);
      if (it == streams_.end()) continue;
      it->second->finish = FinishReason::kAbort;
      it->second->wake.cancel();
    }
    spdlog::info("bmas engine: asleep at level {}", level);
    co_await writer.Send(http::status::ok, "text/plain", "");
    co_return;
  }
  // POST /wake_up: vLLM's ?tags=weights|kv_cache wakes part of the engine; here a wake wakes it
  // all, whatever the tags.
  const double now = Now();
  const int level = core_.sleep_level(now);
  const double awake_at =
      core_.WakeUp(now, level == 2 ? options_.wake_s_level2 : options_.wake_s_level1);
  if (awake_at > now) {
    net::steady_timer waking(io_);
    waking.expires_after(TimerWait(Duration{awake_at - now}));
    beast::error_code ec;
    co_await waking.async_wait(net::redirect_error(use_awaitable, ec));
  }
  if (level != 0) spdlog::info("bmas engine: awake after {:g} s", awake_at - now);
  co_await writer.Send(http::status::ok, "text/plain", "");
}

awaitable<void> EngineServer::AnswerChallenge(HttpRequest& request, ResponseWriter& writer) {
  std::string_view query = request.target();
  const size_t q = query.find('?');
  query = q == std::string_view::npos ? std::string_view() : query.substr(q + 1);
  constexpr std::string_view kNonce = "nonce=";
  const std::string_view nonce = query.starts_with(kNonce) ? query.substr(kNonce.size()) : "";
  if (request.method() != http::verb::get) {
    co_await writer.SendError(http::status::method_not_allowed, "the challenge takes GET");
  } else if (options_.api_key.empty()) {
    co_await writer.SendError(http::status::not_found,
                              "this engine has no API key, so no identity to prove");
  } else if (!IsChallengeNonce(nonce)) {
    co_await writer.SendError(http::status::bad_request,
                              "the challenge needs ?nonce= with 16 to 128 hex digits", "nonce");
  } else {
    co_await writer.Send(http::status::ok, "text/plain",
                         ChallengeAnswer(options_.api_key, nonce));
  }
}

awaitable<void> EngineServer::HandleCompletion(HttpRequest& request, ResponseWriter& writer,
                                               Endpoint endpoint) {
  const double arrival = Now();
  auto parsed = parser_.Parse(request.body(), endpoint);
  if (!parsed) {
    co_await writer.SendError(parsed.error());
    co_return;
  }
  CompletionRequest& req = *parsed;
  if (req.model != options_.model) {
    co_await writer.SendError(http::status::not_found,
                              fmt::format("The model `{}` does not exist.", req.model), "model");
    co_return;
  }
  if (req.priority != 0 && options_.scheduler.policy != SchedulingPolicy::kPriority) {
    co_await writer.SendError(http::status::bad_request,
                              "'priority' needs the engine to run with --scheduling-policy priority",
                              "priority");
    co_return;
  }
  const int prompt_len = static_cast<int>(req.prompt_tokens.size());
  int max_tokens = req.max_tokens.value_or(
      endpoint == Endpoint::kCompletions
          ? 16
          : std::max(1, std::min(options_.default_chat_max_tokens,
                                 options_.scheduler.max_model_len - prompt_len)));

  auto r = std::make_unique<Request>();
  const RequestId id = next_id_++;
  r->id = id;
  r->seed = req.sample_seed;
  r->tokens = std::move(req.prompt_tokens);
  r->num_prompt_tokens = prompt_len;
  r->max_tokens = max_tokens;
  r->priority = req.priority;
  // The API server's own latency (parsing, tokenizing, the hop to the engine core) passes
  // before the scheduler sees the request, as in calibration.
  if (options_.time.frontend_s > 0) {
    net::steady_timer frontend(io_);
    frontend.expires_after(TimerWait(Duration{arrival + options_.time.frontend_s - Now()}));
    beast::error_code ec;
    co_await frontend.async_wait(net::redirect_error(use_awaitable, ec));
  }
  if (auto added = core_.AddRequest(std::move(r), arrival); !added) {
    co_await writer.SendError(added.error());
    co_return;
  }
  Stream stream(io_, req.echo ? req.prompt_text : std::string(), std::move(req.stop));
  stream.num_prompt_tokens = prompt_len;  // for usage, should sleep abort it before a token
  streams_[id] = &stream;
  idle_.cancel();
  // However the handler ends, the request leaves the engine and frees its blocks.
  struct Cleanup {
    EngineServer* self;
    RequestId id;
    ResponseWriter* writer;
    ~Cleanup() {
      writer->StopWatching();
      self->streams_.erase(id);
      self->core_.Finish(id, FinishReason::kAbort, self->Now());
    }
  } cleanup{this, id, &writer};
  writer.WatchForDisconnect([&stream] {
    stream.client_gone = true;
    stream.wake.cancel();
  });

  // As vLLM: 32 random-looking hex digits, unique across replicas and restarts (this server's
  // random salt, then its request counter), and `created` is the request's own time.
  const char* prefix = endpoint == Endpoint::kCompletions ? "cmpl-"
                       : endpoint == Endpoint::kResponses ? "resp_"
                                                          : "chatcmpl-";
  const int64_t created = static_cast<int64_t>(env_.UnixNow());
  ResponseContext ctx{endpoint, fmt::format("{}{:016x}{:016x}", prefix, id_salt_, id),
                      options_.model, created};
  const bool responses = endpoint == Endpoint::kResponses;
  ResponseEvents events(ctx);
  size_t emitted = 0;  // bytes of stream.text already sent
  std::vector<size_t> ends;
  bool first = true;
  std::string out;
  if (req.stream) {
    if (!co_await writer.StartStream(http::status::ok, "text/event-stream; charset=utf-8")) {
      co_return;
    }
    if (endpoint != Endpoint::kCompletions) {
      if (responses) {
        events.Begin(out);
      } else {
        AppendStreamChunk(ctx, "", true, FinishReason::kNone, "", out);
      }
      first = false;
      if (!co_await writer.SendChunk(out)) co_return;
    }
  }
  while (true) {
    if (stream.client_gone) co_return;  // the request is aborted on the way out
    if (stream.token_ends.empty() && stream.finish == FinishReason::kNone) {
      stream.wake.expires_at(Clock::time_point::max());
      beast::error_code ec;
      co_await stream.wake.async_wait(net::redirect_error(use_awaitable, ec));
      continue;
    }
    // Take what has arrived; more may arrive while this is being sent.
    ends.clear();
    ends.swap(stream.token_ends);
    const FinishReason finish = stream.finish;
    if (req.stream) {
      // One event per token, as vLLM streams them.
      out.clear();
      for (size_t i = 0; i < ends.size(); ++i) {
        const bool last = i + 1 == ends.size() && finish != FinishReason::kNone;
        size_t safe = std::max(emitted, stream.SafeEnd(ends[i], last));
        const std::string_view piece =
            std::string_view(stream.text).substr(emitted, safe - emitted);
        if (responses) {
          events.Delta(piece, out);
        } else {
          AppendStreamChunk(ctx, piece, first, last ? finish : FinishReason::kNone,
                            stream.stop_reason, out);
        }
        emitted = safe;
        first = false;
      }
      if (ends.empty() && finish != FinishReason::kNone) {  // aborted between tokens (sleep)
        const std::string_view rest = std::string_view(stream.text).substr(emitted);
        if (!responses) {
          AppendStreamChunk(ctx, rest, first, finish, stream.stop_reason, out);
        } else if (!rest.empty()) {  // the Responses stream ends with its own events below
          events.Delta(rest, out);
        }
        emitted = stream.text.size();
        first = false;
      }
      if (!co_await writer.SendChunk(out)) co_return;  // client gone: the request is aborted
    }
    if (finish != FinishReason::kNone) break;
  }

  Usage usage{stream.num_prompt_tokens, stream.num_output_tokens, stream.num_cached_tokens};
  if (responses) {
    // The simulated model has no end-of-sequence token: an answer as long as the engine's
    // default is its natural end ("completed"); one cut at the client's max_output_tokens is
    // "incomplete".
    const FinishReason reason = stream.finish == FinishReason::kLength && !req.max_tokens
                                    ? FinishReason::kStop
                                    : stream.finish;
    if (req.stream) {
      out.clear();
      events.End(stream.text, reason, usage, out);
      if (co_await writer.SendChunk(out)) co_await writer.EndStream();
    } else {
      std::string body = ResponseObjectJson(ctx, stream.text, reason, usage);
      co_await writer.Send(http::status::ok, "application/json", std::move(body));
    }
  } else if (req.stream) {
    out.clear();
    if (req.include_usage) AppendUsageChunk(ctx, usage, out);
    out += kSseDone;
    if (co_await writer.SendChunk(out)) co_await writer.EndStream();
  } else {
    std::string body =
        CompletionResponseJson(ctx, stream.text, stream.finish, stream.stop_reason, usage);
    co_await writer.Send(http::status::ok, "application/json", std::move(body));
  }
}

}  // namespace bmas::engine
