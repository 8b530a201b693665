#include "slurm/local_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <spdlog/spdlog.h>

#include "common/config_table.h"
#include "common/process.h"
#include "core/job_shape.h"
#include "slurm/slurm_config.h"

namespace bmas::slurm {

extern const char kBuiltinLocalClusterToml[];

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kInstallHint =
    "apt-get install -y --no-install-recommends slurm-wlm slurmctld slurmd slurmrestd "
    "slurm-client slurm-wlm-jwt-plugin munge";
constexpr int kNvidiaMajor = 195;  // the NVIDIA driver's character device major

// FNV-1a: stable across runs and builds, unlike std::hash.
uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Binds (`connect` false) or connects to 127.0.0.1:`port`; true when that succeeds.
bool TryLoopback(int port, bool connect) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto* a = reinterpret_cast<const sockaddr*>(&addr);
  bool ok = (connect ? ::connect(fd, a, sizeof addr) : bind(fd, a, sizeof addr)) == 0;
  close(fd);
  return ok;
}

bool PortFree(int port) { return TryLoopback(port, /*connect=*/false); }
bool PortAccepts(int port) { return TryLoopback(port, /*connect=*/true); }

// The first port the kernel hands out for outgoing connections (32768 by default).
int FirstEphemeralPort() {
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  return range >> low ? low : 32768;
}

// A block of `count` free ports, starting where the state dir's hash points and moving on
// when something else holds one of them. The blocks lie below the ephemeral range where it
// leaves room: a port found free there could otherwise be taken by any outgoing connection
// before the daemon binds it (seen: slurmctld's "Address already in use").
Result<int> PickBasePort(const std::string& state_dir, int count) {
  constexpr int kFirst = 20000, kStride = 16;
  int blocks = (FirstEphemeralPort() - kFirst) / kStride;
  if (blocks < 64) blocks = 1800;  // a host with a low ephemeral range: the old span
  if (count > kStride) {
    return InvalidArgument(fmt::format(
        "a local cluster needs {} ports and has {}: fewer nodes, please", count, kStride));
  }
  const uint64_t h = Fnv1a(state_dir);
  for (int attempt = 0; attempt < 64; ++attempt) {
    int base = kFirst + static_cast<int>((h + attempt) % blocks) * kStride;
    bool free = true;
    for (int p = base; p < base + count && free; ++p) free = PortFree(p);
    if (free) return base;
  }
  return Error{ErrorCode::kUnavailable,
               fmt::format("no block of {} free loopback ports found in {}-{}", count, kFirst,
                           kFirst + blocks * kStride)};
}

Result<void> WriteFile(const fs::path& path, std::string_view text, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return Internal(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = fchmod(fd, mode) == 0 && ok;
  close(fd);
  if (!ok) return Internal(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  return {};
}

// A key of `bytes` random bytes, made once and kept across restarts.
Result<void> MakeKey(const fs::path& path, size_t bytes, uid_t uid, gid_t gid) {
  if (!fs::exists(path)) {
    std::ifstream random("/dev/urandom", std::ios::binary);
    std::string key(bytes, '\0');
    if (!random.read(key.data(), static_cast<std::streamsize>(bytes))) {
      return Internal("cannot read /dev/urandom");
    }
    if (auto w = WriteFile(path, key, 0400); !w) return w;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  const bool ok = fd >= 0 && fchown(fd, uid, gid) == 0;
  const int e = errno;
  if (fd >= 0) close(fd);
  if (!ok) return Internal(fmt::format("cannot chown {}: {}", path.string(), std::strerror(e)));
  return {};
}

Result<void> MakeDir(const fs::path& path, mode_t mode, uid_t uid = 0, gid_t gid = 0) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return Internal(fmt::format("cannot create {}: {}", path.string(), ec.message()));
  // Through a descriptor: a link put in its place is refused, never followed.
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const bool ok = fd >= 0 && fchmod(fd, mode) == 0 && fchown(fd, uid, gid) == 0;
  const int e = errno;
  if (fd >= 0) close(fd);
  if (!ok) {
    return Internal(fmt::format("cannot set the owner or mode of {}: {}", path.string(),
                                std::strerror(e)));
  }
  return {};
}

// Every directory above `path` must let the daemons' users (munge, nobody, the jobs' users)
// through.
Result<void> CheckTraversable(const fs::path& path) {
  for (fs::path p = path.parent_path(); !p.empty(); p = p.parent_path()) {
    struct stat st;
    if (stat(p.c_str(), &st) == 0 && (st.st_mode & S_IXOTH) == 0) {
      return InvalidArgument(fmt::format(
          "{} is not traversable by other users, so munge, nobody and the jobs' users cannot "
          "reach the state dir {}: `chmod o+x {}` or use another --state-dir",
          p.string(), path.string(), p.string()));
    }
    if (p == p.root_path()) break;
  }
  return {};
}

struct Account {
  uid_t uid = 0;
  gid_t gid = 0;
};

Result<Account> LookUp(const char* user) {
  passwd* pw = getpwnam(user);
  if (pw == nullptr) {
    return Error{ErrorCode::kNotFound,
                 fmt::format("there is no user '{}' on this host: install munge ({})", user,
                             kInstallHint)};
  }
  return Account{pw->pw_uid, pw->pw_gid};
}

std::vector<std::string> SlurmEnv(const LocalCluster& c) { return {"SLURM_CONF=" + c.conf}; }

}  // namespace

Result<std::vector<std::pair<std::string, std::string>>> NodeStates(const LocalCluster& c) {
  // One line per node and partition; the state is the node's in each.
  auto r = RunCommand({"sinfo", "-h", "-N", "-o", "%N %T"}, SlurmEnv(c), std::chrono::seconds(5));
  if (!r) return r.error();
  if (r->exit_code != 0) return Error{ErrorCode::kUnavailable, "sinfo: " + r->err};
  std::vector<std::pair<std::string, std::string>> states;
  std::istringstream lines(r->out);
  std::string node, state;
  while (lines >> node >> state) {
    bool seen = std::any_of(states.begin(), states.end(),
                            [&](const auto& e) { return e.first == node; });
    if (!seen) states.emplace_back(node, state);
  }
  return states;
}

namespace {

std::string LogTail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::vector<std::string> all;
  std::string line;
  while (std::getline(in, line)) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "  " + all[i] + "\n";
  }
  return out;
}

// Waits until `ready()` or `timeout`; false on timeout or when `daemon` died.
bool WaitFor(const std::function<bool()>& ready, const LocalDaemon* daemon, Clock::duration timeout) {
  const auto until = Clock::now() + timeout;
  while (Clock::now() < until) {
    if (ready()) return true;
    // By pid alone: right after the spawn it may not have exec'd its program yet.
    if (daemon != nullptr && !ProcessRunning(daemon->pid)) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return ready();
}

Result<void> SaveLocalCluster(const LocalCluster& c) {
  rapidjson::StringBuffer buf;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
  auto str = [&](const char* key, const std::string& value) {
    if (key != nullptr) w.Key(key);
    w.String(value.c_str(), static_cast<rapidjson::SizeType>(value.size()));
  };
  w.StartObject();
  str("state_dir", c.state_dir);
  str("inventory", c.inventory);
  str("root", c.root);
  str("id", c.id);
  str("conf", c.conf);
  str("device_dir", c.device_dir);
  str("jwt_key", c.jwt_key);
  w.Key("slurmctld_port");
  w.Int(c.slurmctld_port);
  w.Key("rest_port");
  w.Int(c.rest_port);
  w.Key("gpus_per_node");
  w.Int(c.gpus_per_node);
  w.Key("accounting");
  w.Bool(c.accounting);
  w.Key("nodes");
  w.StartArray();
  for (const std::string& n : c.nodes) w.String(n.c_str());
  w.EndArray();
  w.Key("daemons");
  w.StartArray();
  for (const LocalDaemon& d : c.daemons) {
    w.StartObject();
    str("name", d.name);
    str("comm", d.comm);
    w.Key("pid");
    w.Int(d.pid);
    w.Key("start_ticks");
    w.Uint64(d.start_ticks);
    str("log", d.log);
    for (const auto& [key, list] : {std::pair{"args", &d.args}, std::pair{"env", &d.env}}) {
      w.Key(key);
      w.StartArray();
      for (const std::string& s : *list) str(nullptr, s);
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return WriteFile(fs::path(c.root) / "local.json", std::string(buf.GetString()) + "\n", 0644);
}

// Starts one daemon, detached, with its output in <root>/log/<file>.out.
Result<LocalDaemon> StartDaemon(LocalCluster& c, std::string name, std::string comm,
                                std::vector<std::string> args, std::vector<std::string> env,
                                const std::string& file) {
  LocalDaemon d{std::move(name), std::move(comm), -1, 0, c.root + "/log/" + file + ".out", args,
                env};
  SpawnOptions o;
  o.args = std::move(args);
  o.output = d.log;
  o.env = std::move(env);
  o.detach = true;
  auto pid = Spawn(o);
  if (!pid) return pid.error();
  d.pid = *pid;
  d.start_ticks = ProcessStartTicks(d.pid);
  c.daemons.push_back(d);
  return d;
}

Error DaemonFailed(const LocalDaemon& d, const std::string& what) {
  return Error{ErrorCode::kUnavailable,
               fmt::format("{} {}; its log {} ends with:\n{}", d.name, what, d.log,
                           LogTail(d.log, 15))};
}

// A cluster whose daemons partly died (a slurmctld killed alone, say): starts the dead ones
// again as they were started, in their order, and leaves the others and their jobs alone.
Result<LocalCluster> RestartDead(LocalCluster c) {
  for (LocalDaemon& d : c.daemons) {
    if (DaemonRuns(d)) continue;
    SpawnOptions o;
    o.args = d.args;
    o.output = d.log;
    o.env = d.env;
    o.detach = true;
    auto pid = Spawn(o);
    if (!pid) return pid.error();
    d.pid = *pid;
    d.start_ticks = ProcessStartTicks(d.pid);
    c.restarted.push_back(d.name);
    const int port = d.comm == "slurmctld" ? c.slurmctld_port
                     : d.comm == "slurmrestd" ? c.rest_port
                                              : 0;
    if (port != 0 &&
        !WaitFor([&] { return PortAccepts(port); }, &d, std::chrono::seconds(15))) {
      [[maybe_unused]] auto saved = SaveLocalCluster(c);  // the pids that did start
      return DaemonFailed(d, "did not start listening again");
    }
  }
  if (auto saved = SaveLocalCluster(c); !saved) return saved.error();
  return c;
}

void StopDaemons(const LocalCluster& c) {
  for (auto it = c.daemons.rbegin(); it != c.daemons.rend(); ++it) {
    if (!StopProcess(it->pid, it->comm, std::chrono::seconds(5), it->start_ticks)) {
      spdlog::warn("slurm: {} (pid {}) did not stop", it->name, it->pid);
    }
  }
}

// `sacctmgr -i ARGS...` against the cluster's slurmdbd; its output becomes the error.
Result<void> Sacctmgr(const LocalCluster& c, std::vector<std::string> args) {
  args.insert(args.begin(), {"sacctmgr", "-i"});
  auto r = RunCommand(args, SlurmEnv(c), std::chrono::seconds(30));
  if (!r) return r.error();
  // "Nothing new added" (exit 1) is what a second `up` on the same database gets.
  if (r->exit_code != 0 && r->out.find("Nothing new added") == std::string::npos &&
      r->err.find("already exists") == std::string::npos) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("{}: {}{}", fmt::join(args, " "), r->err, r->out)};
  }
  return {};
}

// Accounts for every user who may run jobs here: root and the regular accounts (uid >= 1000).
std::vector<std::string> JobUsers() {
  std::vector<std::string> users = {"root"};
  setpwent();
  while (passwd* pw = getpwent()) {
    if (pw->pw_uid >= 1000 && pw->pw_uid < 60000) users.emplace_back(pw->pw_name);
  }
  endpwent();
  return users;
}

// MariaDB with a database user for slurmdbd, slurmdbd, and in it the cluster, the `bmas`
// account with every job user, and the partitions' QOS with their per-user GPU caps.
Result<void> StartAccounting(LocalCluster& c, const Cluster& local) {
  auto mysql = LookUp("mysql");
  if (!mysql) {
    return Error{ErrorCode::kUnavailable,
                 "accounting = true needs MariaDB and slurmdbd: apt-get install -y "
                 "--no-install-recommends mariadb-server slurmdbd"};
  }
  const std::string data = c.root + "/mysql";
  // MariaDB runs as mysql and writes only under its data dir.
  const std::string socket = data + "/mysqld.sock";
  const int db_port = local.slurm.slurmdbd_port + 1;
  if (!fs::exists(data + "/mysql")) {
    if (auto r = MakeDir(data, 0700, mysql->uid, mysql->gid); !r) return r;
    auto init = RunCommand({"mariadb-install-db", "--no-defaults", "--user=mysql",
                            "--datadir=" + data, "--auth-root-authentication-method=socket",
                            "--skip-test-db"},
                           {}, std::chrono::seconds(120));
    if (!init || init->exit_code != 0) {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("mariadb-install-db failed: {}",
                               init ? init->err + init->out : init.error().message)};
    }
  }
  auto db = StartDaemon(
      c, "mariadbd", "mariadbd",
      {"/usr/sbin/mariadbd", "--no-defaults", "--user=mysql", "--datadir=" + data,
       "--socket=" + socket, fmt::format("--port={}", db_port), "--bind-address=127.0.0.1",
       "--skip-name-resolve", "--pid-file=" + data + "/mariadbd.pid",
       "--log-error=" + data + "/mariadbd.log"},
      {}, "mariadbd");
  if (!db) return db.error();
  if (!WaitFor([&] { return PortAccepts(db_port); }, &*db, std::chrono::seconds(60))) {
    return DaemonFailed(*db, "did not start listening");
  }
  // A password of its own, kept in slurmdbd.conf (root only).
  std::string password;
  {
    std::ifstream random("/dev/urandom", std::ios::binary);
    for (int i = 0; i < 24; ++i) password += "0123456789abcdef"[random.get() & 15];
  }
  // The statement that sets it goes through a root-only file, never a command line (which
  // every user can read in /proc).
  // In root's etc/, not MariaDB's data dir: the mysql account writes that one, and could put a
  // link there for root's write to follow.
  const std::string grant_sql = c.root + "/etc/grant-slurm.sql";
  if (auto r = WriteFile(grant_sql,
                         fmt::format("CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1';\n"
                                     "ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{}';\n"
                                     "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';\n",
                                     password),
                         0600);
      !r) {
    return r;
  }
  auto grant = RunCommand({"mariadb", "--no-defaults", "--socket=" + socket, "-u", "root", "-e",
                           "source " + grant_sql},
                          {}, std::chrono::seconds(30));
  unlink(grant_sql.c_str());
  if (!grant || grant->exit_code != 0) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot create slurmdbd's database user: {}",
                             grant ? grant->err : grant.error().message)};
  }
  const SlurmSettings& s = local.slurm;
  const std::string dbd_conf = fmt::format(
      "# generated by bmas slurm up\nAuthType=auth/munge\nAuthInfo=socket={}\n"
      "DbdHost=localhost\nDbdPort={}\nSlurmUser=root\nLogFile={}/slurmdbd.log\n"
      "PidFile={}/slurmdbd.pid\nStorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
      "StoragePort={}\nStorageUser=slurm\nStoragePass={}\nStorageLoc=slurm_acct_db\n"
      "# slurmrestd's requests carry the user's JWT.\n"
      "AuthAltTypes=auth/jwt\nAuthAltParameters=jwt_key={}\n",
      s.munge_socket, s.slurmdbd_port, s.log_dir, s.run_dir, db_port, password, s.jwt_key);
  if (auto r = WriteFile(c.root + "/etc/slurmdbd.conf", dbd_conf, 0600); !r) return r;
  auto dbd = StartDaemon(c, "slurmdbd", "slurmdbd", {"/usr/sbin/slurmdbd", "-D"},
                         SlurmEnv(c), "slurmdbd");
  if (!dbd) return dbd.error();
  if (!WaitFor([&] { return PortAccepts(s.slurmdbd_port); }, &*dbd, std::chrono::seconds(60))) {
    return DaemonFailed(*dbd, "did not start listening");
  }
  if (auto r = Sacctmgr(c, {"add", "cluster", s.cluster_name}); !r) return r;
  if (auto r = Sacctmgr(c, {"add", "account", "bmas", "Cluster=" + s.cluster_name,
                            "Description=bmas users", "Organization=bmas"});
      !r) {
    return r;
  }
  if (auto r = Sacctmgr(c, {"add", "user", fmt::format("{}", fmt::join(JobUsers(), ",")),
                            "Account=bmas", "Cluster=" + s.cluster_name});
      !r) {
    return r;
  }
  for (const Partition& p : local.partitions) {
    if (p.max_gpus_per_user <= 0) continue;
    const std::string qos = p.EffectiveQos();
    const std::string cap = fmt::format("MaxTRESPerUser=gres/gpu={}", p.max_gpus_per_user);
    if (auto r = Sacctmgr(c, {"add", "qos", qos}); !r) return r;
  }
  return {};
}

// The partitions' per-user GPU caps. slurmdbd knows the gres/gpu TRES only once slurmctld
// has registered with it, so this runs after slurmctld starts, and retries until then.
Result<void> SetGpuCaps(const LocalCluster& c, const Cluster& local) {
  for (const Partition& p : local.partitions) {
    if (p.max_gpus_per_user <= 0) continue;
    const std::string cap = fmt::format("MaxTRESPerUser=gres/gpu={}", p.max_gpus_per_user);
    // DenyOnLimit: a job that alone exceeds the cap is refused at submission, not left pending.
    const std::vector<std::string> args = {"modify", "qos", p.EffectiveQos(), "set", cap,
                                           "Flags=DenyOnLimit"};
    Result<void> set = Sacctmgr(c, args);
    WaitFor([&] { return static_cast<bool>(set = Sacctmgr(c, args)); }, nullptr,
            std::chrono::seconds(20));
    if (!set) return set;
  }
  return {};
}

Result<void> StartDaemons(LocalCluster& c, const Account& munge, const Cluster* accounting,
                          std::chrono::seconds timeout) {
  const std::string munge_dir = c.root + "/munge";
  const std::string socket = munge_dir + "/munge.sock";
  auto munged = StartDaemon(
      c, "munged", "munged",
      {"setpriv", fmt::format("--reuid={}", munge.uid), fmt::format("--regid={}", munge.gid),
       "--clear-groups", "/usr/sbin/munged", "--foreground", "--socket=" + socket,
       "--key-file=" + c.root + "/etc/munge.key", "--pid-file=" + munge_dir + "/munged.pid",
       "--log-file=" + munge_dir + "/munged.log", "--seed-file=" + munge_dir + "/munged.seed"},
      {}, "munged");
  if (!munged) return munged.error();
  if (!WaitFor([&] { return fs::exists(socket); }, &*munged, std::chrono::seconds(10))) {
    return DaemonFailed(*munged, "did not create its socket");
  }

  if (accounting != nullptr) {
    if (auto r = StartAccounting(c, *accounting); !r) return r;
  }

  auto ctld = StartDaemon(c, "slurmctld", "slurmctld", {"/usr/sbin/slurmctld", "-D", "-f", c.conf},
                          {}, "slurmctld");
  if (!ctld) return ctld.error();
  if (!WaitFor([&] { return PortAccepts(c.slurmctld_port); }, &*ctld, std::chrono::seconds(15))) {
    return DaemonFailed(*ctld, "did not start listening");
  }
  if (accounting != nullptr) {
    if (auto r = SetGpuCaps(c, *accounting); !r) return r;
  }

  for (const std::string& node : c.nodes) {
    // Its own UTS namespace: the node's jobs see its name as the host name (OpenMPI needs
    // distinct host names).
    auto slurmd = StartDaemon(
        c, "slurmd " + node, "slurmd",
        {"unshare", "--uts", "/bin/sh", "-c",
         "hostname \"$0\" && exec /usr/sbin/slurmd -D -f \"$1\" -N \"$0\"", node, c.conf},
        {}, "slurmd-" + node);
    if (!slurmd) return slurmd.error();
  }

  // slurmrestd refuses to run as root; tokens name the user each request acts for.
  auto rest = StartDaemon(
      c, "slurmrestd", "slurmrestd",
      {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/sbin/slurmrestd",
       "-a", "rest_auth/jwt", "-s",
       // With slurmdbd, also its API: finished jobs, for accounting.
       c.accounting ? "openapi/v0.0.38,openapi/dbv0.0.38" : "openapi/v0.0.38",
       fmt::format("127.0.0.1:{}", c.rest_port)},
      {"SLURM_JWT=daemon", "SLURM_CONF=" + c.conf}, "slurmrestd");
  if (!rest) return rest.error();
  if (!WaitFor([&] { return PortAccepts(c.rest_port); }, &*rest, std::chrono::seconds(10))) {
    return DaemonFailed(*rest, "did not start listening");
  }

  std::string last;
  bool idle = WaitFor(
      [&] {
        auto states = NodeStates(c);
        if (!states) {
          last = states.error().message;
          return false;
        }
        std::map<std::string, std::string> state_of(states->begin(), states->end());
        last.clear();
        bool all_idle = true;
        for (const std::string& node : c.nodes) {
          const std::string state = state_of.contains(node) ? state_of[node] : "missing";
          last += fmt::format("{}{} {}", last.empty() ? "" : ", ", node, state);
          all_idle = all_idle && state == "idle";
        }
        return all_idle;
      },
      nullptr, timeout);
  if (!idle) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("the nodes were not all idle within {} s ({}); see the slurmd logs "
                             "in {}/log",
                             timeout.count(), last, c.root)};
  }
  return {};
}

}  // namespace

Cluster BuiltinLocalCluster() { return ParseCluster(kBuiltinLocalClusterToml, "cluster-local.toml"); }

std::string LocalClusterId(const std::string& state_dir) {
  return fmt::format("{:08x}", static_cast<uint32_t>(Fnv1a(fs::absolute(state_dir).string())));
}

Cluster Localize(Cluster c, const std::string& root, const std::string& device_dir, int base_port) {
  c.controller.name = "localhost";
  c.controller.address = "127.0.0.1";
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    c.nodes[i].address = "127.0.0.1";
    c.nodes[i].hostname.clear();
    c.nodes[i].port = base_port + 1 + static_cast<int>(i);
  }
  SlurmSettings& s = c.slurm;
  s.local = true;
  s.slurm_user = "root";
  s.slurmctld_port = base_port;
  s.slurmd_port = base_port + 1;
  s.state_save_dir = root + "/state";
  s.spool_dir = root + "/spool";
  s.log_dir = root + "/log";
  s.run_dir = root + "/run";
  s.tmpfs = root + "/tmp";
  s.gpu_device_dir = device_dir;
  s.munge_socket = root + "/munge/munge.sock";
  if (s.cred_expire_s == 0) s.cred_expire_s = 10;  // requeued jobs restart after ~11 s
  s.jwt_key = root + "/etc/jwt_hs256.key";
  s.prolog = root + "/bin/bmas-slurm-prolog";
  s.epilog = root + "/bin/bmas-slurm-epilog";
  if (s.accounting) {
    // slurmdbd after slurmrestd, then MariaDB, in the state dir's block of ports.
    s.slurmdbd_host = "localhost";
    s.slurmdbd_port = base_port + static_cast<int>(c.nodes.size()) + 2;
  }
  // Local clusters side by side share the host's cgroups, whose paths name the node and the
  // job id: job ids from a range of their own keep them apart.
  s.first_job_id = int64_t{(base_port - 20000) / 16} * 10000 + 1;
  return c;
}

std::string LocalClusterPrerequisites() {
  if (geteuid() != 0) {
    return "a local Slurm cluster starts its daemons as root: run bmas as root (sudo)";
  }
  std::vector<std::string> missing;
  for (const char* path : {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd",
                           "/usr/sbin/slurmrestd", "/usr/bin/sinfo", "/usr/bin/scontrol"}) {
    if (access(path, X_OK) != 0) missing.push_back(path);
  }
  bool jwt = false;
  std::error_code ec;
  for (const auto& dir : fs::directory_iterator("/usr/lib", ec)) {
    if (fs::exists(dir.path() / "slurm-wlm" / "auth_jwt.so", ec)) jwt = true;
  }
  if (!jwt) missing.push_back("auth_jwt.so");
  if (missing.empty()) return "";
  std::string list;
  for (const std::string& m : missing) list += (list.empty() ? "" : ", ") + m;
  return fmt::format("Slurm is not installed (missing {}): {}", list, kInstallHint);
}

Result<LocalCluster> StartLocalCluster(const Cluster& inventory, const std::string& inventory_file,
                                       const std::string& state_dir, std::chrono::seconds timeout) {
  if (std::string why = LocalClusterPrerequisites(); !why.empty()) {
    return Error{ErrorCode::kUnavailable, why};
  }
  if (auto running = ReadLocalCluster(state_dir); running) {
    std::vector<std::string> dead;
    bool any_alive = false, restartable = true;
    for (const LocalDaemon& d : running->daemons) {
      if (DaemonRuns(d)) {
        any_alive = true;
      } else {
        dead.push_back(d.name);
        restartable = restartable && !d.args.empty();
      }
    }
    if (any_alive && dead.empty()) {
      return Error{ErrorCode::kAlreadyExists,
                   fmt::format("a local Slurm cluster is already up in {} (slurmrestd {}); "
                               "`bmas slurm down` stops it",
                               state_dir, running->rest_url())};
    }
    if (any_alive && restartable) return RestartDead(*running);
    if (any_alive) {
      return Error{ErrorCode::kAlreadyExists,
                   fmt::format("the local Slurm cluster in {} runs without {} (it died, and this "
                               "cluster was started by an older bmas that did not record how); "
                               "`bmas slurm down` then `bmas slurm up` starts it afresh",
                               state_dir, fmt::join(dead, ", "))};
    }
  }
  auto munge = LookUp("munge");
  if (!munge) return munge.error();

  LocalCluster c;
  c.state_dir = fs::absolute(state_dir).string();
  c.inventory = inventory_file.empty() ? "" : fs::absolute(inventory_file).string();
  c.root = c.state_dir + "/slurm";
  c.id = LocalClusterId(c.state_dir);
  c.conf = c.root + "/etc/slurm.conf";
  c.device_dir = "/dev/bmas-" + c.id;
  c.jwt_key = c.root + "/etc/jwt_hs256.key";
  // slurmctld, one slurmd per node, slurmrestd; with accounting slurmdbd and MariaDB.
  const int ports = static_cast<int>(inventory.nodes.size()) + (inventory.slurm.accounting ? 5 : 3);
  auto base = PickBasePort(c.state_dir, ports);
  if (!base) return base.error();
  c.slurmctld_port = *base;
  c.rest_port = *base + static_cast<int>(inventory.nodes.size()) + 1;
  Cluster local = Localize(inventory, c.root, c.device_dir, *base);
  for (const Node& n : local.nodes) c.nodes.push_back(n.name);
  c.gpus_per_node = local.nodes.empty() ? 0 : local.nodes[0].gpus.count;

  // The state dir is made world-traversable: munge, nobody and the jobs' users reach into it;
  // not its logs, which hold every job's command line (operator data).
  if (auto r = CheckTraversable(c.state_dir); !r) return r.error();
  for (const auto& [dir, mode] : std::vector<std::pair<std::string, mode_t>>{
           {c.state_dir, 0755}, {c.root, 0755}, {c.root + "/etc", 0755},
           {c.root + "/log", 0750}, {c.root + "/run", 0755}, {c.root + "/state", 0700},
           {c.root + "/bin", 0755}}) {
    if (auto r = MakeDir(dir, mode); !r) return r.error();
  }
  if (auto r = MakeDir(c.root + "/munge", 0755, munge->uid, munge->gid); !r) return r.error();
  for (const Node& n : local.nodes) {
    if (auto r = MakeDir(c.root + "/spool/" + n.name, 0755); !r) return r.error();
    if (auto r = MakeDir(c.root + "/tmp/" + n.name, 01777); !r) return r.error();
  }
  if (auto r = MakeKey(c.root + "/etc/munge.key", 1024, munge->uid, munge->gid); !r) {
    return r.error();
  }
  if (auto r = MakeKey(c.jwt_key, 32, 0, 0); !r) return r.error();
  for (const auto& [name, text] : RenderSlurmConfig(local)) {
    if (auto r = WriteFile(fs::path(c.root) / "etc" / name, text, 0644); !r) return r.error();
  }
  // The workspace hooks: `bmas slurm hook prolog|epilog` binds a job's GPUs into its user's
  // workspace and unbinds them. Jobs of users without a workspace run as plain Slurm jobs, and
  // the hooks never fail (a failing prolog would drain the node).
  std::error_code self_ec;
  const std::string self = fs::read_symlink("/proc/self/exe", self_ec).string();
  for (const auto& [hook, phase] : {std::pair{local.slurm.prolog, "prolog"},
                                    std::pair{local.slurm.epilog, "epilog"}}) {
    const std::string text =
        self.empty() ? std::string("#!/bin/sh\nexit 0\n")
                     : fmt::format("#!/bin/sh\n# bmas workspace hook: a job's GPUs in its user's "
                                   "workspace.\n{} --state-dir {} slurm hook {} >>{}\"/log/hooks.log\" "
                                   "2>&1\nexit 0\n",
                                   ShellQuote(self), ShellQuote(c.state_dir), phase,
                                   ShellQuote(c.root));
    if (auto r = WriteFile(hook, text, 0755); !r) return r.error();
  }
  // Fake GPUs: character devices with the NVIDIA major; opening one gives ENXIO (no driver).
  for (const Node& n : local.nodes) {
    if (auto r = MakeDir(c.device_dir + "/" + n.name, 0755); !r) return r.error();
    for (int g = 0; g < n.gpus.count; ++g) {
      const std::string dev = GpuDevicePath(local.slurm, n, g);
      if (!fs::exists(dev) &&
          mknod(dev.c_str(), S_IFCHR | 0666, makedev(kNvidiaMajor, g)) != 0) {
        return Internal(fmt::format("cannot make {}: {}", dev, std::strerror(errno)));
      }
    }
  }

  c.accounting = local.slurm.accounting;
  Result<void> started =
      StartDaemons(c, *munge, local.slurm.accounting ? &local : nullptr, timeout);
  if (auto saved = SaveLocalCluster(c); !saved && started) started = saved.error();
  if (!started) {
    StopDaemons(c);
    std::error_code ec;
    fs::remove_all(c.device_dir, ec);
    fs::remove(fs::path(c.root) / "local.json", ec);
    return started.error();
  }
  return c;
}

Result<LocalCluster> ReadLocalCluster(const std::string& state_dir) {
  const fs::path path = fs::absolute(state_dir) / "slurm" / "local.json";
  std::ifstream in(path);
  if (!in) {
    return Error{ErrorCode::kNotFound,
                 fmt::format("no local Slurm cluster was started in {} (`bmas slurm up` starts "
                             "one)",
                             state_dir)};
  }
  std::stringstream text;
  text << in.rdbuf();
  rapidjson::Document d;
  d.Parse(text.str().c_str());
  auto bad = [&] { return Internal(fmt::format("{} is not what bmas wrote", path.string())); };
  if (d.HasParseError() || !d.IsObject()) return bad();
  LocalCluster c;
  auto str = [&](const char* key, std::string& out) {
    if (d.HasMember(key) && d[key].IsString()) out = d[key].GetString();
  };
  auto num = [&](const char* key, int& out) {
    if (d.HasMember(key) && d[key].IsInt()) out = d[key].GetInt();
  };
  str("state_dir", c.state_dir);
  str("inventory", c.inventory);
  str("root", c.root);
  str("id", c.id);
  str("conf", c.conf);
  str("device_dir", c.device_dir);
  str("jwt_key", c.jwt_key);
  num("slurmctld_port", c.slurmctld_port);
  num("rest_port", c.rest_port);
  num("gpus_per_node", c.gpus_per_node);
  c.accounting = d.HasMember("accounting") && d["accounting"].IsBool() && d["accounting"].GetBool();
  if (!d.HasMember("nodes") || !d["nodes"].IsArray() || !d.HasMember("daemons") ||
      !d["daemons"].IsArray()) {
    return bad();
  }
  for (const auto& n : d["nodes"].GetArray()) {
    if (n.IsString()) c.nodes.emplace_back(n.GetString());
  }
  for (const auto& e : d["daemons"].GetArray()) {
    if (!e.IsObject() || !e.HasMember("pid") || !e["pid"].IsInt()) return bad();
    LocalDaemon daemon;
    daemon.pid = e["pid"].GetInt();
    if (e.HasMember("start_ticks") && e["start_ticks"].IsUint64()) {
      daemon.start_ticks = e["start_ticks"].GetUint64();
    }
    if (e.HasMember("name") && e["name"].IsString()) daemon.name = e["name"].GetString();
    if (e.HasMember("comm") && e["comm"].IsString()) daemon.comm = e["comm"].GetString();
    if (e.HasMember("log") && e["log"].IsString()) daemon.log = e["log"].GetString();
    for (const auto& [key, list] :
         {std::pair{"args", &daemon.args}, std::pair{"env", &daemon.env}}) {
      if (!e.HasMember(key) || !e[key].IsArray()) continue;
      for (const auto& s : e[key].GetArray()) {
        if (s.IsString()) list->emplace_back(s.GetString());
      }
    }
    c.daemons.push_back(std::move(daemon));
  }
  return c;
}

bool DaemonRuns(const LocalDaemon& d) { return ProcessRunning(d.pid, d.comm, d.start_ticks); }

Result<LocalCluster> RunningLocalCluster(const std::string& state_dir) {
  auto c = ReadLocalCluster(state_dir);
  if (!c) return c;
  const bool ctld = std::any_of(c->daemons.begin(), c->daemons.end(), [](const LocalDaemon& d) {
    return d.comm == "slurmctld" && DaemonRuns(d);
  });
  if (!ctld) {
    return Error{ErrorCode::kNotFound,
                 fmt::format("the local Slurm cluster of {} no longer runs (`bmas slurm up` "
                             "starts it)",
                             state_dir)};
  }
  return c;
}

Result<void> StopLocalCluster(const std::string& state_dir) {
  auto c = ReadLocalCluster(state_dir);
  if (!c) return c.error();
  // Jobs first: a job's slurmstepd outlives its slurmd, and keeps calling a stopped slurmctld.
  bool ctld = std::any_of(c->daemons.begin(), c->daemons.end(), [](const LocalDaemon& d) {
    return d.comm == "slurmctld" && DaemonRuns(d);
  });
  if (ctld) {
    auto jobs = RunCommand({"squeue", "-h", "-o", "%i"}, SlurmEnv(*c), std::chrono::seconds(5));
    if (jobs && jobs->exit_code == 0 && !jobs->out.empty()) {
      std::vector<std::string> cancel = {"scancel"};
      std::istringstream ids(jobs->out);
      for (std::string id; ids >> id;) cancel.push_back(id);
      RunCommand(cancel, SlurmEnv(*c), std::chrono::seconds(5));
      WaitFor(
          [&] {
            auto left = RunCommand({"squeue", "-h", "-o", "%i"}, SlurmEnv(*c),
                                   std::chrono::seconds(5));
            return !left || left->out.empty();
          },
          nullptr, std::chrono::seconds(15));
    }
  }
  StopDaemons(*c);
  std::error_code ec;
  if (!c->device_dir.empty() && c->device_dir.starts_with("/dev/bmas-")) {
    fs::remove_all(c->device_dir, ec);
  }
  fs::remove(fs::path(c->root) / "local.json", ec);
  return {};
}

}  // namespace bmas::slurm
