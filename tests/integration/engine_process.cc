#include "engine_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_helpers.h"

extern char** environ;

namespace bmas::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Left(Clock::time_point until) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()));
}

std::string Tail(const std::string& text, size_t max_bytes) {
  return text.size() <= max_bytes ? text : "..." + text.substr(text.size() - max_bytes);
}

ExitStatus FromWaitStatus(int status) {
  ExitStatus s;
  if (WIFEXITED(status)) {
    s.exited = true;
    s.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    s.signal = WTERMSIG(status);
  }
  return s;
}

}  // namespace

Result<std::string> BmasBinary() {
  const char* path = std::getenv("BMAS_BINARY");
  if (path == nullptr || *path == '\0') {
    return Internal("BMAS_BINARY is not set: run this test through ctest, or set it to build/bmas");
  }
  if (access(path, X_OK) != 0) {
    return Internal(
        fmt::format("BMAS_BINARY={} is not an executable file: {}", path, std::strerror(errno)));
  }
  return std::string(path);
}

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = fmt::format("{}/bmas-it-XXXXXX", tmp != nullptr && *tmp ? tmp : "/tmp");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    std::fprintf(stderr, "mkdtemp %s: %s\n", pattern.c_str(), std::strerror(errno));
    std::abort();
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string TempDir::WriteFile(const std::string& name, std::string_view contents) const {
  std::string path = (fs::path(path_) / name).string();
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

std::string ExitStatus::ToString() const {
  if (exited) return fmt::format("exited with status {}", code);
  return fmt::format("killed by signal {} ({})", signal, strsignal(signal));
}

Result<std::unique_ptr<Process>> Process::Start(const std::vector<std::string>& args,
                                                const EnvList& env) {
  auto binary = BmasBinary();
  if (!binary) return binary.error();
  auto dir = std::make_unique<TempDir>();
  const std::string err_path = (fs::path(dir->path()) / "stderr.log").string();

  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_strings = {*binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    bool replaced = false;
    for (const auto& [name, value] : env) {
      if (entry.starts_with(name + "=")) replaced = true;
    }
    if (!replaced) env_strings.emplace_back(entry);
  }
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out[2], status_pipe[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(status_pipe, O_CLOEXEC) != 0) {
    return Internal(fmt::format("pipe: {}", std::strerror(errno)));
  }
  int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (err < 0) return Internal(fmt::format("open {}: {}", err_path, std::strerror(errno)));
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return Internal(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    // The child: dies with the test (even one killed by ctest's timeout), default signals.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
    dup2(out[1], STDOUT_FILENO);
    dup2(err, STDERR_FILENO);
    execve(argv[0], argv.data(), envp.data());
    int e = errno;
    [[maybe_unused]] ssize_t n = write(status_pipe[1], &e, sizeof e);
    _exit(127);
  }
  close(out[1]);
  close(err);
  close(status_pipe[1]);
  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(status_pipe[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  close(status_pipe[0]);
  if (n > 0) {
    close(out[0]);
    waitpid(pid, nullptr, 0);
    return Internal(fmt::format("cannot run {}: {}", *binary, std::strerror(exec_errno)));
  }
  return std::unique_ptr<Process>(new Process(pid, out[0], std::move(dir)));
}

Process::Process(pid_t pid, int stdout_fd, std::unique_ptr<TempDir> dir)
    : pid_(pid), stdout_fd_(stdout_fd), dir_(std::move(dir)) {}

Process::~Process() {
  if (running()) Stop(5s);
  close(stdout_fd_);
}

bool Process::ReadSome(std::chrono::milliseconds timeout) {
  if (stdout_eof_) return false;
  pollfd p{stdout_fd_, POLLIN, 0};
  int rc = poll(&p, 1, static_cast<int>(timeout.count()));
  if (rc <= 0) return false;
  char buf[4096];
  ssize_t n = read(stdout_fd_, buf, sizeof buf);
  if (n <= 0) {
    if (n < 0 && errno == EINTR) return true;
    stdout_eof_ = true;
    return false;
  }
  stdout_.append(buf, static_cast<size_t>(n));
  return true;
}

Result<std::string> Process::WaitForLine(std::string_view needle,
                                         std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (true) {
    size_t end;
    while ((end = stdout_.find('\n', scanned_)) != std::string::npos) {
      std::string line = stdout_.substr(scanned_, end - scanned_);
      scanned_ = end + 1;
      if (line.find(needle) != std::string::npos) return line;
    }
    if (stdout_eof_ || Clock::now() >= until) break;
    ReadSome(Left(until));
  }
  return Internal(fmt::format(
      "bmas (pid {}) {} before printing a line with '{}'\n--- stdout:\n{}\n--- stderr:\n{}", pid_,
      stdout_eof_ ? "closed stdout" : "timed out", needle, Tail(stdout_, 4000),
      Tail(StderrText(), 4000)));
}

void Process::DrainStdout(std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (!stdout_eof_ && Clock::now() < until) ReadSome(Left(until));
}

std::string Process::StderrText() const {
  std::ifstream in(fs::path(dir_->path()) / "stderr.log", std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void Process::Signal(int signal) {
  if (running()) kill(pid_, signal);
}

std::optional<ExitStatus> Process::Wait(std::chrono::milliseconds timeout) {
  const auto until = Clock::now() + timeout;
  while (!status_) {
    int status;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      status_ = FromWaitStatus(status);
      break;
    }
    if (r < 0 && errno != EINTR) {
      status_ = ExitStatus{};  // not our child any more: nothing to wait for
      break;
    }
    if (Clock::now() >= until) break;
    std::this_thread::sleep_for(5ms);
  }
  return status_;
}

ExitStatus Process::Stop(std::chrono::milliseconds grace) {
  Signal(SIGTERM);
  if (auto s = Wait(grace)) return *s;
  Signal(SIGKILL);
  if (auto s = Wait(10s)) return *s;
  return ExitStatus{};
}

namespace {

struct Listening {
  std::unique_ptr<Process> process;
  uint16_t port;
  std::string url;
};

// Starts `bmas COMMAND --port 0 ARGS...` (no --port 0 where ARGS give one) and reads its "bmas
// COMMAND: listening on URL" line.
Result<Listening> StartServer(const std::string& command, const std::vector<std::string>& args,
                              const EnvList& env) {
  std::vector<std::string> all = {command};
  if (std::find(args.begin(), args.end(), "--port") == args.end()) {
    all.insert(all.end(), {"--port", "0"});
  }
  all.insert(all.end(), args.begin(), args.end());
  auto process = Process::Start(all, env);
  if (!process) return process.error();
  auto line = (*process)->WaitForLine("listening on", 10s);
  if (!line) return line.error();
  const size_t at = line->find("http://");
  if (!line->starts_with("bmas " + command + ": listening on http://127.0.0.1:") ||
      at == std::string::npos) {
    return Internal(fmt::format("unexpected first line from bmas {}: {}", command, *line));
  }
  std::string url = line->substr(at);
  uint16_t port = PortOfUrl(url);
  if (port == 0) return Internal(fmt::format("no port in the {}'s line: {}", command, *line));
  return Listening{std::move(*process), port, std::move(url)};
}

}  // namespace

Result<std::unique_ptr<EngineProcess>> EngineProcess::Start(const std::vector<std::string>& args,
                                                            const EnvList& env) {
  auto started = StartServer("engine", args, env);
  if (!started) return started.error();
  return std::unique_ptr<EngineProcess>(
      new EngineProcess(std::move(started->process), started->port, std::move(started->url)));
}

Result<std::unique_ptr<GatewayProcess>> GatewayProcess::Start(const std::vector<std::string>& args,
                                                              const EnvList& env) {
  auto started = StartServer("gateway", args, env);
  if (!started) return started.error();
  // Printed before the "listening on" line.
  uint16_t metrics_port = 0;
  const std::string& out = started->process->stdout_text();
  constexpr std::string_view kMetrics = "bmas gateway: metrics on http://";
  if (auto at = out.find(kMetrics); at != std::string::npos) {
    const size_t url_at = at + kMetrics.size() - std::string_view("http://").size();
    const size_t eol = out.find('\n', url_at);
    metrics_port = PortOfUrl(std::string_view(out).substr(url_at, eol - url_at));
  }
  std::string bearer;
  for (const auto& [name, value] : env) {
    if (name == "BMAS_STATE_DIR") bearer = OperatorBearerOf(value);
  }
  return std::unique_ptr<GatewayProcess>(new GatewayProcess(std::move(started->process),
                                                            started->port, std::move(started->url),
                                                            metrics_port, std::move(bearer)));
}

std::string GatewayProcess::OperatorGet(const std::string& target) const {
  HttpClient c(metrics_port_);
  c.SetDefaultHeader("Authorization", operator_bearer_);
  auto r = c.Get(target);
  return r && r->status == 200 ? r->body : "";
}

Result<CliRun> RunBmas(const std::vector<std::string>& args, const EnvList& env,
                       std::chrono::milliseconds timeout) {
  auto process = Process::Start(args, env);
  if (!process) return process.error();
  Process& p = **process;
  const auto until = Clock::now() + timeout;
  p.DrainStdout(timeout);
  std::optional<ExitStatus> status = p.Wait(Left(until));
  if (!status) {
    p.Stop(1s);
    return Internal(fmt::format("`bmas {}` did not exit within {} ms; stderr:\n{}",
                                fmt::join(args, " "), timeout.count(), p.StderrText()));
  }
  return CliRun{*status, p.stdout_text(), p.StderrText()};
}

uint16_t PortOfUrl(std::string_view url) {
  if (!url.starts_with("http://")) return 0;
  size_t colon = url.rfind(':');
  if (colon == std::string_view::npos || colon < 7) return 0;
  std::string_view digits = url.substr(colon + 1);
  if (size_t slash = digits.find('/'); slash != std::string_view::npos) {
    digits = digits.substr(0, slash);
  }
  if (digits.empty() || digits.size() > 5) return 0;
  int port = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return 0;
    port = port * 10 + (c - '0');
  }
  return port > 0 && port <= 65535 ? static_cast<uint16_t>(port) : 0;
}

bool ConnectionRefused(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int e = errno;
  close(fd);
  return rc != 0 && e == ECONNREFUSED;
}

}  // namespace bmas::testing
