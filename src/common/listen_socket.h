#pragma once

// Listening TCP sockets that outlive the process serving them. `bmas up` binds each port of the
// parts it runs (gateway, dashboard, engines, monitors) once, holds it for its own life, and
// passes it down at every start: a part that crashed leaves its port held, so no other account
// can bind it while the part starts again and receive the keys, prompts or operator bearer meant
// for it (../shared/SECURITY.md). The same works under a service manager that passes sockets.
//
// The handover: the parent puts the sockets at descriptors 3, 4, ... of the child and sets
// BMAS_LISTEN_FDS="FD=HOST:PORT,..."; the child's HttpServer, asked to listen on HOST:PORT,
// serves the descriptor passed for it instead of binding.

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace bmas {

// "host:port" (the host may be a bracketed IPv6 address) split in two; the error says what is
// wrong with `text`.
Result<std::pair<std::string, uint16_t>> SplitHostPort(std::string_view text);

// Whether `host` is this machine's loopback: "localhost", 127.0.0.0/8 or ::1.
bool IsLoopbackHost(const std::string& host);

// "host:port", the host bracketed when it is an IPv6 address.
std::string JoinHostPort(const std::string& host, uint16_t port);

// A TCP socket bound to host:port (port 0: any free one) and listening, close-on-exec. Errors
// name the address and the fix.
Result<int> ListenTcp(const std::string& host, uint16_t port);

// The port a bound socket has.
Result<uint16_t> BoundPort(int fd);

// A socket held for a child: where it listens and its descriptor in the parent.
struct HeldListener {
  std::string host;
  uint16_t port = 0;
  int fd = -1;
};

// BMAS_LISTEN_FDS's value for `held` placed at descriptors 3, 4, ... in that order.
std::string ListenFdsValue(const std::vector<HeldListener>& held);

// The descriptor a parent passed for host:port, or -1 when none: checked to be a listening TCP
// socket bound to that port, and made close-on-exec. The first call reads BMAS_LISTEN_FDS and
// removes it from the environment (so it reaches none of this process's children); each
// descriptor is handed out once.
Result<int> TakeInheritedListener(const std::string& host, uint16_t port);

}  // namespace bmas
