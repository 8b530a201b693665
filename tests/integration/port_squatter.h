#pragma once

// A student taking a port: as a Unix account of the test's, bind a TCP port on 127.0.0.1 (with
// SO_REUSEADDR, as a server would) and listen on it. For the attacks on bmas's listeners: a
// port a service has bound but not listened on can be taken this way.

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/result.h"

namespace bmas::testing {

// Binds and listens on 127.0.0.1:`port` as `user` in a child process, then closes it. Returns 0
// when both succeeded, else the errno of the step that failed (EADDRINUSE: the port is held).
int BindAndListenAs(const std::string& user, uint16_t port);

// Holds 127.0.0.1:`port` as `user` and answers whatever comes with a forged 200 (a body of 64
// hex digits, the shape of a challenge's answer), one connection at a time, recording every byte
// received in `record_file`. Killed when destroyed.
class PortSquatter {
 public:
  static Result<std::unique_ptr<PortSquatter>> Start(const std::string& user, uint16_t port,
                                                     const std::string& record_file);
  ~PortSquatter();
  PortSquatter(const PortSquatter&) = delete;
  PortSquatter& operator=(const PortSquatter&) = delete;

  // Everything received so far.
  std::string Received() const;
  uint16_t port() const { return port_; }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  PortSquatter(pid_t pid, uint16_t port, std::string record_file)
      : pid_(pid), port_(port), record_file_(std::move(record_file)) {}
  pid_t pid_;
  uint16_t port_;
  std::string record_file_;
};

}  // namespace bmas::testing
