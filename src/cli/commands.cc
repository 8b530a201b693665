#include <ctime>
#include "cli/commands.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "common/config_table.h"
#include "daemon/engine_main.h"
#include "daemon/gateway_main.h"
#include "daemon/up.h"
#include "daemon/up_record.h"
#include "engine/calibrate.h"

namespace bmas {

int ReportFailure(const std::string& command, const Error& error) {
  fmt::print(stderr, "bmas {}: {}\n", command, error.message);
  return error.code == ErrorCode::kInvalidArgument || error.code == ErrorCode::kPermissionDenied
             ? 2
             : 1;
}

CLI::Validator NumberAbove(double bound, bool or_equal) {
  return CLI::Validator(
      [bound, or_equal](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return fmt::format("is not a number: {}", text);
        if (or_equal ? v >= bound : v > bound) return "";
        return fmt::format("must be {} {} (got {})", or_equal ? "at least" : "more than", bound,
                           text);
      },
      or_equal ? fmt::format("NUMBER>={}", bound) : fmt::format("NUMBER>{}", bound));
}

std::string UtcTime(int64_t unix_seconds) {
  std::time_t t = unix_seconds;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Config GlobalOptions::LoadConfigOrDefaults() const {
  return LoadConfig(config_file.empty() ? DefaultConfigPath() : config_file);
}

void GlobalOptions::SetUpLogging() const {
  auto logger = spdlog::stderr_color_mt("bmas");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
}

// The flags the engine and the gateway share: the largest body and the drain on SIGTERM.
template <typename Bytes, typename Seconds>
void AddServerLimitFlags(CLI::App& c, Bytes& max_body_bytes, Seconds& shutdown_timeout_s) {
  c.add_option("--max-body-bytes", max_body_bytes, "Largest request body; larger gets 413")
      ->check(kPositive)
      ->default_str("4194304");
  c.add_option("--shutdown-timeout", shutdown_timeout_s,
               "Seconds in-flight requests get to finish after SIGTERM")
      ->check(kNonNegative)
      ->default_str("30");
}

// `bmas engine`'s TLS flags (vLLM's): one engine command per process.
EngineTls& EngineTlsFlags() {
  static EngineTls flags;
  return flags;
}

// Flags given on the command line win over the config file; an option counts as given when
// CLI11 saw it.
void EngineCommand::ApplyFlags(EngineSettings& s) const {
  auto given = [this](const char* name) { return cmd_->count(name) > 0; };
  if (given("--model")) s.model = flags_.model;
  if (given("--profile")) s.profile = flags_.profile;
  if (given("--profiles")) s.profiles_file = flags_.profiles_file;
  if (given("--host")) s.host = flags_.host;
  if (given("--port")) s.port = flags_.port;
  if (given("--max-num-seqs")) s.max_num_seqs = flags_.max_num_seqs;
  if (given("--max-num-batched-tokens")) s.max_num_batched_tokens = flags_.max_num_batched_tokens;
  if (given("--num-kv-blocks")) s.num_kv_blocks = flags_.num_kv_blocks;
  if (given("--block-size")) s.block_size = flags_.block_size;
  if (given("--max-model-len")) s.max_model_len = flags_.max_model_len;
  if (given("--scheduling-policy")) s.scheduling_policy = flags_.scheduling_policy;
  if (no_prefix_caching_) s.prefix_caching = false;
  if (given("--max-body-bytes")) s.max_body_bytes = flags_.max_body_bytes;
  if (given("--shutdown-timeout")) s.shutdown_timeout_s = flags_.shutdown_timeout_s;
  if (given("--default-chat-max-tokens")) s.default_chat_max_tokens = flags_.default_chat_max_tokens;
  if (given("--api-key")) s.api_key = flags_.api_key;
  if (given("--startup-s")) {
    s.startup_s = startup_ == "profile" ? std::nullopt : std::optional<double>(std::stod(startup_));
  }
}

void EngineCommand::Register(CLI::App& app, GlobalOptions& global) {
  cmd_ = app.add_subcommand(
      "engine",
      "Run a simulated vLLM server (OpenAI API, vLLM scheduling, paging, caching and timing)");
  CLI::App& c = *cmd_;
  c.footer(
      "With VLLM_SERVER_DEV_MODE=1 in the environment, as vLLM, it also serves vLLM's sleep "
      "mode: POST /sleep?level=1|2, POST /wake_up, GET /is_sleeping.");
  c.add_option("--model", flags_.model, "Model name served")->default_str(flags_.model);
  c.add_option("--profile", flags_.profile, "Hardware profile (llama-3.1-8b-h100, instant, ...)")
      ->default_str(flags_.profile);
  c.add_option("--profiles", flags_.profiles_file, "TOML file with more profiles");
  c.add_option("--host", flags_.host, "Address to listen on")->default_str(flags_.host);
  c.add_option("--port", flags_.port, "Port; 0 picks a free one and prints it")
      ->check(CLI::Range(0, 65535))
      ->default_str("0");
  c.add_option("--max-num-seqs", flags_.max_num_seqs, "Most requests running at once (default: profile)")
      ->check(kPositive);
  c.add_option("--max-num-batched-tokens", flags_.max_num_batched_tokens,
               "Token budget of one step (default: profile)")
      ->check(kPositive);
  c.add_option("--num-kv-blocks", flags_.num_kv_blocks,
               "KV cache blocks (default: profile, or derived from its memory figures)")
      ->check(kPositive);
  c.add_option("--block-size", flags_.block_size, "Tokens per KV block (default: 16)")
      ->check(kPositive);
  c.add_option("--max-model-len", flags_.max_model_len,
               "Longest prompt + output in tokens (default: profile, 131072 for llama-3.1-8b-h100)")
      ->check(kPositive);
  c.add_option("--scheduling-policy", flags_.scheduling_policy, "fcfs or priority")
      ->check(CLI::IsMember({"fcfs", "priority"}))
      ->default_str("fcfs");
  c.add_flag("--no-prefix-caching", no_prefix_caching_, "Disable automatic prefix caching");
  AddServerLimitFlags(c, flags_.max_body_bytes, flags_.shutdown_timeout_s);
  c.add_option("--default-chat-max-tokens", flags_.default_chat_max_tokens,
               "Output length of a chat completion that sets no max_tokens")
      ->check(kPositive)
      ->default_str("256");
  c.add_option("--api-key", flags_.api_key,
               "As vLLM's: /v1/* then requires Authorization: Bearer KEY. Visible in ps: prefer "
               "$VLLM_API_KEY or [engine] api_key_file; without one, $BMAS_BACKEND_API_KEY "
               "(bmas up's backend secret) gives the key for this port");
  c.add_option("--ssl-certfile", EngineTlsFlags().certfile,
               "As vLLM's: serve TLS with this certificate file (PEM); a replica on a node uses "
               "/etc/bmas/replica.crt");
  c.add_option("--ssl-keyfile", EngineTlsFlags().keyfile, "As vLLM's: the certificate's key file (PEM)");
  c.add_option("--ssl-ca-certs", EngineTlsFlags().ca_certs,
               "As vLLM's: the CA certificates file that client certificates are checked with");
  c.add_option("--ssl-cert-reqs", EngineTlsFlags().cert_reqs,
               "As vLLM's (Python's ssl module): 0 asks no client certificate, 1 checks one when "
               "given, 2 requires one")
      ->check(CLI::Range(0, 2))
      ->default_str("0");
  c.add_option("--startup-s", startup_,
               "Seconds it answers 503 first, as vLLM loading a model (it listens on its port "
               "from the start); 'profile': the profile's startup_s")
      ->check(CLI::IsMember({"profile"}) | CLI::Range(0.0, 86400.0))
      ->default_str("0");
  c.require_subcommand(0, 1);

  calibrate_ = c.add_subcommand(
      "calibrate",
      "Run the engine in virtual time at the reference concurrencies and compare its ITL, TTFT "
      "and throughput with the reference figures");
  calibrate_->add_flag("--json", json_, "Print JSON");
  calibrate_->add_option("--requests-per-client", scenario_.requests_per_client,
                         "Requests each closed-loop client sends")
      ->check(kPositive)
      ->default_str(std::to_string(scenario_.requests_per_client));
  calibrate_->add_option("--prompt-tokens", scenario_.prompt_tokens, "Prompt length")
      ->check(kPositive)
      ->default_str(std::to_string(scenario_.prompt_tokens));
  calibrate_->add_option("--output-tokens", scenario_.output_tokens, "Output length")
      ->check(kPositive)
      ->default_str(std::to_string(scenario_.output_tokens));
  calibrate_->add_flag("--fit", fit_,
                       "Search the step-time coefficients that best match the reference and "
                       "print them as profile TOML");

  c.callback([this, &global] {
    global.SetUpLogging();
    global.exit_code = calibrate_->parsed() ? RunCalibrate(global) : RunServer(global);
  });
}

int EngineCommand::RunServer(GlobalOptions& global) {
  Config config = global.LoadConfigOrDefaults();
  EngineSettings s = config.engine;
  ApplyFlags(s);
  return RunEngine(s, EngineTlsFlags());
}

int EngineCommand::RunCalibrate(GlobalOptions& global) {
  Config config = global.LoadConfigOrDefaults();
  EngineSettings s = config.engine;
  ApplyFlags(s);
  auto options = MakeEngineOptions(s);
  if (!options) {
    fmt::print(stderr, "bmas engine calibrate: {}\n", options.error().message);
    return 2;
  }
  const auto& reference = engine::LlamaH100Reference();
  engine::StepTimeModel time = options->time;
  if (fit_) {
    time = engine::FitStepTimeModel(options->scheduler, time, reference, scenario_);
    fmt::print("# fitted step-time model for profile.{}\n", s.profile);
    fmt::print("frontend_overhead_s = {:.6f}\n", time.frontend_s);
    fmt::print("step_base_s = {:.8f}\nper_decode_token_s = {:.10f}\nper_prefill_token_s = {:.10f}\n"
               "per_context_token_s = {:.12f}\n\n",
               time.base_s, time.per_decode_token_s, time.per_prefill_token_s,
               time.per_context_token_s);
  }
  auto rows = engine::Calibrate(options->scheduler, time, reference, scenario_);
  auto err = [](double model, double ref) { return 100.0 * (model / ref - 1); };
  if (json_) {
    std::string out = "[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      auto opt = [](const std::optional<double>& v, double scale) {
        return v ? fmt::format("{:.4f}", *v * scale) : std::string("null");
      };
      out += fmt::format(
          "{}{{\"concurrency\":{},\"itl_ms\":{:.4f},\"ref_itl_ms\":{:.4f},\"ttft_ms\":{:.4f},"
          "\"ref_ttft_ms\":{},\"output_tokens_per_s\":{:.1f},\"ref_output_tokens_per_s\":{}}}",
          i == 0 ? "" : ",", r.reference.concurrency, r.model.mean_itl_s * 1e3,
          r.reference.itl_s * 1e3, r.model.mean_ttft_s * 1e3, opt(r.reference.ttft_s, 1e3),
          r.model.output_tokens_per_s, opt(r.reference.output_tokens_per_s, 1));
    }
    fmt::print("{}]\n", out);
    return 0;
  }
  fmt::print(
      "profile {} vs Llama-3.1-8B on one H100 (NVIDIA NIM). Assumed: 128-token prompts, 128 "
      "output tokens, closed loop, clients start together. Virtual time.\n",
      s.profile);
  fmt::print("{:>11} | {:>9} {:>9} {:>7} | {:>10} {:>9} {:>7} | {:>10} {:>9}\n", "concurrency",
             "ITL ms", "ref", "err %", "TTFT ms", "ref", "err %", "out tok/s", "ref");
  for (const auto& r : rows) {
    std::string ttft_ref = "", ttft_err = "", tps_ref = "";
    if (r.reference.ttft_s) {
      ttft_ref = fmt::format("{:.2f}", *r.reference.ttft_s * 1e3);
      ttft_err = fmt::format("{:+.1f}", err(r.model.mean_ttft_s, *r.reference.ttft_s));
    }
    if (r.reference.output_tokens_per_s) {
      tps_ref = fmt::format("{:.0f}", *r.reference.output_tokens_per_s);
    }
    fmt::print("{:>11} | {:>9.2f} {:>9.2f} {:>7} | {:>10.2f} {:>9} {:>7} | {:>10.0f} {:>9}\n",
               r.reference.concurrency, r.model.mean_itl_s * 1e3, r.reference.itl_s * 1e3,
               fmt::format("{:+.1f}", err(r.model.mean_itl_s, r.reference.itl_s)),
               r.model.mean_ttft_s * 1e3, ttft_ref, ttft_err, r.model.output_tokens_per_s,
               tps_ref);
  }
  fmt::print("worst ITL/TTFT error: {:.1f}%\n", 100 * engine::WorstRelativeError(rows));
  return 0;
}

void GatewayCommand::Register(CLI::App& app, GlobalOptions& global) {
  cmd_ = app.add_subcommand(
      "gateway",
      "Run the multi-tenant OpenAI-compatible gateway: API keys, limits, token-fair queuing, "
      "prefix-aware routing and metering in front of vLLM or bmas engine backends");
  CLI::App& c = *cmd_;
  c.add_option("--host", flags_.host, "Address to listen on")->default_str(flags_.host);
  c.add_option("--port", flags_.port, "Port; 0 picks a free one and prints it")
      ->check(CLI::Range(0, 65535))
      ->default_str("0");
  c.add_option("--backend", flags_.backends,
               "Backend base URL (http://host:port), repeatable; more can be added while it runs "
               "with `bmas gateway backend add`");
  c.add_option("--routing", flags_.routing, "cache_aware, prefix_affinity, least_load or round_robin")
      ->check(CLI::IsMember({"cache_aware", "prefix_affinity", "least_load", "round_robin"}))
      ->default_str(flags_.routing);
  c.add_option("--fairness", flags_.fairness, "vtc (token-fair) or none (FCFS)")
      ->check(CLI::IsMember({"vtc", "none"}))
      ->default_str(flags_.fairness);
  c.add_option("--threads", flags_.threads,
               "Worker threads for client connections; each keeps one core busy at most")
      ->check(CLI::Range(1, 256))
      ->default_str("1");
  c.add_option("--queue-timeout", flags_.queue_timeout_s,
               "Seconds a request may wait for a backend before a 503")
      ->check(kPositive)
      ->default_str("30");
  AddServerLimitFlags(c, flags_.max_body_bytes, flags_.shutdown_timeout_s);
  c.add_option("--metrics-listen", flags_.metrics_listen,
               "host:port of the operator listener serving /metrics (\"\" = none); never the "
               "users' port")
      ->default_str(flags_.metrics_listen);
  c.add_option("--key-cache-size", flags_.key_cache_size, "API keys remembered (LRU)")
      ->check(CLI::Range(1, 1 << 24))
      ->default_str("10000");
  c.add_option("--unverified-backend", flags_.unverified_backends,
               "A backend URL that is not challenged for its identity (a real vLLM, which does "
               "not answer it); only safe on a port no user can bind (repeatable)");
  c.add_option("--upstream-idle-timeout", flags_.upstream_idle_timeout_s,
               "Seconds a backend may send nothing before the request ends (504, or an error "
               "event in a stream) and the backend is marked down")
      ->check(kPositive)
      ->default_str("30");
  c.add_option("--usage-flush-interval", flags_.usage_flush_interval_s,
               "Seconds between writes of metered usage to the store (until then it is in the "
               "usage journal beside the store)")
      ->check(CLI::Range(0.01, 3600.0))
      ->default_str("0.5");
  c.require_subcommand(0, 1);
  CLI::App* backend = c.add_subcommand("backend", "Add, remove or list the gateway's backends");
  backend->require_subcommand(1);
  for (const char* verb : {"add", "remove"}) {
    CLI::App* v = backend->add_subcommand(
        verb, fmt::format("{} a backend in the store (a running gateway follows within a second)",
                          verb == std::string("add") ? "Add" : "Remove"));
    v->add_option("url", backend_url_, "Base URL")->required();
    v->callback([this, &global, verb] { global.exit_code = RunBackendCommand(global, verb); });
  }
  CLI::App* list = backend->add_subcommand(
      "list",
      "Every backend the gateway uses: from the config file, added with `backend add`, or given "
      "on the running gateway's command line; with the health the running gateway sees (without "
      "one: each backend's own /health)");
  list->add_flag("--json", json_, "Print a JSON array");
  list->callback([this, &global] { global.exit_code = RunBackendCommand(global, "list"); });
  c.callback([this, &global] {
    if (cmd_->get_subcommands().size() > 0) return;  // `bmas gateway backend ...`
    global.SetUpLogging();
    Config config = global.LoadConfigOrDefaults();
    GatewaySettings s = config.gateway;
    auto given = [this](const char* name) { return cmd_->count(name) > 0; };
    if (given("--host")) s.host = flags_.host;
    if (given("--port")) s.port = flags_.port;
    if (given("--backend")) s.backends = flags_.backends;
    if (given("--unverified-backend")) s.unverified_backends = flags_.unverified_backends;
    if (given("--routing")) s.routing = flags_.routing;
    if (given("--fairness")) s.fairness = flags_.fairness;
    if (given("--threads")) s.threads = flags_.threads;
    if (given("--queue-timeout")) s.queue_timeout_s = flags_.queue_timeout_s;
    if (given("--max-body-bytes")) s.max_body_bytes = flags_.max_body_bytes;
    if (given("--shutdown-timeout")) s.shutdown_timeout_s = flags_.shutdown_timeout_s;
    if (given("--metrics-listen")) s.metrics_listen = flags_.metrics_listen;
    if (given("--key-cache-size")) s.key_cache_size = flags_.key_cache_size;
    if (given("--upstream-idle-timeout")) s.upstream_idle_timeout_s = flags_.upstream_idle_timeout_s;
    if (given("--usage-flush-interval")) s.usage_flush_interval_s = flags_.usage_flush_interval_s;
    global.exit_code = RunGateway(s, ResolveStateDir(global.state_dir, config));
  });
}

void UpCommand::Register(CLI::App& app, GlobalOptions& global) {
  cmd_ = app.add_subcommand(
      "up",
      "Start every bmas component on this machine and print what runs where: a local Slurm "
      "cluster from the inventory (munge, slurmctld, a slurmd per node, slurmrestd; slurmdbd "
      "with accounting) and its monitor; LXD with lxcfs for workspaces; the root agent (with "
      "both); simulated vLLM engines and the OpenAI gateway in front of them (as the service "
      "account bmas when run as root). A part that cannot start is named with the reason. "
      "A part that dies is started again (after 1 s, doubling to 30 s); a bmas up that died "
      "leaves parts that the next one stops. Ctrl-C, SIGTERM or closing the terminal stops all "
      "it started");
  cmd_->add_option("--engines", engines_, "Number of simulated engines (default: [up] engines, 2)")
      ->check(CLI::Range(0, 64));
  cmd_->add_flag("--status", status_,
                 "Say whether a bmas up runs with this state dir, and each part's pid, state, "
                 "restarts and last exit; exit 0 when one runs, 1 when none does");
  cmd_->add_flag("--json", json_, "With --status: the same as one JSON object");
  cmd_->callback([this, &global] {
    global.SetUpLogging();
    if (json_ && !status_) {
      fmt::print(stderr, "bmas up: --json goes with --status\n");
      global.exit_code = 2;
      return;
    }
    if (status_) {
      global.exit_code =
          PrintUpStatus(ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults()), json_);
      return;
    }
    UpOptions o;
    o.config = global.LoadConfigOrDefaults();
    if (cmd_->count("--engines") > 0) o.config.up.engines = engines_;
    o.state_dir = ResolveStateDir(global.state_dir, o.config);
    std::error_code ec;
    o.self_exe = std::filesystem::read_symlink("/proc/self/exe", ec).string();
    if (!global.config_file.empty()) {
      o.config.source = std::filesystem::absolute(global.config_file).string();
    }
    global.exit_code = RunUp(o);
  });
}

}  // namespace bmas
