#include "daemon/agent.h"

#include <fcntl.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <spdlog/spdlog.h>

#include "common/http_server.h"
#include "common/metrics.h"
#include "daemon/serve.h"
#include "lxd/gpu_binding.h"
#include "lxd/job_copy.h"
#include "lxd/lxd_client.h"
#include "lxd/workspace.h"

extern char** environ;

namespace bmas {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
constexpr size_t kMaxMessage = 256 * 1024;

// ---- The wire: one SOCK_SEQPACKET message each way, JSON; a request carries three fds ----

std::string Json(const std::function<void(rapidjson::Writer<rapidjson::StringBuffer>&)>& body) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  body(w);
  w.EndObject();
  return buf.GetString();
}

bool SendMessage(int fd, const std::string& text, const std::vector<int>& fds = {}) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control(CMSG_SPACE(sizeof(int) * (fds.empty() ? 1 : fds.size())));
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  return sendmsg(fd, &msg, MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

// One message, and the fds that came with it. nullopt at EOF or on error.
std::optional<std::string> ReceiveMessage(int fd, std::vector<int>* fds = nullptr) {
  std::string text(kMaxMessage, '\0');
  iovec iov{text.data(), text.size()};
  char control[CMSG_SPACE(sizeof(int) * 8)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      std::vector<int> got(count);
      std::memcpy(got.data(), CMSG_DATA(c), sizeof(int) * count);
      for (int f : got) {
        if (fds != nullptr) {
          fds->push_back(f);
        } else {
          close(f);
        }
      }
    }
  }
  if (n <= 0) return std::nullopt;
  text.resize(static_cast<size_t>(n));
  return text;
}

int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    close(fd);
    return -1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// ---- The broker ----

// Buckets of the GPU bind and release latencies, seconds.
const std::vector<double> kLatencyBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

class Agent {
 public:
  explicit Agent(const AgentOptions& options) : o_(options) {}

  Result<void> Listen() {
    listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (listen_fd_ < 0 || o_.socket.size() >= sizeof addr.sun_path) {
      return Internal(fmt::format("cannot make the socket {}", o_.socket));
    }
    std::error_code ec;
    fs::create_directories(fs::path(o_.socket).parent_path(), ec);
    unlink(o_.socket.c_str());
    std::memcpy(addr.sun_path, o_.socket.c_str(), o_.socket.size() + 1);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(listen_fd_, 64) != 0) {
      return Internal(fmt::format("cannot listen on {}: {}", o_.socket, std::strerror(errno)));
    }
    // Users connect; the checks are the agent's (SO_PEERCRED and the job's cgroup).
    chmod(o_.socket.c_str(), 0666);
    return {};
  }

  void Start() {
    acceptor_ = std::thread([this] { AcceptLoop(); });
    reconciler_ = std::thread([this] { ReconcileLoop(); });
  }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    shutdown(listen_fd_, SHUT_RDWR);
    close(listen_fd_);
    unlink(o_.socket.c_str());
    if (acceptor_.joinable()) acceptor_.join();
    if (reconciler_.joinable()) reconciler_.join();
  }

  std::string Metrics() {
    std::lock_guard lock(mu_);
    MetricsRegistry r;
    r.AddGauge("bmas_agent_jobs_in_containers", "Job commands running in workspaces now", "")
        .Set(static_cast<double>(running_));
    r.AddGauge("bmas_agent_sessions", "`bmas workspace exec|shell` sessions running now", "")
        .Set(static_cast<double>(sessions_));
    r.AddGauge("bmas_agent_workspaces_running", "Workspaces (LXD instances) running, as of the "
               "last reconcile pass", "")
        .Set(static_cast<double>(workspaces_running_));
    r.AddCounter("bmas_agent_execs_total", "Job commands started in workspaces", "")
        .Inc(static_cast<double>(execs_));
    r.AddCounter("bmas_agent_sessions_total", "Sessions users started in their workspaces", "")
        .Inc(static_cast<double>(sessions_total_));
    r.AddCounter("bmas_agent_refused_total", "Requests refused (not the job's owner, no job)", "")
        .Inc(static_cast<double>(refused_));
    r.AddCounter("bmas_agent_reconcile_removed_total",
                 "GPU devices the reconcile pass unplugged (their job was gone)", "")
        .Inc(static_cast<double>(reconciled_));
    r.AddCounter("bmas_agent_reconcile_copies_deleted_total",
                 "Copies of other nodes' workspaces the reconcile pass deleted (their jobs were "
                 "gone)", "")
        .Inc(static_cast<double>(copies_deleted_));
    r.AddHistogram("bmas_agent_gpu_bind_seconds",
                   "Job start (prolog) to GPUs visible in the workspace", "", kLatencyBounds) =
        bind_seconds_;
    r.AddHistogram("bmas_agent_gpu_release_seconds",
                   "Job end (epilog) to GPUs gone from the workspace", "", kLatencyBounds) =
        release_seconds_;
    return r.Render();
  }

 private:
  void AcceptLoop() {
    while (true) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // closed by Stop()
      }
      std::thread([this, fd] {
        Serve(fd);
        close(fd);
      }).detach();
    }
  }

  void Reply(int fd, const std::string& text) { SendMessage(fd, text); }

  void Refuse(int fd, const std::string& why) {
    {
      std::lock_guard lock(mu_);
      ++refused_;
    }
    spdlog::warn("bmas agent: refused: {}", why);
    Reply(fd, Json([&](auto& w) {
      w.Key("error");
      w.String(why.c_str());
    }));
  }

  void Serve(int fd) {
    std::vector<int> fds;
    auto text = ReceiveMessage(fd, &fds);
    auto close_fds = [&] {
      for (int f : fds) close(f);
      fds.clear();
    };
    ucred cred{};
    socklen_t len = sizeof cred;
    if (!text || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      close_fds();
      return;
    }
    rapidjson::Document d;
    d.Parse(text->c_str(), text->size());
    if (d.HasParseError() || !d.IsObject() || !d.HasMember("op") || !d["op"].IsString() ||
        !d.HasMember("job") || !d["job"].IsInt64()) {
      close_fds();
      return Refuse(fd, "a request is a JSON object with op and job");
    }
    const std::string op = d["op"].GetString();
    const int64_t job = d["job"].GetInt64();
    if (op == "exec" || op == "enter") {
      Exec(fd, cred, op == "exec" ? job : 0, d, fds);
      close_fds();
      return;
    }
    close_fds();
    if (cred.uid != 0) return Refuse(fd, fmt::format("only root may ask to {}", op));
    if (op == "kill") return Kill(fd, job);
    if (op == "bound" || op == "released") {
      const double seconds = d.HasMember("seconds") && d["seconds"].IsNumber()
                                 ? d["seconds"].GetDouble()
                                 : 0;
      std::lock_guard lock(mu_);
      (op == "bound" ? bind_seconds_ : release_seconds_).Observe(seconds);
      return Reply(fd, "{}");
    }
    Refuse(fd, fmt::format("unknown op {}", op));
  }

  // `job` 0: the caller enters their own workspace (`bmas workspace exec|shell`), no job.
  void Exec(int fd, const ucred& cred, int64_t job, const rapidjson::Document& d,
            const std::vector<int>& fds) {
    if (fds.size() != 3) return Refuse(fd, "exec needs stdin, stdout and stderr");
    // For a job, the caller must be a process of that very job (its cgroup), run by its user.
    std::ifstream in(fmt::format("/proc/{}/cgroup", cred.pid));
    std::stringstream cgroup;
    cgroup << in.rdbuf();
    if (job != 0 && !InSlurmJobCgroup(cgroup.str(), job)) {
      return Refuse(fd, fmt::format("pid {} (uid {}) is not a process of job {}", cred.pid,
                                    cred.uid, job));
    }
    passwd* pw = getpwuid(cred.uid);
    if (pw == nullptr) return Refuse(fd, fmt::format("uid {} has no account", cred.uid));
    const std::string user = pw->pw_name, home = pw->pw_dir;
    if (job != 0) {
      auto owner = o_.job_user(job);
      if (!owner) return Refuse(fd, fmt::format("job {}: {}", job, owner.error().message));
      if (*owner != user) {
        return Refuse(fd, fmt::format("job {} belongs to {}, not {}", job, *owner, user));
      }
    }
    const uid_t uid = pw->pw_uid;
    const gid_t gid = pw->pw_gid;
    lxd::LxdClient client(o_.lxd_socket, std::chrono::seconds(30));
    const std::string instance = lxd::WorkspaceName(user);
    auto ws = client.GetInstance(instance);
    if (!ws && job == 0) return Refuse(fd, ws.error().message);
    if (!ws) {
      // No workspace (or no LXD): the job runs as a plain Slurm job.
      return Reply(fd, Json([&](auto& w) {
        w.Key("plain");
        w.String(ws.error().message.c_str());
      }));
    }
    if (ws->status != "Running") {
      if (auto started = lxd::StartInstance(client, instance); !started) {
        return Refuse(fd, started.error().message);
      }
    }
    auto init = client.InitPid(instance);
    if (!init) return Refuse(fd, init.error().message);

    std::vector<std::string> argv, env;
    if (d.HasMember("argv") && d["argv"].IsArray()) {
      for (const auto& a : d["argv"].GetArray()) {
        if (a.IsString()) argv.emplace_back(a.GetString(), a.GetStringLength());
      }
    }
    if (argv.empty()) return Refuse(fd, "no command");
    if (d.HasMember("env") && d["env"].IsArray()) {
      for (const auto& e : d["env"].GetArray()) {
        if (e.IsString()) env.emplace_back(e.GetString(), e.GetStringLength());
      }
    }
    env.push_back("HOME=" + home);
    env.push_back("USER=" + user);
    env.push_back("LOGNAME=" + user);
    // Only the home is shared with the host: elsewhere, start in it.
    std::string cwd = d.HasMember("cwd") && d["cwd"].IsString() ? d["cwd"].GetString() : home;
    if (cwd != home && !cwd.starts_with(home + "/")) cwd = home;

    // A job keeps the node's network (a workspace has none of its own): its ranks reach each
    // other and NCCL the node's NICs, as in a plain Slurm job. A session stays in the
    // workspace's.
    std::vector<std::string> args = {"nsenter", "--target", std::to_string(*init), "--mount",
                                     "--uts", "--ipc", "--pid", "--cgroup", "--user"};
    if (job == 0) args.push_back("--net");
    args.insert(args.end(), {"--setuid", std::to_string(uid), "--setgid", std::to_string(gid),
                             "--wd=" + cwd, "--"});
    args.insert(args.end(), argv.begin(), argv.end());
    // Everything the child needs is made before the fork: other threads may hold the
    // allocator's locks at that moment, so the child must not allocate.
    const std::vector<std::string> procs =
        CgroupProcsFiles(ReadText(fmt::format("/proc/{}/cgroup", *init)));
    std::vector<char*> a, e;
    for (auto& s : args) a.push_back(s.data());
    a.push_back(nullptr);
    for (auto& s : env) e.push_back(s.data());
    e.push_back(nullptr);
    sigset_t none;
    sigemptyset(&none);

    pid_t child = fork();
    if (child < 0) return Refuse(fd, std::string("fork: ") + std::strerror(errno));
    if (child == 0) {
      setsid();
      for (int i = 0; i < 3; ++i) dup2(fds[i], i);
      // Into the container's cgroups, so that its limits hold for the job too. Best effort.
      char pid[24];
      int n = 0;
      for (pid_t p = getpid(); p > 0; p /= 10) pid[n++] = static_cast<char>('0' + p % 10);
      for (int i = 0; i < n / 2; ++i) std::swap(pid[i], pid[n - 1 - i]);
      for (const std::string& file : procs) {
        int f = open(file.c_str(), O_WRONLY | O_CLOEXEC);
        if (f >= 0) {
          [[maybe_unused]] ssize_t w = write(f, pid, static_cast<size_t>(n));
          close(f);
        }
      }
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execve("/usr/bin/nsenter", a.data(), e.data());
      _exit(127);
    }
    {
      std::lock_guard lock(mu_);
      jobs_[job].insert(child);
      if (job != 0) {
        ++running_;
        ++execs_;
      } else {
        ++sessions_;
        ++sessions_total_;
      }
    }
    spdlog::info("bmas agent: job {} of {}: {} runs in {} (pid {})", job, user, argv[0],
                 instance, child);
    const int code = WaitOrKill(fd, child);
    {
      std::lock_guard lock(mu_);
      jobs_[job].erase(child);
      if (jobs_[job].empty()) jobs_.erase(job);
      --(job != 0 ? running_ : sessions_);
    }
    wake_.notify_all();
    Reply(fd, Json([&](auto& w) {
      w.Key("exit");
      w.Int(code);
    }));
  }

  // Waits for `child`; kills its process group when the caller goes away first. Returns its
  // exit code (128 + N for signal N).
  int WaitOrKill(int fd, pid_t child) {
    int status = 0;
    while (true) {
      pid_t r = waitpid(child, &status, WNOHANG);
      if (r == child) break;
      pollfd p{fd, POLLIN | POLLRDHUP, 0};
      if (poll(&p, 1, 20) > 0 && (p.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN))) {
        char byte;
        if (recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK) <= 0) {
          // The caller is gone: Slurm cancelled the job or its time ran out.
          KillGroup(child);
          waitpid(child, &status, 0);
          break;
        }
      }
    }
    kill(-child, SIGKILL);  // whatever it left in the background
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  static void KillGroup(pid_t group) {
    kill(-group, SIGTERM);
    for (int i = 0; i < 100 && kill(-group, 0) == 0; ++i) {
      int status;
      waitpid(group, &status, WNOHANG);
      usleep(20000);
    }
    kill(-group, SIGKILL);
  }

  void Kill(int fd, int64_t job) {
    std::set<pid_t> groups;
    {
      std::lock_guard lock(mu_);
      if (auto it = jobs_.find(job); it != jobs_.end()) groups = it->second;
    }
    for (pid_t g : groups) kill(-g, SIGTERM);
    std::unique_lock lock(mu_);
    if (!wake_.wait_for(lock, std::chrono::seconds(5), [&] { return !jobs_.contains(job); })) {
      for (pid_t g : groups) kill(-g, SIGKILL);
      wake_.wait_for(lock, std::chrono::seconds(5), [&] { return !jobs_.contains(job); });
    }
    lock.unlock();
    Reply(fd, Json([&](auto& w) {
      w.Key("killed");
      w.Int(static_cast<int>(groups.size()));
    }));
  }

  void ReconcileLoop() {
    std::unique_lock lock(mu_);
    while (!stopping_) {
      lock.unlock();
      lxd::LxdClient client(o_.lxd_socket, std::chrono::seconds(30));
      auto removed = lxd::ReconcileGpus(client, o_.job_alive);
      // Copies of workspaces from other nodes whose jobs are all gone (their epilog did not
      // run): after the unplug above, so no device goes with a copy.
      auto copies = lxd::ReconcileCopies(client, o_.job_alive);
      auto instances = client.Instances();
      lock.lock();
      if (copies) {
        copies_deleted_ += static_cast<int64_t>(copies->size());
        for (const std::string& c : *copies) {
          spdlog::info("bmas agent: reconcile: deleted {}, a copy whose jobs are gone", c);
        }
      } else {
        spdlog::warn("bmas agent: reconcile: {}", copies.error().message);
      }
      if (removed) {
        reconciled_ += static_cast<int64_t>(removed->size());
        for (const std::string& r : *removed) {
          spdlog::info("bmas agent: reconcile: unplugged {} (its job is gone)", r);
        }
      } else {
        spdlog::warn("bmas agent: reconcile: {}", removed.error().message);
      }
      if (instances) {
        workspaces_running_ = 0;
        for (const auto& i : *instances) workspaces_running_ += i.status == "Running" ? 1 : 0;
      }
      wake_.wait_for(lock, o_.reconcile_interval, [&] { return stopping_; });
    }
  }

  static std::string ReadText(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

  // The cgroup.procs files of the cgroups listed in /proc/PID/cgroup's text (v1 hierarchies by
  // their controllers' mount, the v2 one under unified/ on a hybrid host).
  static std::vector<std::string> CgroupProcsFiles(const std::string& cgroups) {
    std::vector<std::string> files;
    std::istringstream lines(cgroups);
    for (std::string line; std::getline(lines, line);) {
      const size_t a = line.find(':'), b = line.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) continue;
      std::string controllers = line.substr(a + 1, b - a - 1);
      const std::string path = line.substr(b + 1);
      std::string root;
      if (controllers.empty()) {
        root = fs::exists("/sys/fs/cgroup/unified") ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup";
      } else {
        if (controllers.starts_with("name=")) controllers = controllers.substr(5);
        root = "/sys/fs/cgroup/" + controllers;
      }
      files.push_back(root + path + "/cgroup.procs");
    }
    return files;
  }

  const AgentOptions& o_;
  int listen_fd_ = -1;
  std::thread acceptor_, reconciler_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::map<int64_t, std::set<pid_t>> jobs_;  // job -> process groups running for it
  int64_t running_ = 0, execs_ = 0, refused_ = 0, reconciled_ = 0, workspaces_running_ = 0;
  int64_t copies_deleted_ = 0;
  int64_t sessions_ = 0, sessions_total_ = 0;  // job 0: users in their own workspace
  Histogram bind_seconds_{kLatencyBounds}, release_seconds_{kLatencyBounds};
};

}  // namespace

std::string AgentSocketPath(const std::string& state_dir) {
  return (fs::path(state_dir) / "run" / "agent.sock").string();
}

bool InSlurmJobCgroup(const std::string& proc_cgroup, int64_t job) {
  const std::string mine = fmt::format("/job_{}/", job);
  std::istringstream lines(proc_cgroup);
  for (std::string line; std::getline(lines, line);) {
    line += "/";
    if (line.find(mine) != std::string::npos) return true;
  }
  return false;
}

int RunAgent(const AgentOptions& options) {
  std::signal(SIGPIPE, SIG_IGN);
  Agent agent(options);
  if (auto r = agent.Listen(); !r) {
    fmt::print(stderr, "bmas agent: {}\n", r.error().message);
    return 1;
  }
  net::io_context io(1);
  HttpServerOptions http;
  http.host = options.metrics_host;
  http.port = options.metrics_port;
  http.server_name = "bmas-agent";
  HttpServer server(io, http, [&](HttpRequest& req, ResponseWriter& w) -> awaitable<void> {
    if (req.target() == "/metrics") {
      co_await w.Send(http::status::ok, "text/plain; version=0.0.4", agent.Metrics());
    } else if (req.target() == "/health") {
      co_await w.Send(http::status::ok, "application/json", "{\"status\":\"ok\"}");
    } else {
      co_await w.SendError(http::status::not_found, "no such path: try /metrics or /health");
    }
  });
  auto port = server.Listen();
  if (!port) {
    fmt::print(stderr, "bmas agent: {}\n", port.error().message);
    return 1;
  }
  agent.Start();
  server.Start();
  fmt::print("bmas agent: socket {}; metrics listening on http://{}:{}\n", options.socket,
             options.metrics_host, *port);
  std::fflush(stdout);
  ServeUntilSignalled(io, server, std::chrono::seconds(2), "bmas agent");
  agent.Stop();
  return 0;
}

namespace {
int RunThroughAgent(const std::string& socket, const std::vector<std::string>& argv, bool for_job);
}  // namespace

int RunAgentExec(const std::string& socket, const std::vector<std::string>& argv) {
  return RunThroughAgent(socket, argv, /*job=*/true);
}

int RunAgentEnter(const std::string& socket, const std::vector<std::string>& argv) {
  return RunThroughAgent(socket, argv, /*job=*/false);
}

namespace {

int RunThroughAgent(const std::string& socket, const std::vector<std::string>& argv, bool for_job) {
  auto exec_here = [&] {
    std::vector<char*> a;
    for (const std::string& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    execvp(a[0], a.data());
    fmt::print(stderr, "bmas agent exec: cannot run {}: {}\n", argv[0], std::strerror(errno));
    return 127;
  };
  const char* job = for_job ? std::getenv("SLURM_JOB_ID") : "0";
  int fd = job != nullptr ? Connect(socket) : -1;
  if (fd < 0 && !for_job) {
    fmt::print(stderr, "bmas workspace: no agent runs at {} (bmas up starts one; root can use "
               "`bmas agent`)\n", socket);
    return 1;
  }
  if (fd < 0) return exec_here();  // no agent here: a plain Slurm job
  char cwd[4096];
  const std::string here = getcwd(cwd, sizeof cwd) != nullptr ? cwd : "";
  const std::string request = Json([&](auto& w) {
    w.Key("op");
    w.String(for_job ? "exec" : "enter");
    w.Key("job");
    w.Int64(std::strtoll(job, nullptr, 10));
    w.Key("cwd");
    w.String(here.c_str());
    w.Key("argv");
    w.StartArray();
    for (const std::string& a : argv) w.String(a.c_str());
    w.EndArray();
    w.Key("env");
    w.StartArray();
    for (char** e = environ; *e != nullptr; ++e) w.String(*e);
    w.EndArray();
  });
  if (!SendMessage(fd, request, {0, 1, 2})) {
    close(fd);
    return exec_here();
  }
  auto reply = ReceiveMessage(fd);
  close(fd);
  rapidjson::Document d;
  if (reply) d.Parse(reply->c_str(), reply->size());
  if (!reply || d.HasParseError() || !d.IsObject()) {
    fmt::print(stderr, "bmas agent exec: the agent at {} did not answer\n", socket);
    return 126;
  }
  if (d.HasMember("exit") && d["exit"].IsInt()) return d["exit"].GetInt();
  if (d.HasMember("plain") && for_job) return exec_here();
  fmt::print(stderr, "bmas {}: {}\n", for_job ? "agent exec" : "workspace",
             d.HasMember("error") && d["error"].IsString() ? d["error"].GetString() : *reply);
  return 126;
}

}  // namespace

Result<int> AgentKillJob(const std::string& socket, int64_t job) {
  int fd = Connect(socket);
  if (fd < 0) return 0;  // no agent: nothing of the job runs in a workspace
  const std::string request = Json([&](auto& w) {
    w.Key("op");
    w.String("kill");
    w.Key("job");
    w.Int64(job);
  });
  if (!SendMessage(fd, request)) {
    close(fd);
    return Error{ErrorCode::kUnavailable, "cannot reach the agent at " + socket};
  }
  auto reply = ReceiveMessage(fd);
  close(fd);
  rapidjson::Document d;
  if (reply) d.Parse(reply->c_str(), reply->size());
  if (!reply || d.HasParseError() || !d.IsObject() || !d.HasMember("killed")) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("the agent at {} answered: {}", socket, reply ? *reply : "nothing")};
  }
  return d["killed"].GetInt();
}

// The hooks tell the agent how long binding and releasing took, for its /metrics.
void AgentObserve(const std::string& socket, const std::string& op, double seconds) {
  int fd = Connect(socket);
  if (fd < 0) return;
  SendMessage(fd, Json([&](auto& w) {
    w.Key("op");
    w.String(op.c_str());
    w.Key("job");
    w.Int64(0);
    w.Key("seconds");
    w.Double(seconds);
  }));
  ReceiveMessage(fd);
  close(fd);
}

}  // namespace bmas
