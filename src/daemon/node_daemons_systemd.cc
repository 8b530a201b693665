#include "daemon/node_daemons_systemd.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/agent.h"
#include "daemon/node_daemons.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

constexpr const char* kDropIn = "bmas-join.conf";

// The unit that runs a join's daemon (cluster::kJoinDaemons).
std::string UnitOf(const std::string& daemon) {
  if (daemon == "munged") return "munge.service";
  if (daemon == "slurmd") return "slurmd.service";
  return "bmas-agent.service";
}

// One argument of an ExecStart= line: quoted when it holds a space, quote or backslash.
std::string ExecArg(const std::string& arg) {
  if (arg.find_first_of(" \t\"\\'") == std::string::npos && !arg.empty()) return arg;
  std::string quoted = "\"";
  for (char c : arg) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"";
}

std::string ExecLine(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& a : argv) line += (line.empty() ? "" : " ") + ExecArg(a);
  return line;
}

class SystemdNodeDaemons final : public cluster::NodeDaemons {
 public:
  SystemdNodeDaemons(SystemctlRunner run, std::string unit_dir, std::string bmas_binary)
      : run_(std::move(run)),
        unit_dir_(std::move(unit_dir)),
        bmas_(std::move(bmas_binary)),
        processes_(NewProcessNodeDaemons(bmas_)) {}

  bool MungeRunning() override {
    auto r = RunCommand({"munge", "-n"}, {}, std::chrono::seconds(5));
    return r && r->exit_code == 0;
  }

  Result<void> StartMunge(const cluster::NodePaths& p) override {
    return Enable("munged", fmt::format("[Service]\nEnvironment=OPTIONS=--key-file={}\n",
                                        ExecArg(p.munge_key)),
                  [this] { return MungeRunning(); });
  }

  bool SlurmdRunning(const cluster::NodePaths&) override { return Active("slurmd"); }

  Result<void> StartSlurmd(const cluster::NodePaths&, const std::vector<std::string>& args,
                           const std::string& conf_cache) override {
    std::vector<std::string> argv = {"/usr/sbin/slurmd", "-s"};
    argv.insert(argv.end(), args.begin(), args.end());
    // ExecStart= empty first: a drop-in replaces the unit's command rather than adding one.
    const std::string unit = fmt::format(
        "# Written by `bmas node join`: slurmd configless, its configuration from the "
        "controller.\n[Unit]\nConditionPathExists=\n[Service]\nExecStart=\nExecStart={}\n",
        ExecLine(argv));
    return Enable("slurmd", unit, [&] { return fs::exists(conf_cache); });
  }

  bool AgentRunning(const cluster::NodePaths&) override { return Active("agent"); }

  Result<void> StartAgent(const cluster::NodePaths& p, const std::string& config) override {
    const std::string socket = AgentSocketPath(p.state_dir);
    const std::string unit = fmt::format(
        "# Written by `bmas node join`: the join's bmas.toml and state dir.\n[Service]\n"
        "Environment=BMAS_STATE_DIR={}\nExecStart=\nExecStart={}\n",
        ExecArg(p.state_dir),
        ExecLine({bmas_, "--config", config, "--state-dir", p.state_dir, "agent"}));
    return Enable("agent", unit, [&] { return AgentSocketAnswers(socket); });
  }

  // LXD is `bmas lxd up`'s, as without systemd, and so is the image.
  Result<std::string> StartLxd(const cluster::NodePaths& p, const std::string& config) override {
    return processes_->StartLxd(p, config);
  }
  Result<std::string> ImportDefaultImage(const cluster::NodePaths& p,
                                         const std::string& config) override {
    return processes_->ImportDefaultImage(p, config);
  }

  void StopStarted() override {
    for (auto it = started_.rbegin(); it != started_.rend(); ++it) Disable(*it);
    started_.clear();
    processes_->StopStarted();
  }

  Result<bool> StopJoined(const cluster::NodePaths&, const std::string& daemon) override {
    if (!fs::exists(DropIn(daemon))) return false;  // not the join's: left alone
    const bool was_active = Active(daemon);
    if (auto r = Disable(daemon); !r) return r.error();
    return was_active;
  }

 private:
  std::string DropIn(const std::string& daemon) const {
    return (fs::path(unit_dir_) / (UnitOf(daemon) + ".d") / kDropIn).string();
  }

  bool Active(const std::string& daemon) {
    auto r = run_({"systemctl", "is-active", "--quiet", UnitOf(daemon)});
    return r && r->exit_code == 0;
  }

  Result<void> Systemctl(const std::vector<std::string>& args, const std::string& daemon) {
    std::vector<std::string> argv = {"systemctl"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_(argv);
    if (!r) return r.error();
    if (r->exit_code != 0) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("`{}` failed ({}): see `systemctl status {}` and `journalctl -u {}`",
                               fmt::join(argv, " "), r->err.empty() ? r->out : r->err,
                               UnitOf(daemon), UnitOf(daemon)),
                   {}};
    }
    return {};
  }

  // Writes the daemon's drop-in, reloads systemd, enables and starts the unit, and waits until
  // `ready` (20 s).
  Result<void> Enable(const std::string& daemon, const std::string& drop_in,
                      const std::function<bool()>& ready) {
    const std::string path = DropIn(daemon);
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    std::ofstream out(path, std::ios::trunc);
    out << drop_in;
    out.close();
    if (!out) return Internal(fmt::format("cannot write {}: check that root may", path));
    ::chmod(path.c_str(), 0644);
    started_.push_back(daemon);
    if (auto r = Systemctl({"daemon-reload"}, daemon); !r) return r;
    if (auto r = Systemctl({"enable", "--now", UnitOf(daemon)}, daemon); !r) return r;
    if (!WaitFor(ready, 0, std::chrono::seconds(20))) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("{} started but is not ready after 20 s: see `journalctl -u {}`",
                               UnitOf(daemon), UnitOf(daemon)),
                   {}};
    }
    return {};
  }

  Result<void> Disable(const std::string& daemon) {
    auto stopped = Systemctl({"disable", "--now", UnitOf(daemon)}, daemon);
    std::error_code ec;
    fs::remove(DropIn(daemon), ec);
    fs::remove(fs::path(DropIn(daemon)).parent_path(), ec);  // only when empty
    Systemctl({"daemon-reload"}, daemon);
    return stopped;
  }

  SystemctlRunner run_;
  std::string unit_dir_;
  std::string bmas_;
  std::unique_ptr<cluster::NodeDaemons> processes_;
  std::vector<std::string> started_;
};

}  // namespace

std::unique_ptr<cluster::NodeDaemons> NewSystemdNodeDaemons(SystemctlRunner run,
                                                            std::string unit_dir,
                                                            std::string bmas_binary) {
  return std::make_unique<SystemdNodeDaemons>(std::move(run), std::move(unit_dir),
                                              std::move(bmas_binary));
}

bool SystemdRunsBmasUnits() {
  std::error_code ec;
  if (!fs::is_directory("/run/systemd/system", ec)) return false;
  for (const char* dir : {"/etc/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system"}) {
    if (fs::exists(fs::path(dir) / "bmas-agent.service", ec)) return true;
  }
  return false;
}

}  // namespace bmas
