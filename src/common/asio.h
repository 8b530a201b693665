#pragma once

// The one include for Boost.Asio and Beast, with the settings bmas builds them with.
// GCC 12 with Boost 1.74 needs <utility> before asio's awaitable header.

#include <utility>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace bmas {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

// Coroutines run on an io_context's executor, named by its type. Asio's own default is the
// type-erased any_io_executor, which every operation's handler then copies, moves and queries
// for work tracking (1.6k instructions of a relayed request, bench/RESULTS.md G1). Every
// coroutine of bmas is spawned on an io_context.
using Executor = boost::asio::io_context::executor_type;
template <typename T = void>
using awaitable = boost::asio::awaitable<T, Executor>;
inline constexpr boost::asio::use_awaitable_t<Executor> use_awaitable;

// A TCP stream with deadlines, bound to one io_context: what the servers and the gateway's
// upstream connections use. beast::tcp_stream binds the type-erased any_io_executor instead,
// which its every operation copies, moves and queries (a tenth of a proxied request's CPU).
using TcpStream = boost::beast::basic_stream<tcp, Executor>;

// Completion handler for co_spawn: logs an exception that escaped a coroutine, so that no
// failure of detached work passes silently.
void LogIfFailed(const char* what, std::exception_ptr e);

// co_spawn(ex, Coroutine(), LogFailure("what")).
inline auto LogFailure(const char* what) {
  return [what](std::exception_ptr e) { LogIfFailed(what, e); };
}

}  // namespace bmas
