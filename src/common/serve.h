#pragma once

// Runs a server's io_context in the foreground until SIGINT or SIGTERM, then stops the server
// gracefully (it stops accepting and lets in-flight requests finish up to `deadline`).

#include <chrono>
#include <csignal>
#include <string>

#include <spdlog/spdlog.h>

#include "common/asio.h"

namespace bmas {

// `Server` has `awaitable<void> Stop(std::chrono::steady_clock::duration)`. `name` is used in
// the log ("bmas engine"); `after` says what stopping also does (may be empty). `signals` (on
// `io`, for SIGINT and SIGTERM) may have been made earlier, so that a signal that came before
// this call is not lost.
template <typename Server>
void ServeUntilSignalled(net::io_context& io, net::signal_set& signals, Server& server,
                         std::chrono::seconds deadline, const std::string& name,
                         const std::string& after = {}) {
  signals.async_wait([&](const beast::error_code& ec, int signal) {
    if (ec) return;
    spdlog::info("{}: signal {}: not accepting; finishing in-flight requests (up to {}s){}", name,
                 signal, deadline.count(), after.empty() ? "" : ", then " + after);
    net::co_spawn(
        io,
        [&]() -> awaitable<void> {
          co_await server.Stop(deadline);
          io.stop();
        },
        LogFailure("graceful stop"));
  });
  io.run();
  spdlog::info("{}: stopped", name);
}

template <typename Server>
void ServeUntilSignalled(net::io_context& io, Server& server, std::chrono::seconds deadline,
                         const std::string& name, const std::string& after = {}) {
  net::signal_set signals(io, SIGINT, SIGTERM);
  ServeUntilSignalled(io, signals, server, deadline, name, after);
}

}  // namespace bmas
