// bmas_loadgen: a closed-loop HTTP load generator for OpenAI-compatible servers.
//
// N clients each hold one keep-alive HTTP/1.1 connection and send their next request when the
// previous one ends. Streamed responses (server-sent events over chunked encoding) are parsed
// as bytes arrive, so every token is timestamped on arrival. Reports TTFT, inter-token latency,
// end-to-end latency and output throughput, as a table or as one JSON object (--json).
//
// For multi-tenant runs: --api-key may be repeated (client i sends key i % n, so n keys are n
// users), --think-ms pauses each client between requests, and --system-prompt-dir gives
// client i the file i % n (sorted by name) as the system message of its chat requests, with
// a generated user message that differs per request. --ramp-up starts clients evenly over
// some seconds and leaves the requests sent meanwhile out of the statistics.
//
// All clients of a thread share one io_context and that thread's statistics, so nothing here
// takes a lock; threads (--threads) merge their statistics after they join.

// GCC 12 with Boost 1.74 needs <utility> before asio's awaitable header.
// clang-format off
#include <utility>
// clang-format on

#include <fmt/core.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "loadgen_wire.h"

namespace bmas::loadgen {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using net::use_awaitable;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The statistics of one thread's clients; only that thread touches them.
struct Stats {
  int64_t requests_ok = 0;
  int64_t requests_failed = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  std::vector<double> ttft_ms;  // one per ok request
  std::vector<double> itl_ms;   // one per ok request with more than one output token
  std::vector<double> e2e_ms;   // one per ok request
  std::vector<float> gaps_ms;   // every gap between consecutive token events
  std::string first_error;
  Clock::time_point first_error_at = Clock::time_point::max();
  Clock::time_point last_end = Clock::time_point::min();

  void Fail(std::string error) {
    ++requests_failed;
    Clock::time_point now = Clock::now();
    if (now < first_error_at) {
      first_error_at = now;
      first_error = std::move(error);
    }
    last_end = std::max(last_end, now);
  }

  void Merge(Stats&& other) {
    requests_ok += other.requests_ok;
    requests_failed += other.requests_failed;
    output_tokens += other.output_tokens;
    prompt_tokens += other.prompt_tokens;
    ttft_ms.insert(ttft_ms.end(), other.ttft_ms.begin(), other.ttft_ms.end());
    itl_ms.insert(itl_ms.end(), other.itl_ms.begin(), other.itl_ms.end());
    e2e_ms.insert(e2e_ms.end(), other.e2e_ms.begin(), other.e2e_ms.end());
    gaps_ms.insert(gaps_ms.end(), other.gaps_ms.begin(), other.gaps_ms.end());
    if (other.first_error_at < first_error_at) {
      first_error_at = other.first_error_at;
      first_error = std::move(other.first_error);
    }
    last_end = std::max(last_end, other.last_end);
  }
};

// Everything a client needs that all clients share; read-only once the run starts.
struct Shared {
  const Options& options;
  const Target& target;
  const tcp::resolver::results_type& endpoints;
  const std::optional<std::string>& fixed_prompt;  // --prompt-file text
  const std::vector<std::string>& system_prompts;  // --system-prompt-dir files, by name
  std::optional<Clock::time_point> stop_at;        // --ramp-up + --duration
  Clock::time_point measure_from;                  // the end of --ramp-up
};

// One closed-loop client: one connection, one request at a time. Run() is a member coroutine;
// the Client must outlive it. Runs on one io_context thread and records into that thread's
// Stats.
class Client {
 public:
  Client(int id, net::io_context& io, const Shared& shared, Stats& stats)
      : id_(id), shared_(shared), stats_(stats), stream_(io) {}

  net::awaitable<void> Run() {
    const Options& options = shared_.options;
    // Clients start evenly over the ramp-up or, with think time and no ramp-up, at random over
    // one think time; otherwise all at once.
    if (options.ramp_up_s > 0) {
      co_await Pause(1000 * options.ramp_up_s * id_ / options.concurrency);
    } else if (options.think_ms > 0) {
      uint64_t r = SplitMix64(options.seed ^ 0x7468696e6bULL ^ static_cast<uint64_t>(id_)).Next();
      co_await Pause(options.think_ms * static_cast<double>(r % 1000000) / 1e6);
    }
    for (int index = 0;; ++index) {
      if (shared_.stop_at ? Clock::now() >= *shared_.stop_at
                          : index >= options.requests_per_client) {
        break;
      }
      if (index > 0 && options.think_ms > 0) {
        co_await Pause(options.think_ms);
        if (shared_.stop_at && Clock::now() >= *shared_.stop_at) break;
      }
      std::optional<std::string> error = co_await Request(index);
      if (error) {
        Close();
        stats_.Fail(std::move(*error));
        // Keeps a client of a refused or failing server from spinning until the deadline.
        if (shared_.stop_at) co_await Pause(100);
      }
    }
    Close();
  }

 private:
  net::awaitable<void> Pause(double ms) {
    net::steady_timer timer(
        stream_.get_executor(),
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms)));
    beast::error_code ec;
    co_await timer.async_wait(net::redirect_error(use_awaitable, ec));
  }

  // Sends request `index` and reads its response, retrying once on a fresh connection when a
  // reused one turns out to have been closed by the server. Returns an error message on
  // failure; records the request in stats_ on success.
  net::awaitable<std::optional<std::string>> Request(int index) {
    const Options& options = shared_.options;
    uint64_t seed =
        SplitMix64(options.seed ^ (static_cast<uint64_t>(id_) << 32) ^ static_cast<uint64_t>(index))
            .Next();
    std::string prompt =
        shared_.fixed_prompt ? *shared_.fixed_prompt : MakePrompt(seed, options.prompt_words);
    http::request<http::string_body> request{http::verb::post, shared_.target.path, 11};
    request.set(http::field::host, shared_.target.host_header);
    request.set(http::field::user_agent, "bmas_loadgen");
    request.set(http::field::content_type, "application/json");
    if (!options.api_keys.empty()) {
      request.set(http::field::authorization,
                  "Bearer " + options.api_keys[static_cast<size_t>(id_) % options.api_keys.size()]);
    }
    request.set(http::field::accept, options.no_stream ? "application/json" : "text/event-stream");
    request.keep_alive(true);
    const std::vector<std::string>& systems = shared_.system_prompts;
    request.body() = BuildRequestBody(
        options, prompt,
        systems.empty() ? nullptr : &systems[static_cast<size_t>(id_) % systems.size()]);
    request.prepare_payload();

    Clock::time_point deadline =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(options.request_timeout_s));
    for (int attempt = 0;; ++attempt) {
      bool reused = connected_;
      if (!connected_) {
        if (auto error = co_await Connect(deadline)) co_return error;
      }
      Attempt result = co_await Exchange(request, deadline);
      if (!result.error) co_return std::nullopt;
      if (reused && result.stale_connection && attempt == 0) {
        Close();
        continue;
      }
      co_return result.error;
    }
  }

  net::awaitable<std::optional<std::string>> Connect(Clock::time_point deadline) {
    stream_.expires_at(std::min(
        deadline, Clock::now() + std::chrono::milliseconds(shared_.options.connect_timeout_ms)));
    beast::error_code ec;
    co_await stream_.async_connect(shared_.endpoints, net::redirect_error(use_awaitable, ec));
    if (ec) {
      co_return fmt::format("connect to {}:{}: {}", shared_.target.host, shared_.target.port,
                            ec.message());
    }
    stream_.socket().set_option(tcp::no_delay(true), ec);
    connected_ = true;
    co_return std::nullopt;
  }

  struct Attempt {
    std::optional<std::string> error;
    bool stale_connection = false;  // failed before any response byte came back
  };

  // One request/response on the open connection.
  net::awaitable<Attempt> Exchange(http::request<http::string_body>& request,
                                   Clock::time_point deadline) {
    const bool stream = !shared_.options.no_stream;
    beast::error_code ec;
    stream_.expires_at(deadline);
    Clock::time_point sent_at = Clock::now();
    co_await http::async_write(stream_, request, net::redirect_error(use_awaitable, ec));
    if (ec) co_return Attempt{fmt::format("write request: {}", ec.message()), true};

    http::response_parser<http::buffer_body> parser;
    // Not boost::none: Beast 1.74 then rejects every response with a Content-Length.
    parser.body_limit(std::numeric_limits<std::uint64_t>::max());
    co_await http::async_read_header(stream_, buffer_, parser,
                                     net::redirect_error(use_awaitable, ec));
    if (ec) {
      bool stale = ec == http::error::end_of_stream || ec == net::error::eof ||
                   ec == net::error::connection_reset;
      co_return Attempt{fmt::format("read response header: {}", TimeoutAware(ec)), stale};
    }
    const unsigned status = parser.get().result_int();

    sse_.Reset();
    std::string body;  // the whole body, for --no-stream and for error statuses
    std::optional<std::string> error;
    bool done = false;
    int64_t token_events = 0;
    std::optional<int64_t> completion_tokens;
    std::optional<int64_t> prompt_tokens;
    Clock::time_point first_token_at{};
    Clock::time_point last_token_at{};
    gaps_.clear();

    auto on_event = [&](std::string_view data, Clock::time_point now) {
      if (error || done) return;
      if (data == "[DONE]") {
        done = true;
        return;
      }
      ParsedChunk chunk = ParseChunk(data);
      if (!chunk.error.empty()) {
        error = std::move(chunk.error);
        return;
      }
      if (chunk.completion_tokens) completion_tokens = chunk.completion_tokens;
      if (chunk.prompt_tokens) prompt_tokens = chunk.prompt_tokens;
      if (!chunk.has_token) return;
      if (token_events == 0) {
        first_token_at = now;
      } else {
        gaps_.push_back(static_cast<float>(Ms(now - last_token_at)));
      }
      last_token_at = now;
      ++token_events;
    };

    while (!parser.is_done()) {
      parser.get().body().data = chunk_.data();
      parser.get().body().size = chunk_.size();
      co_await http::async_read_some(stream_, buffer_, parser,
                                     net::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return Attempt{fmt::format("read response body: {}", TimeoutAware(ec))};
      Clock::time_point now = Clock::now();
      std::string_view bytes(chunk_.data(), chunk_.size() - parser.get().body().size);
      if (status != 200 || !stream) {
        body.append(bytes);
      } else {
        sse_.Feed(bytes, [&](std::string_view data) { on_event(data, now); });
      }
    }
    Clock::time_point end = Clock::now();
    stream_.expires_never();
    if (!parser.keep_alive()) Close();

    if (status != 200) {
      if (body.size() > 300) body.resize(300);
      co_return Attempt{fmt::format("HTTP {} from {}: {}", status, shared_.target.path, body)};
    }
    if (!stream) {
      ParsedChunk chunk = ParseChunk(body);
      if (!chunk.error.empty()) co_return Attempt{std::move(chunk.error)};
      if (!chunk.completion_tokens) co_return Attempt{"response has no usage.completion_tokens"};
      completion_tokens = chunk.completion_tokens;
      prompt_tokens = chunk.prompt_tokens;
      token_events = *completion_tokens;
      first_token_at = end;  // without streaming, the first token arrives with the last
    } else {
      if (error) co_return Attempt{std::move(error)};
      if (!done) co_return Attempt{"stream ended without data: [DONE]"};
      if (token_events == 0) co_return Attempt{"stream had no token events"};
    }

    if (sent_at < shared_.measure_from) co_return Attempt{};  // sent during the ramp-up
    int64_t tokens = completion_tokens.value_or(token_events);
    double ttft = Ms(first_token_at - sent_at);
    double e2e = Ms(end - sent_at);
    ++stats_.requests_ok;
    stats_.output_tokens += tokens;
    stats_.prompt_tokens += prompt_tokens.value_or(0);
    stats_.ttft_ms.push_back(ttft);
    stats_.e2e_ms.push_back(e2e);
    if (stream && tokens > 1)
      stats_.itl_ms.push_back((e2e - ttft) / static_cast<double>(tokens - 1));
    stats_.gaps_ms.insert(stats_.gaps_ms.end(), gaps_.begin(), gaps_.end());
    stats_.last_end = std::max(stats_.last_end, end);
    co_return Attempt{};
  }

  static std::string TimeoutAware(const beast::error_code& ec) {
    return ec == beast::error::timeout ? std::string("timed out") : ec.message();
  }

  void Close() {
    if (!connected_) return;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
    buffer_.clear();
    connected_ = false;
  }

  const int id_;
  const Shared& shared_;
  Stats& stats_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::array<char, 16 * 1024> chunk_;
  SseParser sse_;
  std::vector<float> gaps_;  // the current request's gaps
  bool connected_ = false;
};

// The p-th percentile (0-100) of `values`, interpolating between closest ranks; 0 when empty.
template <typename T>
double Percentile(std::vector<T>& values, double p) {
  if (values.empty()) return 0;
  double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  size_t lower = static_cast<size_t>(rank);
  std::nth_element(values.begin(), values.begin() + static_cast<ptrdiff_t>(lower), values.end());
  double low = values[lower];
  if (lower + 1 >= values.size()) return low;
  double high = *std::min_element(values.begin() + static_cast<ptrdiff_t>(lower) + 1, values.end());
  return low + (high - low) * (rank - static_cast<double>(lower));
}

template <typename T>
double Mean(const std::vector<T>& values) {
  if (values.empty()) return 0;
  double sum = 0;
  for (T v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

struct Report {
  int concurrency = 0;
  int64_t requests_ok = 0;
  int64_t requests_failed = 0;
  int64_t output_tokens = 0;
  int64_t prompt_tokens = 0;
  double duration_s = 0;
  double output_tokens_per_s = 0;
  double ttft_mean_ms = 0, ttft_p50_ms = 0, ttft_p95_ms = 0, ttft_p99_ms = 0;
  double itl_mean_ms = 0, itl_p50_ms = 0, itl_p99_ms = 0;
  double e2e_mean_ms = 0, e2e_p50_ms = 0, e2e_p99_ms = 0;
  std::string first_error;
};

Report Summarize(const Options& options, Stats& stats, Clock::time_point start) {
  Report r;
  r.concurrency = options.concurrency;
  r.requests_ok = stats.requests_ok;
  r.requests_failed = stats.requests_failed;
  r.output_tokens = stats.output_tokens;
  r.prompt_tokens = stats.prompt_tokens;
  r.duration_s =
      stats.last_end > start ? std::chrono::duration<double>(stats.last_end - start).count() : 0;
  r.output_tokens_per_s =
      r.duration_s > 0 ? static_cast<double>(r.output_tokens) / r.duration_s : 0;
  r.ttft_mean_ms = Mean(stats.ttft_ms);
  r.ttft_p50_ms = Percentile(stats.ttft_ms, 50);
  r.ttft_p95_ms = Percentile(stats.ttft_ms, 95);
  r.ttft_p99_ms = Percentile(stats.ttft_ms, 99);
  r.itl_mean_ms = Mean(stats.itl_ms);
  r.itl_p50_ms = Percentile(stats.gaps_ms, 50);
  r.itl_p99_ms = Percentile(stats.gaps_ms, 99);
  r.e2e_mean_ms = Mean(stats.e2e_ms);
  r.e2e_p50_ms = Percentile(stats.e2e_ms, 50);
  r.e2e_p99_ms = Percentile(stats.e2e_ms, 99);
  r.first_error = stats.first_error;
  return r;
}

std::string ReportJson(const Report& r) {
  rapidjson::StringBuffer out;
  rapidjson::Writer<rapidjson::StringBuffer> w(out);
  auto number = [&w](const char* key, double value) {
    w.Key(key);
    w.Double(std::round(value * 1000.0) / 1000.0);
  };
  w.StartObject();
  w.Key("concurrency");
  w.Int(r.concurrency);
  w.Key("requests_ok");
  w.Int64(r.requests_ok);
  w.Key("requests_failed");
  w.Int64(r.requests_failed);
  w.Key("output_tokens");
  w.Int64(r.output_tokens);
  w.Key("prompt_tokens");
  w.Int64(r.prompt_tokens);
  number("duration_s", r.duration_s);
  number("output_tokens_per_s", r.output_tokens_per_s);
  number("ttft_mean_ms", r.ttft_mean_ms);
  number("ttft_p50_ms", r.ttft_p50_ms);
  number("ttft_p95_ms", r.ttft_p95_ms);
  number("ttft_p99_ms", r.ttft_p99_ms);
  number("itl_mean_ms", r.itl_mean_ms);
  number("itl_p50_ms", r.itl_p50_ms);
  number("itl_p99_ms", r.itl_p99_ms);
  number("e2e_mean_ms", r.e2e_mean_ms);
  number("e2e_p50_ms", r.e2e_p50_ms);
  number("e2e_p99_ms", r.e2e_p99_ms);
  w.Key("first_error");
  if (r.first_error.empty()) {
    w.Null();
  } else {
    w.String(r.first_error.data(), static_cast<rapidjson::SizeType>(r.first_error.size()));
  }
  w.EndObject();
  return std::string(out.GetString(), out.GetSize());
}

void PrintTable(const Options& options, const Target& target, const Report& r) {
  fmt::print("bmas_loadgen  {}:{}{}  model={}  concurrency={}  {}\n", target.host, target.port,
             target.path, options.model, options.concurrency,
             options.no_stream ? "no-stream" : "stream");
  fmt::print("  requests      {} ok, {} failed\n", r.requests_ok, r.requests_failed);
  fmt::print("  tokens        {} output, {} prompt\n", r.output_tokens, r.prompt_tokens);
  fmt::print("  duration      {:.3f} s\n", r.duration_s);
  fmt::print("  throughput    {:.1f} output tokens/s\n", r.output_tokens_per_s);
  fmt::print("  {:<12}{:>12}{:>12}{:>12}\n", "latency (ms)", "mean", "p50", "p99");
  fmt::print("  {:<12}{:>12.2f}{:>12.2f}{:>12.2f}\n", "TTFT", r.ttft_mean_ms, r.ttft_p50_ms,
             r.ttft_p99_ms);
  fmt::print("  {:<12}{:>12.2f}{:>12.2f}{:>12.2f}\n", "ITL", r.itl_mean_ms, r.itl_p50_ms,
             r.itl_p99_ms);
  fmt::print("  {:<12}{:>12.2f}{:>12.2f}{:>12.2f}\n", "E2E", r.e2e_mean_ms, r.e2e_p50_ms,
             r.e2e_p99_ms);
  if (!r.first_error.empty()) fmt::print("  first error   {}\n", r.first_error);
}

// The text of every regular file in `dir`, in order of file name. Throws std::runtime_error
// when it cannot read one or finds none.
std::vector<std::string> ReadDirectory(const std::string& dir) {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.is_regular_file()) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw std::runtime_error("no files in --system-prompt-dir " + dir);
  std::vector<std::string> texts;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) throw std::runtime_error("cannot read " + path.string());
    texts.push_back(text.str());
  }
  return texts;
}

// 1000 connections need more descriptors than the usual soft limit of 1024.
void RaiseFileLimit(int needed) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur >= static_cast<rlim_t>(needed)) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

int Main(int argc, char** argv) {
  Options options;
  CLI::App app{"Closed-loop load generator for OpenAI-compatible HTTP servers"};
  app.add_option("--url", options.url, "Server base URL, http://host:port[/prefix]")->required();
  app.add_option("--endpoint", options.endpoint, "completions or chat")
      ->check(CLI::IsMember({"completions", "chat"}))
      ->capture_default_str();
  app.add_option("--model", options.model, "Model name sent in each request")->required();
  app.add_option("--concurrency", options.concurrency, "Closed-loop clients")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  auto* duration = app.add_option("--duration", options.duration_s,
                                  "Seconds during which clients start new requests")
                       ->check(CLI::PositiveNumber);
  auto* per_client = app.add_option("--requests-per-client", options.requests_per_client,
                                    "Requests each client sends")
                         ->check(CLI::Range(1, 100000000))
                         ->capture_default_str();
  duration->excludes(per_client);
  auto* words = app.add_option("--prompt-words", options.prompt_words,
                               "Words in each generated prompt (seeded per request)")
                    ->check(CLI::Range(1, 10000000))
                    ->capture_default_str();
  app.add_option("--prompt-file", options.prompt_file, "Send this file's text as every prompt")
      ->check(CLI::ExistingFile)
      ->excludes(words);
  app.add_option("--max-tokens", options.max_tokens, "max_tokens of each request")
      ->check(CLI::Range(1, 100000000))
      ->capture_default_str();
  app.add_flag("--no-stream", options.no_stream, "Ask for whole responses instead of SSE");
  app.add_flag("--json", options.json, "Print one JSON object instead of a table");
  app.add_option("--seed", options.seed, "Seed of the generated prompts")->capture_default_str();
  app.add_option("--api-key", options.api_keys,
                 "API key, sent as Authorization: Bearer KEY; repeat it for several users "
                 "(client i sends key i % n)");
  app.add_option("--ramp-up", options.ramp_up_s,
                 "Seconds over which clients start, evenly; requests sent in them are not "
                 "counted, and --duration starts after them")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--think-ms", options.think_ms,
                 "Milliseconds each client waits between the end of a request and its next; "
                 "clients also start spread over this time")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  auto* system_prompt_dir =
      app.add_option("--system-prompt-dir", options.system_prompt_dir,
                     "Directory of system prompts, one per file: client i sends file i % n "
                     "(sorted by name) as the system message (needs --endpoint chat)")
          ->check(CLI::ExistingDirectory);
  app.add_option("--connect-timeout-ms", options.connect_timeout_ms)
      ->check(CLI::Range(1, 3600000))
      ->capture_default_str();
  app.add_option("--request-timeout-s", options.request_timeout_s,
                 "Deadline of each request, from send to last byte")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--threads", options.threads, "io_context threads")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (system_prompt_dir->count() > 0 && options.endpoint != "chat") {
    fmt::print(stderr, "bmas_loadgen: --system-prompt-dir needs --endpoint chat\n");
    return 2;
  }

  Target target;
  std::optional<std::string> fixed_prompt;
  std::vector<std::string> system_prompts;
  tcp::resolver::results_type endpoints;
  try {
    target = ParseTarget(options.url, options.endpoint);
    if (!options.prompt_file.empty()) {
      std::ifstream in(options.prompt_file, std::ios::binary);
      std::ostringstream text;
      text << in.rdbuf();
      if (!in) throw std::runtime_error("cannot read --prompt-file " + options.prompt_file);
      fixed_prompt = text.str();
    }
    if (!options.system_prompt_dir.empty())
      system_prompts = ReadDirectory(options.system_prompt_dir);
    net::io_context resolve_io;
    tcp::resolver resolver(resolve_io);
    endpoints = resolver.resolve(target.host, target.port);
  } catch (const std::exception& e) {
    fmt::print(stderr, "bmas_loadgen: {}\n", e.what());
    return 2;
  }
  options.threads = std::min(options.threads, options.concurrency);
  RaiseFileLimit(options.concurrency + 64);

  Clock::time_point start = Clock::now();
  Shared shared{options, target, endpoints, fixed_prompt, system_prompts, std::nullopt, start};
  shared.measure_from = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options.ramp_up_s));
  if (options.duration_s > 0) {
    shared.stop_at = shared.measure_from + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(options.duration_s));
  }

  std::vector<Stats> stats(static_cast<size_t>(options.threads));
  auto run_thread = [&](int t) {
    net::io_context io(1);
    Stats& thread_stats = stats[static_cast<size_t>(t)];
    std::vector<std::unique_ptr<Client>> clients;
    for (int id = t; id < options.concurrency; id += options.threads) {
      clients.push_back(std::make_unique<Client>(id, io, shared, thread_stats));
      net::co_spawn(io, clients.back()->Run(), [&thread_stats](std::exception_ptr e) {
        if (!e) return;
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& ex) {
          thread_stats.Fail(fmt::format("client failed: {}", ex.what()));
        } catch (...) {
          thread_stats.Fail("client failed with an unknown exception");
        }
      });
    }
    io.run();
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < options.threads; ++t) threads.emplace_back(run_thread, t);
  run_thread(0);
  for (auto& thread : threads) thread.join();

  Stats total;
  for (auto& s : stats) total.Merge(std::move(s));
  Report report = Summarize(options, total, shared.measure_from);
  if (options.json) {
    fmt::print("{}\n", ReportJson(report));
  } else {
    PrintTable(options, target, report);
  }
  std::fflush(stdout);
  if (report.requests_failed > 0) {
    fmt::print(stderr, "bmas_loadgen: {} of {} requests failed; first error: {}\n",
               report.requests_failed, report.requests_failed + report.requests_ok,
               report.first_error);
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace bmas::loadgen

int main(int argc, char** argv) { return bmas::loadgen::Main(argc, argv); }
