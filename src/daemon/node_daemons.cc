#include "daemon/node_daemons.h"

#include <fmt/format.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "agent/agent.h"
#include "autoscale/controller.h"
#include "common/process.h"
#include "common/config.h"
#include "common/config_table.h"
#include "daemon/service_account.h"
#include "lxd/image_build.h"
#include "lxd/local_lxd.h"
#include "lxd/lxd_client.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

std::string In(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// The name a daemon's process has in /proc (what ProcessRunning compares).
std::string CommOf(const std::string& daemon) {
  if (daemon == "agent") return "bmas";
  return daemon;
}

// The last lines of a daemon's output, for an error that says why it did not start.
std::string OutputTail(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > 3) lines.erase(lines.begin());
  }
  std::string tail;
  for (const std::string& l : lines) tail += (tail.empty() ? "" : " | ") + l;
  return tail.empty() ? "no output" : tail;
}

class ProcessNodeDaemons final : public cluster::NodeDaemons {
 public:
  explicit ProcessNodeDaemons(std::string bmas_binary) : bmas_binary_(std::move(bmas_binary)) {}

  bool MungeRunning() override {
    auto r = RunCommand({"munge", "-n"}, {}, std::chrono::seconds(5));
    return r && r->exit_code == 0;
  }

  Result<void> StartMunge(const cluster::NodePaths& p) override {
    const passwd* pw = getpwnam("munge");
    if (pw == nullptr) return NotFound("there is no `munge` account: install munge");
    std::error_code ec;
    fs::create_directories(p.munge_run_dir, ec);
    if (ec || chown(p.munge_run_dir.c_str(), pw->pw_uid, pw->pw_gid) != 0 ||
        chmod(p.munge_run_dir.c_str(), 0755) != 0) {
      return Internal(fmt::format("cannot make {} munge's: check that it is a directory root "
                                  "may change",
                                  p.munge_run_dir));
    }
    auto child = SpawnDetached(
        {"setpriv", fmt::format("--reuid={}", pw->pw_uid), fmt::format("--regid={}", pw->pw_gid),
         "--clear-groups", "/usr/sbin/munged", "--foreground", "--key-file=" + p.munge_key,
         "--pid-file=" + In(p.munge_run_dir, "munged.pid"),
         "--log-file=" + In(p.munge_run_dir, "munged.log"),
         "--seed-file=" + In(p.munge_run_dir, "munged.seed")},
        {}, In(p.run_dir, "munged.out"));
    if (!child) return child.error();
    if (!WaitFor([&] { return MungeRunning(); }, child->pid, std::chrono::seconds(10))) {
      StopProcess(child->pid, "", std::chrono::seconds(2), child->start_ticks);
      return Internal(fmt::format("munged did not start: see {}", In(p.run_dir, "munged.out")));
    }
    Started(p, "munged", *child);
    return {};
  }

  bool SlurmdRunning(const cluster::NodePaths& p) override { return Recorded(p, "slurmd"); }

  Result<void> StartSlurmd(const cluster::NodePaths& p, const std::vector<std::string>& args,
                           const std::string& conf_cache) override {
    std::vector<std::string> argv = {"/usr/sbin/slurmd"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto child = SpawnDetached(argv, {}, In(p.run_dir, "slurmd.out"));
    if (!child) return child.error();
    Started(p, "slurmd", *child);
    if (!WaitFor([&] { return fs::exists(conf_cache); }, child->pid, std::chrono::seconds(20))) {
      return Internal(
          fmt::format("slurmd did not get its configuration from the controller "
                      "({} is missing): see {}",
                      conf_cache, In(p.run_dir, "slurmd.out")));
    }
    return {};
  }

  bool AgentRunning(const cluster::NodePaths& p) override { return Recorded(p, "agent"); }

  Result<void> StartAgent(const cluster::NodePaths& p, const std::string& config) override {
    const std::string socket = AgentSocketPath(p.state_dir);
    auto child = SpawnDetached(
        {bmas_binary_, "--config", config, "--state-dir", p.state_dir, "agent"}, {},
        In(p.run_dir, "agent.out"));
    if (!child) return child.error();
    Started(p, "agent", *child);
    if (!WaitFor([&] { return AgentSocketAnswers(socket); }, child->pid, std::chrono::seconds(20))) {
      return Internal(fmt::format("the agent does not answer on {} (its output, {}: {})", socket,
                                  In(p.run_dir, "agent.out"),
                                  OutputTail(In(p.run_dir, "agent.out"))));
    }
    return {};
  }

  Result<std::string> StartLxd(const cluster::NodePaths& p, const std::string& config) override {
    // `bmas lxd up` itself: it starts what is missing, records it in the state dir, undoes its
    // own steps on a failure, and applies <node_dir>/lxd-peers/ to LXD's trust store.
    auto r = RunCommand({bmas_binary_, "--config", config, "--state-dir", p.state_dir, "lxd", "up"},
                        {}, std::chrono::seconds(180));
    if (!r) return r.error();
    if (r->exit_code != 0) {
      return Internal(fmt::format("`bmas --config {} lxd up` failed (exit {}): {}", config,
                                  r->exit_code, r->err.empty() ? r->out : r->err));
    }
    return r->out;
  }

  Result<std::string> ImportDefaultImage(const cluster::NodePaths& p,
                                         const std::string& config) override {
    Config c;
    try {
      c = LoadConfig(config);
    } catch (const ConfigError& e) {
      return InvalidArgument(e.what());
    }
    lxd::LxdClient client(lxd::SocketPath(c.lxd), std::chrono::seconds(600));
    auto held = lxd::ImageByAlias(client, lxd::kDefaultImageAlias);
    if (!held) return held.error();
    if (*held) return fmt::format("{} is in LXD already", lxd::kDefaultImageAlias);
    const std::string cached = In(p.image_cache, lxd::CachedImageName("minimal"));
    std::error_code ec;
    if (!fs::is_regular_file(cached, ec)) {
      return NotFound(fmt::format(
          "{} is not here: copy it from the controller's {} (or run `bmas image build`, which "
          "runs debootstrap for minutes), then `bmas node join TOKEN` again",
          cached, lxd::kImageCacheDir));
    }
    auto built = lxd::EnsureDefaultImage(client, p.run_dir, p.image_cache, Env::Default());
    if (!built) return built.error();
    return fmt::format("imported {} from {} in {:.1f} s", lxd::kDefaultImageAlias, cached,
                       built->seconds);
  }

  void StopStarted() override {
    for (auto it = started_.rbegin(); it != started_.rend(); ++it) {
      StopProcess(it->child.pid, "", std::chrono::seconds(5), it->child.start_ticks);
      ::unlink(it->record.c_str());
    }
    started_.clear();
  }

  Result<bool> StopJoined(const cluster::NodePaths& p, const std::string& daemon) override {
    const std::string record = In(p.run_dir, daemon + ".pid");
    auto child = ReadRecord(record);
    if (!child) return false;
    bool stopped = false;
    if (ProcessRunning(child->pid, CommOf(daemon), child->start_ticks)) {
      if (!StopProcess(child->pid, CommOf(daemon), std::chrono::seconds(10), child->start_ticks)) {
        return Error{ErrorCode::kUnavailable,
                     fmt::format("{} (pid {}) did not stop within 10 s of SIGTERM and SIGKILL: "
                                 "see what holds it (`cat /proc/{}/stack`), then run `bmas node "
                                 "leave` again",
                                 daemon, child->pid, child->pid),
                     {}};
      }
      stopped = true;
    }
    ::unlink(record.c_str());
    return stopped;
  }

 private:
  struct Start {
    DetachedChild child;
    std::string record;
  };

  static std::optional<DetachedChild> ReadRecord(const std::string& path) {
    std::ifstream in(path);
    long pid = 0;
    unsigned long long ticks = 0;
    if (!(in >> pid >> ticks) || pid <= 0) return std::nullopt;
    return DetachedChild{static_cast<pid_t>(pid), ticks};
  }

  bool Recorded(const cluster::NodePaths& p, const std::string& daemon) const {
    auto child = ReadRecord(In(p.run_dir, daemon + ".pid"));
    return child && ProcessRunning(child->pid, CommOf(daemon), child->start_ticks);
  }

  void Started(const cluster::NodePaths& p, const std::string& daemon, const DetachedChild& c) {
    const std::string record = In(p.run_dir, daemon + ".pid");
    std::ofstream(record, std::ios::trunc) << c.pid << ' ' << c.start_ticks << '\n';
    started_.push_back({c, record});
  }

  std::string bmas_binary_;
  std::vector<Start> started_;
};

class CommandNodeSlurm final : public cluster::NodeSlurm {
 public:
  Result<cluster::NodeInSlurm> Look(const std::string& slurm_conf,
                                    const std::string& host) override {
    const std::vector<std::string> env = {"SLURM_CONF=" + slurm_conf};
    cluster::NodeInSlurm seen;
    auto show = RunCommand({"scontrol", "-o", "show", "node", host}, env, std::chrono::seconds(15));
    if (!show) return show.error();
    if (show->exit_code != 0) {
      const std::string said = show->err + show->out;
      if (said.find("not found") != std::string::npos) return seen;
      return Error{ErrorCode::kUnavailable,
                   fmt::format("scontrol show node {}: {}", host, said), {}};
    }
    seen.known = true;
    const size_t at = show->out.find(" State=");
    const std::string state =
        at == std::string::npos ? "" : show->out.substr(at + 7, show->out.find(' ', at + 7) - at - 7);
    seen.drained = state.find("DRAIN") != std::string::npos;
    seen.dynamic = state.find("DYNAMIC") != std::string::npos;
    auto queue = RunCommand({"squeue", "-h", "-w", host, "-t", "R,CG,S", "-o", "%u|%j"}, env,
                            std::chrono::seconds(15));
    if (!queue) return queue.error();
    if (queue->exit_code != 0) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("squeue -w {}: {}", host, queue->err + queue->out), {}};
    }
    std::istringstream lines(queue->out);
    for (std::string line; std::getline(lines, line);) {
      const size_t bar = line.find('|');
      if (bar == std::string::npos) continue;
      ++seen.jobs;
      if (line.substr(0, bar) == kServiceAccount &&
          autoscale::ParseReplicaJobName(line.substr(bar + 1))) {
        ++seen.replicas;
      }
    }
    return seen;
  }

  Result<void> Delete(const std::string& slurm_conf, const std::string& host) override {
    auto r = RunCommand({"scontrol", "delete", "nodename=" + host}, {"SLURM_CONF=" + slurm_conf},
                        std::chrono::seconds(15));
    if (!r) return r.error();
    if (r->exit_code != 0) {
      return Error{ErrorCode::kUnavailable, fmt::format("scontrol: {}", r->err + r->out), {}};
    }
    return {};
  }
};

}  // namespace

// Whether something accepts connections on the unix socket at `path` (the agent's protocol is
// SOCK_SEQPACKET).
bool AgentSocketAnswers(const std::string& path) {
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return false;
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

std::unique_ptr<cluster::NodeDaemons> NewProcessNodeDaemons(const std::string& bmas_binary) {
  return std::make_unique<ProcessNodeDaemons>(bmas_binary);
}

std::unique_ptr<cluster::NodeSlurm> NewCommandNodeSlurm() {
  return std::make_unique<CommandNodeSlurm>();
}

}  // namespace bmas
