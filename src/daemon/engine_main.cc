#include "daemon/engine_main.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/config_table.h"
#include "common/listen_socket.h"
#include "common/serve.h"
#include "daemon/secret.h"
#include "engine/timing.h"
#include "engine/tls_listener.h"

namespace bmas {

Result<engine::EngineServerOptions> MakeEngineOptions(const EngineSettings& s) {
  engine::ProfileMap profiles;
  try {
    profiles = engine::LoadProfiles(s.profiles_file);
  } catch (const ConfigError& e) {
    return InvalidArgument(e.what(), "profiles_file");
  }
  auto found = engine::FindProfile(profiles, s.profile);
  if (!found) return found.error();
  const engine::Profile& p = *found;
  engine::EngineServerOptions o;
  o.model = s.model;
  o.profile_name = p.name;
  o.time = p.time;
  o.default_chat_max_tokens = s.default_chat_max_tokens;
  o.startup_s = s.startup_s.value_or(p.startup_s);
  if (!std::isfinite(o.startup_s) || o.startup_s < 0 || o.startup_s > 86400) {
    return InvalidArgument(
        fmt::format("startup_s {} is not a number of seconds from 0 to 86400", o.startup_s),
        "startup_s");
  }
  o.wake_s_level1 = p.wake_s_level1;
  o.wake_s_level2 = p.wake_s_level2;
  // As vLLM: the sleep endpoints exist only when VLLM_SERVER_DEV_MODE is a non-zero integer.
  if (const char* dev = std::getenv("VLLM_SERVER_DEV_MODE"); dev != nullptr) {
    o.dev_mode = std::strtol(dev, nullptr, 10) != 0;
  }
  engine::SchedulerConfig& c = o.scheduler;
  c.max_num_seqs = s.max_num_seqs > 0 ? s.max_num_seqs : p.max_num_seqs;
  c.max_num_batched_tokens =
      s.max_num_batched_tokens > 0 ? s.max_num_batched_tokens : p.max_num_batched_tokens;
  c.block_size = s.block_size > 0 ? s.block_size : p.block_size;
  c.num_kv_blocks = s.num_kv_blocks > 0     ? s.num_kv_blocks
                    : p.num_kv_blocks > 0   ? p.num_kv_blocks
                                            : p.DerivedKvBlocks(c.block_size);
  c.max_model_len = s.max_model_len > 0 ? s.max_model_len : p.max_model_len;
  c.enable_prefix_caching = s.prefix_caching;
  if (s.scheduling_policy == "fcfs") {
    c.policy = engine::SchedulingPolicy::kFcfs;
  } else if (s.scheduling_policy == "priority") {
    c.policy = engine::SchedulingPolicy::kPriority;
  } else {
    return InvalidArgument(fmt::format("scheduling policy '{}' is not fcfs or priority",
                                       s.scheduling_policy),
                           "scheduling_policy");
  }
  const int64_t kv_tokens = int64_t{c.num_kv_blocks} * c.block_size;
  if (c.max_model_len > kv_tokens) {
    return InvalidArgument(
        fmt::format("the KV cache holds {} tokens ({} blocks of {}), less than max_model_len {}: "
                    "lower --max-model-len or raise --num-kv-blocks",
                    kv_tokens, c.num_kv_blocks, c.block_size, c.max_model_len),
        "max_model_len");
  }
  o.http.host = s.host;
  o.http.port = static_cast<uint16_t>(s.port);
  o.http.max_body_bytes = static_cast<size_t>(s.max_body_bytes);
  o.http.server_name = "bmas-engine";
  if (!s.api_key.empty()) {
    o.api_key = s.api_key;
  } else {
    auto key = ReadSecret(s.api_key_file, "VLLM_API_KEY");
    if (!key) return InvalidArgument(key.error().message, "api_key_file");
    o.api_key = std::move(*key);
  }
  // Without a key of its own, one derived from `bmas up`'s backend secret and the port.
  if (const char* secret = std::getenv("BMAS_BACKEND_API_KEY");
      o.api_key.empty() && secret != nullptr) {
    o.backend_secret = secret;
  }
  return o;
}

int RunEngine(const EngineSettings& settings, const EngineTls& ssl) {
  auto options = MakeEngineOptions(settings);
  if (!options) {
    fmt::print(stderr, "bmas engine: {}\n", options.error().message);
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);
  net::io_context io(1);
  // With --ssl-certfile, TLS on --host:--port in front of the server on a loopback port.
  std::unique_ptr<engine::TlsListener> tls;
  if (!ssl.certfile.empty() || !ssl.keyfile.empty()) {
    if (ssl.certfile.empty() || ssl.keyfile.empty()) {
      fmt::print(stderr, "bmas engine: TLS needs both --ssl-certfile and --ssl-keyfile\n");
      return 2;
    }
    engine::TlsListenerOptions t;
    t.host = settings.host;
    t.port = static_cast<uint16_t>(settings.port);
    t.certfile = ssl.certfile;
    t.keyfile = ssl.keyfile;
    t.ca_certs = ssl.ca_certs;
    t.cert_reqs = ssl.cert_reqs;
    auto listening = engine::TlsListener::Listen(io, std::move(t));
    if (!listening) {
      fmt::print(stderr, "bmas engine: {}\n", listening.error().message);
      return listening.error().code == ErrorCode::kInvalidArgument ? 2 : 1;
    }
    tls = std::move(*listening);
    options->http.host = "127.0.0.1";
    options->http.port = 0;
    options->key_port = tls->port();
  }
  engine::EngineServer server(io, *options);
  // Caught from before the first line is printed: whoever reads it may stop the engine at once.
  net::signal_set signals(io, SIGINT, SIGTERM);
  // The port is listened on at once, also while "loading": a port bound but not listened on
  // can be taken by any account. While loading, everything but the identity challenge answers
  // 503, as vLLM's API server does.
  const bool loading = options->startup_s > 0;
  auto port = server.Listen();
  if (!port) {
    fmt::print(stderr, "bmas engine: {}\n", port.error().message);
    return 1;
  }
  const char* scheme = tls ? "https" : "http";
  if (tls) {
    tls->Start(*port);
    port = tls->port();
  }
  const auto& c = options->scheduler;
  spdlog::info(
      "bmas engine: SIMULATED vLLM server (no GPU, no model weights) serving model '{}' with "
      "profile '{}': max_num_seqs={} max_num_batched_tokens={} kv_blocks={}x{} "
      "max_model_len={} policy={} prefix_caching={}",
      options->model, options->profile_name, c.max_num_seqs, c.max_num_batched_tokens,
      c.num_kv_blocks, c.block_size, c.max_model_len, settings.scheduling_policy,
      c.enable_prefix_caching);
  if (!options->api_key.empty() || !options->backend_secret.empty()) {
    spdlog::info("bmas engine: /v1/* requires the API key");
  }
  server.SetLoading(loading);
  net::steady_timer loaded(io);
  if (loading) {
    fmt::print("bmas engine: loading on {}://{} for {:g} s (simulated start-up); "
               "answering 503 until then\n",
               scheme, JoinHostPort(settings.host, *port), options->startup_s);
    loaded.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(options->startup_s)));
    loaded.async_wait([&](const beast::error_code& ec) {
      if (ec) return;
      server.SetLoading(false);
      fmt::print("bmas engine: listening on {}://{}\n", scheme, JoinHostPort(settings.host, *port));
      std::fflush(stdout);
    });
  } else {
    fmt::print("bmas engine: listening on {}://{}\n", scheme, JoinHostPort(settings.host, *port));
  }
  std::fflush(stdout);
  server.Start();

  ServeUntilSignalled(io, signals, server, std::chrono::seconds(settings.shutdown_timeout_s),
                      "bmas engine");
  return 0;
}

}  // namespace bmas
