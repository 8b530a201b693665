// The test bed's namespaces: building them (the bed, its bridge, one namespace per host with
// its address, host name and mounts), running commands and daemons in a host, the record of
// what runs (bed.json), and the teardown, which ends every process in the bed's namespaces.
// Slurm on the bed is in net_bed_slurm.cc.

#include "net_bed.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <pwd.h>
#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "slurm/local_cluster.h"
#include "slurm/local_cluster_internal.h"

namespace bmas::testbed {
namespace {

namespace fs = std::filesystem;
using slurm::internal::MakeDir;
using slurm::internal::WriteFile;

// What /proc/PID/ns/KIND links to ("net:[4026532178]"); "" when the process is gone.
std::string NamespaceOf(pid_t pid, const char* kind) {
  std::error_code ec;
  return fs::read_symlink(fmt::format("/proc/{}/ns/{}", pid, kind), ec).string();
}

// The processes in any of `namespaces` (network or mount).
std::vector<pid_t> ProcessesIn(const std::set<std::string>& namespaces) {
  std::vector<pid_t> pids;
  if (namespaces.empty()) return pids;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), ::isdigit)) continue;
    const pid_t pid = std::atoi(name.c_str());
    if (pid == getpid()) continue;
    if (!namespaces.contains(NamespaceOf(pid, "net")) &&
        !namespaces.contains(NamespaceOf(pid, "mnt"))) {
      continue;
    }
    if (ProcessRunning(pid)) pids.push_back(pid);
  }
  return pids;
}

std::string Describe(pid_t pid) {
  std::ifstream comm(fmt::format("/proc/{}/comm", pid));
  std::string name;
  std::getline(comm, name);
  return fmt::format("process {} ({})", pid, name);
}

// Ends `daemons` (SIGTERM, newest first) and then, with SIGKILL, every other process in the
// namespaces of `all` that still run. Returns what is left. It holds the namespaces open while
// it works: the kernel gives a freed namespace's number to the next new one (another bed's,
// say), and a number read again must still name the same namespace.
std::vector<std::string> EndAll(const std::vector<DaemonProcess>& daemons,
                                const std::vector<DaemonProcess>& all) {
  std::set<std::string> namespaces;
  std::vector<int> held;
  for (const DaemonProcess& d : all) {
    if (!d.Runs()) continue;  // a pid recorded by a run long gone may be anyone's now
    for (const char* kind : {"net", "mnt"}) {
      const int fd = open(fmt::format("/proc/{}/ns/{}", d.pid, kind).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      held.push_back(fd);
      namespaces.insert(NamespaceOf(d.pid, kind));
    }
  }
  namespaces.erase("");
  for (auto it = daemons.rbegin(); it != daemons.rend(); ++it) {
    (void)StopDaemonProcess(*it, std::chrono::seconds(5));  // what resists gets SIGKILL below
  }
  std::vector<std::string> left;
  for (int round = 0; round < 200; ++round) {
    const std::vector<pid_t> in = ProcessesIn(namespaces);
    if (in.empty()) break;
    for (pid_t pid : in) kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (pid_t pid : ProcessesIn(namespaces)) left.push_back(Describe(pid));
  for (int fd : held) close(fd);
  return left;
}

// Mount points of this mount namespace at or below `dir`.
std::vector<std::string> MountsAt(const std::string& dir) {
  std::ifstream mounts("/proc/self/mounts");
  std::vector<std::string> at;
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream words(line);
    std::string device, point;
    words >> device >> point;
    if (point == dir || point.starts_with(dir + "/")) at.push_back(point);
  }
  return at;
}

std::string FileName(std::string name) {
  std::replace(name.begin(), name.end(), ' ', '-');
  return name;
}

std::string Tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "  " + all[i] + "\n";
  }
  return out;
}

Result<void> Check(const Result<CommandOutput>& r, const std::vector<std::string>& args) {
  if (!r) return r.error();
  if (r->exit_code != 0) {
    std::string line;
    for (const std::string& a : args) line += (line.empty() ? "" : " ") + a;
    return Internal(fmt::format("`{}` failed ({}): {}", line, r->exit_code, r->err + r->out));
  }
  return {};
}

// Waits until `d` has exec'd `sleep`: only then do its namespaces exist.
Result<void> AwaitHolder(const DaemonProcess& d) {
  if (!WaitFor([&] { return ProcessRunning(d.pid, "sleep"); }, d.pid, std::chrono::seconds(10))) {
    return Internal(fmt::format("{} did not start; its output {} ends with:\n{}", d.name, d.log,
                                Tail(d.log, 10)));
  }
  return {};
}

}  // namespace

std::vector<std::string> CleanBed(const std::string& dir) {
  std::vector<std::string> left;
  std::ifstream in(dir + "/bed.json");
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    rapidjson::Document d;
    d.Parse(text.str().c_str());
    std::vector<DaemonProcess> daemons, all;
    auto read = [&](const rapidjson::Value& list, std::vector<DaemonProcess>& into) {
      if (!list.IsArray()) return;
      for (const auto& e : list.GetArray()) {
        if (auto p = ReadDaemonProcess(e); p) into.push_back(*p);
      }
    };
    if (!d.HasParseError() && d.IsObject()) {
      if (d.HasMember("daemons")) read(d["daemons"], daemons);
      if (d.HasMember("holders")) read(d["holders"], all);
    }
    all.insert(all.end(), daemons.begin(), daemons.end());
    left = EndAll(daemons, all);
  }
  if (!left.empty()) return left;
  if (std::vector<std::string> mounts = MountsAt(dir); !mounts.empty()) {
    for (const std::string& m : mounts) left.push_back("mount " + m);
    return left;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) left.push_back(fmt::format("{} (cannot remove: {})", dir, ec.message()));
  return left;
}

Result<void> NetBed::Start(const BedOptions& options) {
  if (geteuid() != 0) return Error{ErrorCode::kUnavailable, "the test bed needs root"};
  for (const char* tool : {"/usr/bin/unshare", "/usr/bin/nsenter", "/usr/sbin/ip"}) {
    if (access(tool, X_OK) != 0) {
      return Error{
          ErrorCode::kUnavailable,
          fmt::format("the test bed needs {}: apt-get install -y util-linux iproute2", tool)};
    }
  }
  if (options.nodes < 1 || options.nodes > 89) {
    return InvalidArgument("a test bed has 1 to 89 nodes (10.200.0.11 to .99)");
  }
  options_ = options;
  dir_ = "/tmp/bmas-netbed-" + slurm::LocalClusterId((fs::current_path() / options.name).string());
  if (std::vector<std::string> left = CleanBed(dir_); !left.empty()) {
    std::string list;
    for (const std::string& l : left) list += "\n  " + l;
    return Error{ErrorCode::kUnavailable,
                 fmt::format("a test bed left in {} could not be cleaned up:{}", dir_, list)};
  }
  for (const char* sub : {"", "/log", "/etc", "/node", "/nodes"}) {
    if (auto r = MakeDir(dir_ + sub, 0755); !r) return r;
  }
  std::string hosts = "127.0.0.1 localhost\n";
  std::vector<std::pair<std::string, std::string>> names = {{kController, "10.200.0.1"}};
  for (int i = 1; i <= options.nodes; ++i) {
    names.emplace_back(fmt::format("oss{:02}", i), fmt::format("10.200.0.{}", 10 + i));
  }
  for (const auto& [name, address] : names) hosts += address + " " + name + "\n";
  if (auto r = WriteFile(dir_ + "/etc/hosts", hosts, 0644); !r) return r;

  // The bed: a network namespace with nothing but loopback, and a mount namespace whose mounts
  // never reach this host's.
  auto root = StartDaemonProcess(
      "bed", "sleep",
      {"unshare", "--net", "--mount", "--propagation", "private", "sleep", "infinity"}, {},
      dir_ + "/log/bed.out");
  if (!root) return root.error();
  root_ = *root;
  if (auto r = Save(); !r) return r;
  if (auto r = AwaitHolder(root_); !r) return r;
  for (const char* kind : {"net", "mnt"}) namespaces_.push_back(NamespaceOf(root_.pid, kind));
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"ip", "link", "set", "lo", "up"},
           {"ip", "link", "add", "br0", "type", "bridge"},
           {"ip", "link", "set", "br0", "up"},
           {"mount", "--bind", dir_ + "/etc/hosts", "/etc/hosts"}}) {
    if (auto r = InRoot(args); !r) return r;
  }
  for (size_t i = 0; i < names.size(); ++i) {
    if (auto r = MakeHost(names[i].first, names[i].second, static_cast<int>(i)); !r) return r;
  }
  return {};
}

Result<void> NetBed::MakeHost(const std::string& name, const std::string& address, int index) {
  const std::string own = dir_ + "/nodes/" + name;
  for (const auto& [sub, mode] : std::vector<std::pair<std::string, mode_t>>{{"", 0755},
                                                                             {"/etc-slurm", 0755},
                                                                             {"/log", 0755},
                                                                             {"/run", 0755},
                                                                             {"/spool", 0755},
                                                                             {"/state", 0700},
                                                                             {"/tmp", 01777}}) {
    if (auto r = MakeDir(own + sub, mode); !r) return r;
  }
  // Network, mount and UTS namespaces of its own, made inside the bed's.
  auto holder =
      StartDaemonProcess("host " + name, "sleep",
                         {"nsenter", "-t", std::to_string(root_.pid), "--net", "--mount", "--",
                          "unshare", "--net", "--mount", "--uts", "--propagation", "private",
                          "/bin/sh", "-c", "hostname \"$0\" && exec sleep infinity", name},
                         {}, dir_ + "/log/host-" + name + ".out");
  if (!holder) return holder.error();
  hosts_.push_back(BedHost{name, address, fmt::format("vb{}", index), *holder});
  const BedHost& h = hosts_.back();
  if (auto r = Save(); !r) return r;
  if (auto r = AwaitHolder(h.holder); !r) return r;
  for (const char* kind : {"net", "mnt"}) namespaces_.push_back(NamespaceOf(h.holder.pid, kind));

  // A veth pair: one end on the bridge, the other the host's eth0.
  const std::string& bridge_end = h.bridge_link;
  const std::string host_end = fmt::format("vh{}", index);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"ip", "link", "add", bridge_end, "type", "veth", "peer", "name", host_end},
           {"ip", "link", "set", bridge_end, "master", "br0"},
           {"ip", "link", "set", bridge_end, "up"},
           {"ip", "link", "set", host_end, "netns", std::to_string(h.holder.pid)}}) {
    if (auto r = InRoot(args); !r) return r;
  }
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"ip", "link", "set", "lo", "up"},
                                             {"ip", "link", "set", host_end, "name", "eth0"},
                                             {"ip", "addr", "add", address + "/24", "dev", "eth0"},
                                             {"ip", "link", "set", "eth0", "up"}}) {
    if (auto r = InHost(h, "--net", args); !r) return r;
  }
  // Its own /run (munge's socket), its own files where slurm.conf's paths point, its own
  // /etc/slurm (empty on a node: configless slurmd fetches what it needs).
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"mount", "-t", "tmpfs", "-o", "mode=755", "bmas-netbed", "/run"},
           {"mount", "--bind", own, dir_ + "/node"},
           {"mount", "--bind", own + "/etc-slurm", "/etc/slurm"}}) {
    if (auto r = InHost(h, "--mount", args); !r) return r;
  }
  return {};
}

Result<void> NetBed::InRoot(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"nsenter", "-t",      std::to_string(root_.pid),
                                   "--net",   "--mount", "--"};
  argv.insert(argv.end(), args.begin(), args.end());
  return Check(RunCommand(argv, {}, std::chrono::seconds(10)), argv);
}

Result<void> NetBed::InHost(const BedHost& h, const std::string& ns,
                            const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {"nsenter", "-t", std::to_string(h.holder.pid), ns, "--"};
  argv.insert(argv.end(), args.begin(), args.end());
  return Check(RunCommand(argv, {}, std::chrono::seconds(10)), argv);
}

Result<void> NetBed::SetLink(const std::string& host, LinkEnd end, bool up) {
  const BedHost* h = Host(host);
  if (h == nullptr) return InvalidArgument("the test bed has no host " + host);
  const char* state = up ? "up" : "down";
  if (end == LinkEnd::kBridge) return InRoot({"ip", "link", "set", h->bridge_link, state});
  // Up again, eth0 gets back the route of its address's subnet, its only route.
  return InHost(*h, "--net", {"ip", "link", "set", "eth0", state});
}

Result<void> NetBed::CutLink(const std::string& host, LinkEnd end) {
  return SetLink(host, end, false);
}

Result<void> NetBed::RestoreLink(const std::string& host, LinkEnd end) {
  return SetLink(host, end, true);
}

const BedHost* NetBed::Host(const std::string& name) const {
  for (const BedHost& h : hosts_) {
    if (h.name == name) return &h;
  }
  return nullptr;
}

std::vector<std::string> NetBed::NodeNames() const {
  std::vector<std::string> names;
  for (const BedHost& h : hosts_) {
    if (h.name != kController) names.push_back(h.name);
  }
  return names;
}

Result<CommandOutput> NetBed::Run(const std::string& host, const std::vector<std::string>& args,
                                  const std::string& user, std::chrono::seconds timeout) const {
  const BedHost* h = Host(host);
  if (h == nullptr) return InvalidArgument("the test bed has no host " + host);
  std::vector<std::string> argv = {"nsenter",   "-t",      std::to_string(h->holder.pid),
                                   "--net",     "--mount", "--uts",
                                   "--wd=/tmp", "--"};
  if (!user.empty()) {
    const passwd* pw = getpwnam(user.c_str());
    if (pw == nullptr) return InvalidArgument("there is no user " + user);
    argv.insert(argv.end(), {"setpriv", fmt::format("--reuid={}", pw->pw_uid),
                             fmt::format("--regid={}", pw->pw_gid), "--init-groups"});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, {}, timeout);
}

Result<DaemonProcess> NetBed::StartDaemon(const std::string& host, const std::string& name,
                                          const std::string& comm,
                                          const std::vector<std::string>& args,
                                          const std::vector<std::string>& env) {
  const BedHost* h = Host(host);
  if (h == nullptr) return InvalidArgument("the test bed has no host " + host);
  std::vector<std::string> argv = {
      "nsenter", "-t", std::to_string(h->holder.pid), "--net", "--mount", "--uts", "--"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto d = StartDaemonProcess(name, comm, argv, env, dir_ + "/log/" + FileName(name) + ".out");
  if (!d) return d.error();
  daemons_.push_back(*d);
  if (auto r = Save(); !r) return r.error();
  return d;
}

std::string NetBed::LogTail(const std::string& name, size_t lines) const {
  return Tail(dir_ + "/log/" + FileName(name) + ".out", lines);
}

Result<void> NetBed::Save() const {
  rapidjson::StringBuffer buf;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
  w.StartObject();
  w.Key("holders");
  w.StartArray();
  if (root_.pid > 0) WriteDaemonProcess(w, root_);
  for (const BedHost& h : hosts_) WriteDaemonProcess(w, h.holder);
  w.EndArray();
  w.Key("daemons");
  w.StartArray();
  for (const DaemonProcess& d : daemons_) WriteDaemonProcess(w, d);
  w.EndArray();
  w.EndObject();
  return WriteFile(dir_ + "/bed.json", std::string(buf.GetString()) + "\n", 0644);
}

void NetBed::Stop() {
  if (dir_.empty() || stopped_) return;
  const std::vector<std::string> lxd_left = StopLxdInstances();
  std::vector<DaemonProcess> all = daemons_;
  if (root_.pid > 0) all.push_back(root_);
  for (const BedHost& h : hosts_) all.push_back(h.holder);
  left_ = EndAll(daemons_, all);
  left_.insert(left_.end(), lxd_left.begin(), lxd_left.end());
  stopped_ = true;
  if (!left_.empty()) return;
  for (const std::string& m : MountsAt(dir_)) left_.push_back("mount " + m);
  if (!left_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
  if (ec) left_.push_back(fmt::format("{} (cannot remove: {})", dir_, ec.message()));
}

std::vector<std::string> NetBed::Leftovers() const {
  std::vector<std::string> left = left_;
  // Before Stop, the bed's processes hold its namespaces; after it, their numbers may name
  // others' (Stop's own check, made while it held them, is in left_).
  if (!stopped_) {
    const std::set<std::string> namespaces(namespaces_.begin(), namespaces_.end());
    for (pid_t pid : ProcessesIn(namespaces)) left.push_back(Describe(pid));
  }
  for (const std::string& m : MountsAt(dir_)) left.push_back("mount " + m);
  std::error_code ec;
  if (fs::exists(dir_, ec)) left.push_back("directory " + dir_);
  std::sort(left.begin(), left.end());
  left.erase(std::unique(left.begin(), left.end()), left.end());
  return left;
}

}  // namespace bmas::testbed
