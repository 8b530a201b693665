#include "agent/agent.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "agent/agent_protocol.h"
#include "agent/agent_reconciler.h"
#include "agent/agent_spawn.h"
#include "agent/agent_wire.h"
#include "agent/gpu_sampler.h"
#include "common/http_server.h"
#include "common/json_object.h"
#include "common/listen_socket.h"
#include "common/metrics.h"
#include "common/operator_auth.h"
#include "common/serve.h"
#include "lxd/job_cgroup.h"
#include "lxd/lxd_client.h"
#include "lxd/workspace.h"
#include "slurm/tls_front.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

// Connections from all users together; each holds a thread, and while its command runs, its
// socket, the caller's stdin, stdout and stderr, and a pidfd.
// All connections together: 128 users at their cap. Each holds a thread (waiting for its
// request with no buffer) and up to kFdsPerConnection fds, which RunAgent provides for.
constexpr int kMaxConnections = 8192;
constexpr int kFdsPerConnection = 5;

// Buckets of the GPU bind and release latencies, seconds.
const std::vector<double> kLatencyBounds = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A warning at most once per `interval`: what a user can cause at any rate must not flood the log.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(Env& env) : env_(env) {}
  void Warn(const std::string& text) {
    std::lock_guard lock(mu_);
    const TimePoint now = env_.Now();
    if (last_ && now - *last_ < Duration(5)) {
      ++dropped_;
      return;
    }
    spdlog::warn("bmas agent: {}{}", text,
                 dropped_ > 0 ? fmt::format(" (and {} more like it)", dropped_) : "");
    last_ = now;
    dropped_ = 0;
  }

 private:
  std::mutex mu_;
  Env& env_;
  std::optional<TimePoint> last_;
  int64_t dropped_ = 0;
};

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
        listen(listen_fd_, 128) != 0) {
      return Internal(fmt::format("cannot listen on {}: {}", o_.socket, std::strerror(errno)));
    }
    // Users connect; the checks are the agent's (SO_PEERCRED and the job's cgroup).
    chmod(o_.socket.c_str(), 0666);
    return {};
  }

  void Start() {
    acceptor_ = std::thread([this] { AcceptLoop(); });
    reconciler_.Start();
    if (o_.gpus) {
      sampler_ = std::make_unique<GpuSampler>(*o_.env, o_.gpus, o_.node, o_.telemetry_interval,
                                              o_.on_gpu_sample);
      sampler_->Start();
    }
  }

  // Returns when every connection is done: reads have deadlines, and a command's connection
  // stops waiting for it (the command runs on; the epilog ends it with its job).
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (acceptor_.joinable()) acceptor_.join();
    close(listen_fd_);
    unlink(o_.socket.c_str());
    reconciler_.Stop();
    if (sampler_) sampler_->Stop();
    for (auto& [id, t] : connections_) t.join();
    connections_.clear();
  }

  // This node's GPUs as JSON for the dashboard; "sample": null without telemetry.
  std::string GpusJson() {
    if (!sampler_) return R"({"up":false,"error":"no GPU telemetry on this agent","sample":null})";
    return sampler_->Json();
  }

  std::string Metrics() {
    const AgentReconciler::Counts reconciled = reconciler_.counts();
    std::lock_guard lock(mu_);
    MetricsRegistry r;
    r.AddGauge("bmas_agent_jobs_in_containers", "Job commands running in workspaces now", "")
        .Set(static_cast<double>(running_));
    r.AddGauge("bmas_agent_sessions", "`bmas workspace exec|shell` sessions running now", "")
        .Set(static_cast<double>(sessions_));
    r.AddGauge("bmas_agent_connections", "Connections to the agent's socket open now", "")
        .Set(static_cast<double>(open_));
    r.AddGauge("bmas_agent_workspaces_running", "Workspaces (LXD instances) running, as of the "
               "last reconcile pass", "")
        .Set(static_cast<double>(reconciled.workspaces_running));
    r.AddCounter("bmas_agent_execs_total", "Job commands started in workspaces", "")
        .Inc(static_cast<double>(execs_));
    r.AddCounter("bmas_agent_sessions_total", "Sessions users started in their workspaces", "")
        .Inc(static_cast<double>(sessions_total_));
    r.AddCounter("bmas_agent_refused_total", "Requests refused (not the job's owner, no job)", "")
        .Inc(static_cast<double>(refused_));
    r.AddCounter("bmas_agent_connections_over_cap_total",
                 "Connections turned away: their user already had the most allowed open", "")
        .Inc(static_cast<double>(over_cap_));
    r.AddCounter("bmas_agent_reconcile_removed_total",
                 "GPU devices the reconcile pass unplugged (their job was gone)", "")
        .Inc(static_cast<double>(reconciled.removed));
    r.AddCounter("bmas_agent_reconcile_copies_deleted_total",
                 "Copies of other nodes' workspaces the reconcile pass deleted (their jobs were "
                 "gone)", "")
        .Inc(static_cast<double>(reconciled.copies_deleted));
    r.AddCounter("bmas_agent_gpu_uses_killed_total",
                 "Processes the reconcile pass killed for using a GPU outside the job it "
                 "belongs to", "")
        .Inc(static_cast<double>(reconciled.gpu_uses_killed));
    r.AddHistogram("bmas_agent_gpu_bind_seconds",
                   "Job start (prolog) to GPUs visible in the workspace", "", kLatencyBounds) =
        bind_seconds_;
    r.AddHistogram("bmas_agent_gpu_release_seconds",
                   "Job end (epilog) to GPUs gone from the workspace", "", kLatencyBounds) =
        release_seconds_;
    return r.Render() + (sampler_ ? sampler_->Metrics() : std::string());
  }

 private:
  bool Stopping() {
    std::lock_guard lock(mu_);
    return stopping_;
  }

  // Accepts until Stop(). Survives running out of fds (EMFILE, ENFILE): it backs off and says
  // so at most once per few seconds. Only this thread touches connections_ until Stop().
  void AcceptLoop() {
    while (!Stopping()) {
      JoinFinished();
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          accept_log_.Warn(fmt::format("accept: {}; backing off", std::strerror(errno)));
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        continue;
      }
      SetDeadlines(fd, o_.io_timeout, o_.io_timeout);
      ucred cred{};
      socklen_t len = sizeof cred;
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
        close(fd);
        continue;
      }
      if (!Admit(cred.uid)) {
        cap_log_.Warn(
            fmt::format("a connection of uid {} turned away (the most allowed are "
                        "open: {} per uid, or all the fds allow)",
                        cred.uid, o_.max_connections_per_uid));
        SendMessage(fd, ErrorReply(fmt::format(
                            "too many connections to the agent: at most {} per user, and you "
                            "have that many open, or the agent is full; try again later",
                            o_.max_connections_per_uid)));
        close(fd);
        continue;
      }
      const int64_t id = next_connection_++;
      connections_.emplace(id, std::thread([this, fd, cred, id] {
                             Serve(fd, cred);
                             close(fd);
                             Finished(id, cred.uid);
                           }));
    }
  }

  // Whether a connection of `uid` may be served: under the per-uid cap (root has none), and
  // under the cap of all together, which leaves fds for the commands being started.
  bool Admit(uid_t uid) {
    rlimit nofile{};
    getrlimit(RLIMIT_NOFILE, &nofile);
    const int64_t by_fds = nofile.rlim_cur == RLIM_INFINITY
                               ? kMaxConnections
                               : (static_cast<int64_t>(nofile.rlim_cur) - 64) / kFdsPerConnection;
    std::lock_guard lock(mu_);
    int& mine = per_uid_[uid];
    if ((uid != 0 && mine >= o_.max_connections_per_uid) ||
        open_ >= std::min<int64_t>(kMaxConnections, std::max<int64_t>(by_fds, 4))) {
      ++over_cap_;
      return false;
    }
    ++mine;
    ++open_;
    return true;
  }

  void Finished(int64_t id, uid_t uid) {
    std::lock_guard lock(mu_);
    if (--per_uid_[uid] == 0) per_uid_.erase(uid);
    --open_;
    finished_.push_back(id);
  }

  void JoinFinished() {
    std::vector<int64_t> done;
    {
      std::lock_guard lock(mu_);
      done.swap(finished_);
    }
    for (int64_t id : done) {
      connections_.at(id).join();
      connections_.erase(id);
    }
  }

  static std::string ErrorReply(const std::string& why) {
    return JsonObject([&](JsonWriter& w) {
      Member(w, "error", why);
    });
  }

  static std::string IntReply(const char* key, int64_t value) {
    return JsonObject([&](JsonWriter& w) {
      w.Key(key);
      w.Int64(value);
    });
  }

  void Refuse(int fd, const std::string& why) {
    {
      std::lock_guard lock(mu_);
      ++refused_;
    }
    refuse_log_.Warn("refused: " + why);
    SendMessage(fd, ErrorReply(why));
  }

  void Serve(int fd, const ucred& cred) {
    std::vector<int> fds;
    auto text = ReceiveMessage(fd, kMaxAgentMessage, &fds);
    struct Closer {
      std::vector<int>& fds;
      ~Closer() {
        for (int f : fds) close(f);
      }
    } closer{fds};
    if (!text) {
      if (text.error().code == ErrorCode::kInvalidArgument) Refuse(fd, text.error().message);
      return;  // gone, or silent past the deadline
    }
    auto request = ParseAgentRequest(*text);
    if (!request) return Refuse(fd, request.error().message);
    const std::string& op = request->op;
    if (op == "exec" || op == "enter") {
      return Exec(fd, cred, op == "exec" ? request->job : 0, *request, fds);
    }
    if (op == "usage" || op == "idle") return Own(fd, cred, op, request->since);
    if (op == "keys") return OwnKeys(fd, cred, request->action, request->key_id);
    if (cred.uid != 0) return Refuse(fd, fmt::format("only root may ask to {}", op));
    if (op == "kill") return Kill(fd, request->job);
    if (op == "bound" || op == "released") {
      {
        std::lock_guard lock(mu_);
        (op == "bound" ? bind_seconds_ : release_seconds_).Observe(request->seconds);
      }
      SendMessage(fd, "{}");
      return;
    }
    Refuse(fd, fmt::format("unknown op {}", op));
  }

  // The caller's own usage or idle-GPU records from `since`, as the JSON object `usage` or
  // `idle` gives: the store is root's, and the socket's peer credentials say who asks.
  void Own(int fd, const ucred& cred, const std::string& op, int64_t since) {
    const auto& answer = op == "usage" ? o_.usage : o_.idle;
    if (!answer) return Refuse(fd, fmt::format("this agent keeps no {} (it has no store)", op));
    passwd pwd{}, *pw = nullptr;
    std::vector<char> pwbuf(16384);
    if (getpwuid_r(cred.uid, &pwd, pwbuf.data(), pwbuf.size(), &pw) != 0 || pw == nullptr) {
      return Refuse(fd, fmt::format("uid {} has no account", cred.uid));
    }
    auto reply = answer(pw->pw_name, since);
    if (!reply) return Refuse(fd, reply.error().message);
    if (reply->size() > kMaxUsageReply) {
      return Refuse(fd, fmt::format("your {} is over {} bytes; ask root for `bmas {} --user {}`",
                                    op == "usage" ? "usage" : "idle-GPU record", kMaxUsageReply,
                                    op == "usage" ? "usage" : "jobs", pw->pw_name));
    }
    SendMessage(fd, *reply);
  }

  // The caller's own API keys (`bmas key list|create|revoke` as a user): the store is root's,
  // and the socket's peer credentials say whose keys they are.
  void OwnKeys(int fd, const ucred& cred, const std::string& action, const std::string& key_id) {
    if (!o_.own_keys) return Refuse(fd, "this agent keeps no keys (it has no store)");
    passwd pwd{}, *pw = nullptr;
    std::vector<char> pwbuf(16384);
    if (getpwuid_r(cred.uid, &pwd, pwbuf.data(), pwbuf.size(), &pw) != 0 || pw == nullptr) {
      return Refuse(fd, fmt::format("uid {} has no account", cred.uid));
    }
    auto reply = o_.own_keys(pw->pw_name, action, key_id);
    if (!reply) return Refuse(fd, reply.error().message);
    if (action != "list") {
      spdlog::info("bmas agent: {}: key {} {}", pw->pw_name, action, key_id);
    }
    SendMessage(fd, *reply);
  }

  // `job` 0: the caller enters their own workspace (`bmas workspace exec|shell`), no job.
  void Exec(int fd, const ucred& cred, int64_t job, const AgentRequest& request,
            const std::vector<int>& fds) {
    if (fds.size() != 3) return Refuse(fd, "exec needs stdin, stdout and stderr");
    if (cred.uid == 0) {
      // Root's commands are not run by the agent: a job runs on the node, a session uses LXD.
      if (job == 0) return Refuse(fd, "root enters workspaces through LXD (bmas workspace exec)");
      SendMessage(fd, JsonObject([](JsonWriter& w) {
                    Member(w, "plain", "root's jobs run on the node");
                  }));
      return;
    }
    // For a job, the caller must be a process of that very job (its cgroup), run by its user.
    const std::string caller_cgroup = ReadText(fmt::format("/proc/{}/cgroup", cred.pid));
    if (job != 0 && !InSlurmJobCgroup(caller_cgroup, job)) {
      return Refuse(fd, fmt::format("pid {} (uid {}) is not a process of job {}", cred.pid,
                                    cred.uid, job));
    }
    passwd pwd{}, *pw = nullptr;
    std::vector<char> pwbuf(16384);
    if (getpwuid_r(cred.uid, &pwd, pwbuf.data(), pwbuf.size(), &pw) != 0 || pw == nullptr) {
      return Refuse(fd, fmt::format("uid {} has no account", cred.uid));
    }
    const std::string user = pw->pw_name, home = pw->pw_dir;
    if (job != 0) {
      auto owner = o_.job_user(job);
      if (!owner) return Refuse(fd, fmt::format("job {}: {}", job, owner.error().message));
      if (*owner != user) {
        return Refuse(fd, fmt::format("job {} belongs to {}, not {}", job, *owner, user));
      }
    }
    lxd::LxdClient client(o_.lxd_socket, std::chrono::seconds(30));
    const std::string instance = lxd::WorkspaceName(user);
    auto ws = client.GetInstance(instance);
    if (!ws && job == 0) return Refuse(fd, ws.error().message);
    if (!ws) {
      // No workspace (or no LXD): the job runs as a plain Slurm job.
      SendMessage(fd, JsonObject([&](JsonWriter& w) {
                    Member(w, "plain", ws.error().message);
                  }));
      return;
    }
    if (ws->status != lxd::InstanceStatus::kRunning) {
      if (auto started = lxd::StartInstance(client, instance); !started) {
        return Refuse(fd, started.error().message);
      }
    }
    auto init = client.InitPid(instance);
    if (!init) return Refuse(fd, init.error().message);

    WorkspaceSpawn spawn;
    spawn.init = static_cast<pid_t>(*init);
    // A job keeps the node's network (a workspace has none of its own): its ranks reach each
    // other and NCCL the node's NICs, as in a plain Slurm job. A session stays in the
    // workspace's.
    spawn.enter_net = job == 0;
    spawn.uid = pw->pw_uid;
    spawn.gid = pw->pw_gid;
    spawn.home = home;
    // A job's request asks for neither a login nor a terminal (ParseAgentRequest refuses it).
    const bool terminal = request.rows > 0 && request.cols > 0;
    if (request.login) {
      spawn.exec_paths = LoginShells(pw->pw_shell != nullptr ? pw->pw_shell : "");
      spawn.argv = {spawn.exec_paths.front(), "-l"};
      spawn.env = LoginEnvironment(FilterUserEnvironment(request.env), user, home,
                                   spawn.exec_paths.front(), terminal);
    } else {
      spawn.argv = request.argv;
      if (spawn.argv.empty()) return Refuse(fd, "no command");
      for (std::string& e : FilterUserEnvironment(request.env)) {
        if (!e.starts_with("HOME=") && !e.starts_with("USER=") && !e.starts_with("LOGNAME=")) {
          spawn.env.push_back(std::move(e));
        }
      }
      spawn.env.insert(spawn.env.end(), {"HOME=" + home, "USER=" + user, "LOGNAME=" + user});
    }
    // The same directory when it exists inside (the home is the host's, at the same path),
    // else the home: the spawned child falls back itself, after it has entered the workspace.
    spawn.cwd = request.cwd.empty() ? home : request.cwd;
    std::copy(fds.begin(), fds.end(), spawn.stdio.begin());
    std::optional<WorkspaceTerminal> tty;
    if (terminal) {
      auto opened = OpenWorkspaceTerminal(spawn.init, pw->pw_uid, request.rows, request.cols);
      if (!opened) return Refuse(fd, opened.error().message);
      tty = *opened;
      spawn.stdio = {tty->slave, tty->slave, tty->slave};
      spawn.controlling_terminal = true;
    }
    struct TerminalCloser {
      std::optional<WorkspaceTerminal>& t;
      ~TerminalCloser() {
        if (t) {
          close(t->master);
          close(t->slave);
        }
      }
    } tty_closer{tty};
    // A job's processes go into a cgroup of the job's own inside the workspace's, with the
    // job's CPUs and memory; a session's into the workspace's own.
    const std::string init_cgroup = ReadText(fmt::format("/proc/{}/cgroup", *init));
    std::vector<std::string> job_dirs;
    if (job != 0) {
      job_dirs = lxd::JobCgroupDirs(init_cgroup, job);
      auto procs = lxd::MakeJobCgroup(job_dirs, lxd::SlurmJobLimits(caller_cgroup, job));
      if (!procs) return Refuse(fd, procs.error().message);
      spawn.cgroup_procs = std::move(*procs);
    } else {
      for (const std::string& d : lxd::CgroupDirs(init_cgroup)) {
        spawn.cgroup_procs.push_back(d + "/cgroup.procs");
      }
    }
    auto child = SpawnInWorkspace(spawn);
    if (!child) return Refuse(fd, child.error().message);
    {
      std::lock_guard lock(mu_);
      JobRun& run = jobs_[job];
      run.pids.insert(*child);
      run.cgroup = job_dirs;
      if (job != 0) {
        ++running_;
        ++execs_;
      } else {
        ++sessions_;
        ++sessions_total_;
      }
    }
    spdlog::info("bmas agent: job {} of {}: {} runs in {} (pid {})", job, user, spawn.argv[0],
                 instance, *child);
    // With a terminal, its master goes to the caller, who relays it and passes size changes.
    SendMessage(fd, IntReply("started", *child),
                tty ? std::vector<int>{tty->master} : std::vector<int>{});
    if (tty) {
      close(tty->master);
      close(tty->slave);
      tty.reset();
    }
    const std::optional<int> code = WaitOrKill(fd, *child, job_dirs);
    {
      std::lock_guard lock(mu_);
      JobRun& run = jobs_[job];
      run.pids.erase(*child);
      if (run.pids.empty()) jobs_.erase(job);
      --(job != 0 ? running_ : sessions_);
    }
    wake_.notify_all();
    if (code) SendMessage(fd, IntReply("exit", *code));
  }

  // Waits for `child`. When the caller goes away first (Slurm cancelled the job, or its time
  // ran out), kills the job's cgroup (`job_cgroup`), or for a session the child's process group
  // while the child is not yet reaped. Returns its exit code (128 + N for signal N); nullopt
  // when the agent stops first (the command runs on).
  std::optional<int> WaitOrKill(int fd, pid_t child, const std::vector<std::string>& job_cgroup) {
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, child, 0));
    int status = 0;
    while (waitpid(child, &status, WNOHANG) != child) {
      if (Stopping()) {
        if (pidfd >= 0) close(pidfd);
        return std::nullopt;
      }
      pollfd p[2] = {{fd, POLLIN | POLLRDHUP, 0}, {pidfd, POLLIN, 0}};
      if (poll(p, pidfd >= 0 ? 2 : 1, pidfd >= 0 ? 500 : 50) <= 0) continue;
      char byte;
      if ((p[0].revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN)) &&
          recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK) <= 0) {
        if (job_cgroup.empty()) {
          kill(-child, SIGKILL);  // the child is not reaped yet: its group is still its own
        } else if (auto killed = lxd::KillCgroups(job_cgroup, std::chrono::seconds(10)); !killed) {
          spdlog::warn("bmas agent: {}", killed.error().message);
          kill(child, SIGKILL);
        }
        waitpid(child, &status, 0);
        break;
      }
    }
    if (pidfd >= 0) close(pidfd);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // The epilog's request: every process of the job in the workspace, killed through its cgroup.
  void Kill(int fd, int64_t job) {
    std::vector<std::string> dirs;
    {
      std::lock_guard lock(mu_);
      if (auto it = jobs_.find(job); it != jobs_.end()) dirs = it->second.cgroup;
    }
    int count = 0;
    if (!dirs.empty()) {
      auto killed = lxd::KillCgroups(dirs, std::chrono::seconds(10));
      if (!killed) return Refuse(fd, killed.error().message);
      count = *killed;
    }
    std::unique_lock lock(mu_);
    wake_.wait_for(lock, std::chrono::seconds(5), [&] { return !jobs_.contains(job); });
    lock.unlock();
    SendMessage(fd, IntReply("killed", count));
  }

  struct JobRun {
    std::set<pid_t> pids;             // the commands' parents, as SpawnInWorkspace gave them
    std::vector<std::string> cgroup;  // the job's cgroup; empty for sessions (job 0)
  };

  const AgentOptions& o_;
  int listen_fd_ = -1;
  std::thread acceptor_;
  AgentReconciler reconciler_{o_};
  std::unique_ptr<GpuSampler> sampler_;  // with o_.gpus
  std::map<int64_t, std::thread> connections_;  // the acceptor's, then Stop()'s
  int64_t next_connection_ = 0;
  RateLimitedLog accept_log_{*o_.env}, cap_log_{*o_.env}, refuse_log_{*o_.env};
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::vector<int64_t> finished_;  // connections whose thread is done, to be joined
  std::map<uid_t, int> per_uid_;   // open connections per uid
  int open_ = 0;
  std::map<int64_t, JobRun> jobs_;
  int64_t running_ = 0, execs_ = 0, refused_ = 0, over_cap_ = 0;
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
  // Each connection and each command being started holds fds: as many as the system allows.
  // As root the hard limit can be raised too (to fs.nr_open at most).
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0) {
    const rlim_t wanted = kMaxConnections * kFdsPerConnection + 64;
    if (nofile.rlim_max != RLIM_INFINITY && nofile.rlim_max < wanted) {
      rlimit raised{wanted, wanted};
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) nofile = raised;
    }
    if (nofile.rlim_cur < nofile.rlim_max) {
      nofile.rlim_cur = nofile.rlim_max;
      setrlimit(RLIMIT_NOFILE, &nofile);
    }
  }
  Agent agent(options);
  if (auto r = agent.Listen(); !r) {
    fmt::print(stderr, "bmas agent: {}\n", r.error().message);
    return 1;
  }
  net::io_context io(1);
  const bool tls = !options.metrics_cert_pem.empty();
  HttpServerOptions http;
  http.host = tls ? "127.0.0.1" : options.metrics_host;
  http.port = tls ? 0 : options.metrics_port;
  http.server_name = "bmas-agent";
  HttpServer server(io, http, [&](HttpRequest& req, ResponseWriter& w) -> awaitable<void> {
    if (req.target() != "/health") {
      if (!co_await RequireOperator(req, w, options.operator_secret)) co_return;
    }
    if (req.target() == "/metrics") {
      co_await w.Send(http::status::ok, "text/plain; version=0.0.4", agent.Metrics());
    } else if (req.target() == "/gpus") {
      co_await w.Send(http::status::ok, "application/json", agent.GpusJson());
    } else if (req.target() == "/health") {
      co_await w.Send(http::status::ok, "application/json", "{\"status\":\"ok\"}");
    } else {
      co_await w.SendError(http::status::not_found, "no such path: try /metrics, /gpus or /health");
    }
  });
  auto port = server.Listen();
  if (!port) {
    fmt::print(stderr, "bmas agent: {}\n", port.error().message);
    return 1;
  }
  std::unique_ptr<TlsFront> front;
  if (tls) {
    TlsFrontOptions f;
    f.listen_host = options.metrics_host;
    f.listen_port = options.metrics_port;
    f.backend_port = *port;
    f.cert_pem = options.metrics_cert_pem;
    f.key_pem = options.metrics_key_pem;
    f.name = "bmas agent tls";
    f.backend_name = "the agent's metrics listener";
    f.client_timeout = options.io_timeout;
    f.backend_timeout = std::chrono::seconds(10);
    auto listening = TlsFront::Listen(std::move(f));
    if (!listening) {
      fmt::print(stderr, "bmas agent: metrics over TLS on {}: {}\n",
                 JoinHostPort(options.metrics_host, options.metrics_port),
                 listening.error().message);
      return 1;
    }
    front = std::move(*listening);
  }
  agent.Start();
  server.Start();
  std::thread front_thread;
  if (front) front_thread = std::thread([&front] { front->Run(); });
  fmt::print("bmas agent: socket {}; metrics listening on {}://{}\n", options.socket,
             front ? "https" : "http",
             JoinHostPort(options.metrics_host, front ? front->port() : *port));
  std::fflush(stdout);
  ServeUntilSignalled(io, server, std::chrono::seconds(2), "bmas agent");
  if (front) {
    front->Stop();
    front_thread.join();
  }
  agent.Stop();
  return 0;
}

}  // namespace bmas
