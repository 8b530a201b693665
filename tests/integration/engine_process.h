#pragma once

// Test support: runs the real `bmas` binary as a child process.
//
// Process starts $BMAS_BINARY (set by bmas_add_test) with given arguments, its stdout on a
// pipe that the test reads line by line with a deadline and its stderr in a file. The
// destructor stops what is still running: SIGTERM, then SIGKILL after a grace period.
// EngineProcess and GatewayProcess wrap `bmas engine|gateway --port 0 ...` and parse the port
// from their "listening on" line; RunBmas runs a short command (`bmas user add ...`) to its
// end. Not thread-safe; use from the test's thread.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace bmas::testing {

using std::chrono_literals::operator""ms;
using std::chrono_literals::operator""s;

// Environment entries (NAME, value) for a child.
using EnvList = std::vector<std::pair<std::string, std::string>>;

// The bmas binary under test: $BMAS_BINARY.
Result<std::string> BmasBinary();

// A fresh directory under $TMPDIR (or /tmp), removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes `contents` to path()/name and returns the file's path.
  std::string WriteFile(const std::string& name, std::string_view contents) const;

 private:
  std::string path_;
};

// How a child ended.
struct ExitStatus {
  bool exited = false;  // exited normally; otherwise killed by `signal`
  int code = 0;
  int signal = 0;
  bool Success() const { return exited && code == 0; }
  std::string ToString() const;
};

class Process {
 public:
  // Starts $BMAS_BINARY with `args`; `env` entries (NAME, value) are added to (or replace in)
  // this process's environment.
  static Result<std::unique_ptr<Process>> Start(const std::vector<std::string>& args,
                                                const EnvList& env = {});

  ~Process();  // Stop(5s) unless it already ended
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // Reads stdout until a complete line containing `needle`; returns that line (without the
  // newline). Fails on timeout or when stdout ends first.
  Result<std::string> WaitForLine(std::string_view needle, std::chrono::milliseconds timeout);
  // Everything read from stdout so far.
  const std::string& stdout_text() const { return stdout_; }
  // Reads the rest of stdout until EOF or the deadline.
  void DrainStdout(std::chrono::milliseconds timeout);
  // What the child wrote to stderr so far.
  std::string StderrText() const;

  void Signal(int signal);
  // Waits for the child to end; nullopt when it is still running at the deadline.
  std::optional<ExitStatus> Wait(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`; returns how it ended.
  ExitStatus Stop(std::chrono::milliseconds grace);

  pid_t pid() const { return pid_; }
  bool running() const { return !status_.has_value(); }

 private:
  Process(pid_t pid, int stdout_fd, std::unique_ptr<TempDir> dir);
  // One read from stdout, waiting up to `timeout`; false at EOF or on timeout.
  bool ReadSome(std::chrono::milliseconds timeout);

  pid_t pid_;
  int stdout_fd_;
  bool stdout_eof_ = false;
  std::string stdout_;
  size_t scanned_ = 0;            // stdout_ bytes already given out as lines by WaitForLine
  std::unique_ptr<TempDir> dir_;  // holds the stderr file
  std::optional<ExitStatus> status_;
};

// `bmas engine --port 0 ARGS...`, started and ready.
class EngineProcess {
 public:
  // Starts the engine and waits (up to 10 s) for its "listening on" line.
  static Result<std::unique_ptr<EngineProcess>> Start(const std::vector<std::string>& args = {},
                                                      const EnvList& env = {});

  uint16_t port() const { return port_; }
  const std::string& url() const { return url_; }  // http://127.0.0.1:PORT
  Process& process() { return *process_; }

 private:
  EngineProcess(std::unique_ptr<Process> process, uint16_t port, std::string url)
      : process_(std::move(process)), port_(port), url_(std::move(url)) {}

  std::unique_ptr<Process> process_;
  uint16_t port_;
  std::string url_;
};

// `bmas gateway --port 0 ARGS...` with `env` added (BMAS_STATE_DIR, typically), started and
// listening.
class GatewayProcess {
 public:
  // Starts the gateway and waits (up to 10 s) for its "listening on" line. Its backends may
  // not have passed their first health check yet.
  static Result<std::unique_ptr<GatewayProcess>> Start(const std::vector<std::string>& args,
                                                       const EnvList& env = {});

  uint16_t port() const { return port_; }
  // Its operator listener (/metrics), from its "metrics on" line; 0 when it has none.
  uint16_t metrics_port() const { return metrics_port_; }
  // "Bearer <operator secret>" of its state dir ($BMAS_STATE_DIR in `env`): what the operator
  // listener asks for.
  const std::string& operator_bearer() const { return operator_bearer_; }
  // GET `target` from the operator listener with the secret: the body of a 200, else "".
  std::string OperatorGet(const std::string& target) const;
  const std::string& url() const { return url_; }  // http://127.0.0.1:PORT
  Process& process() { return *process_; }

 private:
  GatewayProcess(std::unique_ptr<Process> process, uint16_t port, std::string url,
                 uint16_t metrics_port, std::string operator_bearer)
      : process_(std::move(process)), port_(port), url_(std::move(url)),
        metrics_port_(metrics_port), operator_bearer_(std::move(operator_bearer)) {}

  std::unique_ptr<Process> process_;
  uint16_t port_;
  std::string url_;
  uint16_t metrics_port_;
  std::string operator_bearer_;
};

// What a finished `bmas ...` command did.
struct CliRun {
  ExitStatus status;
  std::string out;
  std::string err;
};

// Runs `bmas ARGS...` with `env` added until it exits; fails when it cannot start or is still
// running after `timeout` (then it is killed).
Result<CliRun> RunBmas(const std::vector<std::string>& args, const EnvList& env = {},
                       std::chrono::milliseconds timeout = std::chrono::seconds(10));

// The port of an "http://HOST:PORT" URL, or 0.
uint16_t PortOfUrl(std::string_view url);

// True when a TCP connection to 127.0.0.1:port is refused (nothing listens there).
bool ConnectionRefused(uint16_t port);

}  // namespace bmas::testing
