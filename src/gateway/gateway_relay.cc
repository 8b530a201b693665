// The gateway's relay of one admitted request to its backend: HTTP/1.1 over the backend's
// pooled connection, an answer whole or streamed (SSE), and a stream cut mid-way, to resume.

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <simdjson.h>
#include <spdlog/spdlog.h>

#include "common/backend_identity.h"
#include "common/head_text.h"
#include "common/operator_auth.h"
#include "common/read_head.h"
#include "common/write_now.h"
#include "gateway/backend_source.h"
#include "gateway/gateway.h"
#include "gateway/gateway_internal.h"
#include "gateway/request.h"
#include "gateway/sse.h"
#include "gateway/usage_report.h"

namespace bmas::gateway {
namespace {

// Parses the body bytes already in `buffer` into `chunk`, reading nothing; returns how many it
// put there. Stops when `chunk` is full, the message is done or more bytes must be read.
size_t ParseBuffered(ReadBuffer& buffer, UpstreamParser& parser,
                     std::array<char, 16384>& chunk, beast::error_code& ec) {
  parser.body().data = chunk.data();
  parser.body().size = chunk.size();
  parser.eager(true);
  while (!parser.is_done() && buffer.size() > 0) {
    const size_t used = parser.put(buffer.data(), ec);
    buffer.consume(used);
    if (ec == http::error::need_more || ec == http::error::need_buffer) {
      ec = {};
      break;
    }
    if (ec || used == 0) break;
  }
  return chunk.size() - parser.body().size;
}

}  // namespace

awaitable<Result<void>> Gateway::RelayOnce(Backend& b, Request& r, ResponseWriter& writer,
                                           bool& stale) {
  const TimePoint asked = env_.Now();  // upstream time, for Server-Timing, from here
  ConnectionPool& pool = *b.pools[r.worker];
  // A kept-alive connection without Acquire's coroutine frame; a new one through it.
  std::unique_ptr<UpstreamStream> up = pool.TakeIdle();
  bool reused = up != nullptr;
  if (!up) {
    auto acquired = co_await pool.Acquire(options_.connect_timeout, reused);
    if (!acquired) co_return acquired.error();
    up = std::move(*acquired);
  }

  // The request's head by hand and the body by reference, in one async_write: Beast's
  // serializer would cost several times the syscall, and a copy of the body.
  HeadText<256> head;
  head << "POST " << b.url.base_path << r.target << " HTTP/1.1\r\nHost: " << b.url.host << ":"
       << b.url.port;
  if (!b.identity.key.empty()) head << "\r\nAuthorization: Bearer " << b.identity.key;
  head << "\r\nContent-Type: application/json\r\nContent-Length: "
       << static_cast<uint64_t>(r.upstream_body.size()) << "\r\n\r\n";
  const std::array<net::const_buffer, 2> request_buffers{head.buffer(),
                                                         net::buffer(r.upstream_body)};
  // A backend that takes nothing or sends nothing for longer than the idle timeout hangs; a
  // stream's backend answers at once and then sends a token at a time.
  const auto idle = std::chrono::duration_cast<std::chrono::milliseconds>(
      options_.upstream_idle_timeout);
  beast::error_code ec;
  size_t sent = 0;
  if (up->tls()) {
    ec = co_await WriteTls(*up, request_buffers, idle);
  } else if (!WriteAtOnce(up->socket(), request_buffers, sent, ec)) {
    ec = co_await WriteRest(up->tcp(), request_buffers, sent, idle);
  }
  // The backend's answer is not there yet: a whole answer's head is read without trying first.
  ReadBuffer buffer;
  UpstreamParser parser;
  parser.body_limit(std::numeric_limits<std::uint64_t>::max());
  if (!ec) {
    up->deadline().Arm(idle);
    if (up->tls()) {
      co_await http::async_read_header(*up, buffer.plain(), parser,
                                       net::redirect_error(use_awaitable, ec));
    } else if (!r.stream) {
      HeadRead read(buffer, parser);  // ReadHead, in this coroutine's frame
      while (!read.Parse(ec)) {
        const size_t n = co_await up->socket().async_read_some(
            read.buffers(), net::redirect_error(use_awaitable, ec));
        if (read.Read(n, ec)) break;
      }
    } else {  // a stream's backend may die after its head: the plain read sees that
      co_await ReadHead(up->socket(), buffer.plain(), parser, ec);
    }
    up->deadline().Disarm(ec);
  }
  if (ec) {
    const bool hung = ec == beast::error::timeout;
    stale = reused && !hung;
    // A stream is tried on another backend; a whole response is not (it may have been
    // generated, and the client has waited the idle timeout already).
    co_return Error{ErrorCode::kUnavailable,
                    hung ? fmt::format("backend {} sent no response within {} ms", b.id,
                                       idle.count())
                         : fmt::format("{}: {}", b.id, ec.message()),
                    hung && !r.stream ? std::string(kTimeoutParam) : std::string()};
  }

  // While the response is read, a client that goes away cancels the upstream request:
  // closing the connection makes vLLM (and bmas engine) abort it.
  TcpStream* upstream = &up->tcp();
  // Set when the client went away: the upstream was closed for it, which is not a cut to
  // resume.
  auto client_left = std::make_shared<bool>(false);
  auto watch = [&writer, upstream, client_left] {
    writer.WatchForDisconnect([upstream, client_left] {
      *client_left = true;
      beast::error_code ignored;
      upstream->socket().shutdown(tcp::socket::shutdown_both, ignored);
      upstream->socket().close(ignored);
    });
  };
  struct StopWatch {
    ResponseWriter& w;
    ~StopWatch() { w.StopWatching(); }
  } stop_watch{writer};

  const auto status = parser.result();
  const std::string_view content_type = parser.content_type();
  const bool sse = status == http::status::ok && content_type.rfind("text/event-stream", 0) == 0;
  std::array<char, 16384> chunk;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  Result<void> result;
  // A resumed stream: the client's stream is open already; this backend continues it.
  const bool resuming = r.resume.has_value() && r.resume->resumptions() > 0;

  if (sse) watch();
  if (sse && !resuming) AddServerTiming(r, asked, writer);  // a whole answer's, once it is read
  if (!sse) {
    std::string body;
    // What came with the header, often the whole response: then no watch and no more reads.
    while (!parser.is_done() && !ec && buffer.size() > 0) {
      const size_t n = ParseBuffered(buffer, parser, chunk, ec);
      if (n == 0) break;
      body.append(chunk.data(), n);
    }
    if (!parser.is_done() && !ec) watch();
    while (!parser.is_done() && !ec) {
      size_t n = co_await ReadSome(*up, buffer, parser, chunk, idle, ec);
      body.append(chunk.data(), n);
    }
    if (ec == beast::error::timeout) {
      result = Error{ErrorCode::kUnavailable,
                     fmt::format("backend {} sent nothing of its response for {} ms", b.id,
                                 idle.count()),
                     std::string(kTimeoutParam)};
    } else if (ec) {
      result = Error{ErrorCode::kUnavailable,
                     fmt::format("{}: reading the response: {}", b.id, ec.message())};
    } else {
      std::optional<TokenUsage> usage;
      if (status == http::status::ok) usage = ReadUsage(body);
      if (usage) {
        prompt_tokens = usage->prompt_tokens;
        completion_tokens = usage->completion_tokens;
        Meter(r, b, PromptCount::kBackends, prompt_tokens, completion_tokens);
      }
      // The watch's callback closes `up`: it must end before the pool owns `up` (and may
      // lend it to another request or destroy it) while the response is still written.
      writer.StopWatching();
      if (parser.keep_alive()) pool.Release(std::move(up));
      // The view is made outside the co_await: GCC 12 destroys temporaries in it twice.
      const std::string_view type =
          content_type.empty() ? std::string_view("application/json") : content_type;
      if (resuming) {
        std::string message = fmt::format(
            "the stream's backend went away and {} refused to continue it: HTTP {}: {}",
            b.id, static_cast<int>(status), body.substr(0, 512));
        result = Error{ErrorCode::kInternal, message};
        co_await EndStreamWithError(writer, std::move(message));
      } else {
        r.answered = AddServerTiming(r, asked, writer);
        if (!writer.SendAtOnce(status, type, std::move(body))) co_await writer.SendRest();
      }
    }
  } else if (resuming ||
             co_await writer.StartStream(http::status::ok, "text/event-stream; charset=utf-8")) {
    if (!r.resume) r.resume.emplace(r.upstream_body, r.target == kChatCompletionsPath);
    SseSplitter events;
    std::string out, token, rewritten;
    bool done = false, usage_seen = false, first = !resuming, client_gone = false;
    int64_t content_events = 0;
    relaying_[r.worker].insert(upstream);
    struct Unlist {
      std::unordered_set<TcpStream*>& set;
      TcpStream* up;
      ~Unlist() { set.erase(up); }
    } unlist{relaying_[r.worker], upstream};
    while (!parser.is_done() && !ec && !client_gone && !cutting_) {
      size_t n = co_await ReadSome(*up, buffer, parser, chunk, idle, ec);
      events.Append(std::string_view(chunk.data(), n));
      if (events.overflowed() && !ec) ec = http::error::body_limit;
      out.clear();
      int64_t streamed = 0;
      for (std::string_view e = events.Next(); !e.empty(); e = events.Next()) {
        bool forward = true;
        token.clear();
        const SseEventKind kind = ClassifySseEvent(Reusable(json_[r.worker]), e, &token);
        switch (kind) {
          case SseEventKind::kDone:
            done = true;
            break;
          case SseEventKind::kUsage:
          case SseEventKind::kResponseEnd:
            if (auto usage = ReadUsage(SseEventData(e))) {
              usage_seen = true;
              prompt_tokens = usage->prompt_tokens;
              completion_tokens = usage->completion_tokens;
            }
            // A Responses stream has no [DONE]: its last event is the client's, usage and all.
            done = done || kind == SseEventKind::kResponseEnd;
            forward = r.client_wants_usage || kind == SseEventKind::kResponseEnd;
            break;
          case SseEventKind::kContent:
            ++streamed;
            if (r.resume->tokens() == 0) r.resume->LearnIdentity(e);
            r.resume->OnToken(token);
            break;
          case SseEventKind::kOther:
            break;
        }
        if (forward && resuming) {
          rewritten = r.resume->Rewrite(e);
          out.append(rewritten);
        } else if (forward) {
          out.append(e);
        }
      }
      content_events += streamed;
      if (streamed > 0 || (first && !out.empty())) {
        // Output counts for fairness as it streams, not only when the request ends.
        std::lock_guard lock(mu_);
        if (streamed > 0) admission_.Charge(r.model, r.user, r.weight, streamed);
        if (first && !out.empty()) {
          ttft_.Observe((env_.Now() - r.start).count());
        }
      }
      if (!out.empty()) {
        first = false;
        client_gone = !co_await writer.SendChunk(out);  // then the upstream is dropped
      }
    }
    const bool hung = ec == beast::error::timeout;
    // Cut by the backend (not by the client, the gateway's own stop, or an event too large):
    // resumed on another backend by Attempt's caller.
    // A Responses stream is not resumed (StreamResume speaks completions and chat): it ends
    // with an error event.
    const bool cut = !done && !client_gone && !*client_left && !cutting_ && writer.ok() &&
                     !events.overflowed() && r.target != kResponsesPath;
    const PromptCount count =
        usage_seen && !resuming ? PromptCount::kBackends : PromptCount::kOther;
    if (usage_seen && resuming) {  // the first attempt metered the prompt (estimated)
      prompt_tokens = 0;
    } else if (!usage_seen) {  // cut short: meter what was streamed
      prompt_tokens = resuming ? 0 : r.prompt_estimate;
      completion_tokens = content_events;
    }
    Meter(r, b, count, prompt_tokens, completion_tokens, /*already_charged=*/content_events);
    if (hung) {
      // The backend is out until its health check passes (a stopped process fails it).
      {
        std::lock_guard lock(mu_);
        admission_.SetHealthy(b.id, false);
      }
      spdlog::warn("gateway: backend {} is down: its stream sent nothing for {} ms", b.id,
                   idle.count());
    }
    std::string reason = cutting_ ? std::string("the gateway is shutting down")
                         : hung          ? fmt::format("no data for {} ms", idle.count())
                         : ec            ? ec.message()
                                         : std::string("no [DONE]");
    if (cut) {
      r.cut_reason = fmt::format("{}: {}", b.id, reason);
      result = Error{ErrorCode::kUnavailable, r.cut_reason};
    } else if (!done && writer.ok()) {
      co_await EndStreamWithError(writer,
                                  fmt::format("the backend's stream ended early: {}", reason));
    } else if (writer.ok()) {
      co_await writer.EndStream();
    }
    if (parser.is_done() && parser.keep_alive() && !ec && !client_gone) {
      writer.StopWatching();  // as above: before the pool owns `up`
      pool.Release(std::move(up));
    }
  }
  co_return result;
}

TimePoint Gateway::AddServerTiming(const Request& r, TimePoint asked,
                                   ResponseWriter& writer) const {
  const TimePoint now = env_.Now();
  writer.AddHeader("Server-Timing",
                   ServerTiming((now - r.start).count(), r.queue_s, (now - asked).count()).view());
  return now;
}

awaitable<size_t> Gateway::ReadSome(UpstreamStream& stream, ReadBuffer& buffer,
                                    UpstreamParser& parser, std::array<char, 16384>& chunk,
                                    std::chrono::milliseconds idle, beast::error_code& ec) {
  parser.body().data = chunk.data();
  parser.body().size = chunk.size();
  stream.deadline().Arm(idle);
  co_await http::async_read_some(stream, buffer.plain(), parser,
                                 net::redirect_error(use_awaitable, ec));
  stream.deadline().Disarm(ec);
  if (ec == http::error::need_buffer) ec = {};
  co_return chunk.size() - parser.body().size;
}

}  // namespace bmas::gateway
