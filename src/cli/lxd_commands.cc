#include "cli/lxd_commands.h"

#include <pwd.h>

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "agent/agent.h"
#include "cluster/cluster_ca.h"
#include "common/json_object.h"
#include "common/process.h"
#include "daemon/services.h"
#include "daemon/up_record.h"
#include "lxd/image_build.h"
#include "lxd/interactive_exec.h"
#include "lxd/local_lxd.h"
#include "lxd/lxd_tls.h"
#include "lxd/peer_trust.h"
#include "lxd/workspace.h"
#include "store/store.h"

namespace bmas {
namespace {

struct LxdContext {
  Config config;
  std::string state_dir;
  std::string socket;
  std::string pool_driver;  // as `bmas lxd up` recorded it; "" when unknown
};

LxdContext Context(GlobalOptions& global) {
  LxdContext c;
  c.config = global.LoadConfigOrDefaults();
  c.state_dir = ResolveStateDir(global.state_dir, c.config);
  c.socket = lxd::SocketPath(c.config.lxd);
  if (auto l = lxd::ReadLocalLxd(c.state_dir); l && l->socket == c.socket) {
    c.pool_driver = l->pool_driver;
  }
  return c;
}

std::string OrDash(const std::string& s) { return s.empty() ? "-" : s; }

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// Makes this joined node's LXD trust exactly the peer node certificates in <node_dir>/lxd-peers/
// that the cluster CA (<node_dir>/ca.crt) issued for the host each file is named after. Returns
// what it did, for the admin.
Result<std::string> SyncPeerTrust(GlobalOptions& global, const LxdContext& c) {
  const LxdSettings& s = c.config.lxd;
  if (!lxd::HasJoined(s)) {
    return Error{ErrorCode::kNotFound,
                 fmt::format("this node has not joined a cluster: there is no {} ([lxd] "
                             "node_dir); run `bmas node join TOKEN` first",
                             lxd::NodeCertPath(s)),
                 {}};
  }
  const std::string ca_pem = ReadWhole(lxd::NodeCaPath(s));
  if (ca_pem.empty()) {
    return Error{ErrorCode::kNotFound,
                 fmt::format("cannot read the cluster CA {}: `bmas node join` leaves it there; "
                             "join again",
                             lxd::NodeCaPath(s)),
                 {}};
  }
  auto peers = lxd::ReadNodeCertificates(lxd::PeerCertsDir(s));
  if (!peers) return peers.error();
  auto client = global.services->Lxd(c.socket, std::chrono::seconds(30));
  auto trusted = client->TrustedCertificates();
  if (!trusted) return trusted.error();
  const auto now = static_cast<int64_t>(global.services->env().UnixNow());
  const lxd::PeerTrustPlan plan = lxd::PlanPeerTrust(
      *trusted, *peers, ReadWhole(lxd::NodeCertPath(s)), [&](const lxd::NodeCertificate& p) {
        return cluster::VerifyPeerCertificate(ca_pem, p.pem, now, p.host);
      });
  if (auto applied = lxd::ApplyPeerTrust(*client, plan); !applied) return applied.error();
  return lxd::DescribePeerTrust(plan);
}

// `defaults` (the config's [workspace]), overridden by what the store holds for the user.
WorkspaceSettings Merge(WorkspaceSettings defaults, const WorkspaceLimits& stored) {
  if (stored.cpus) defaults.cpus = static_cast<int>(*stored.cpus);
  if (stored.memory) defaults.memory = *stored.memory;
  if (stored.processes) defaults.processes = static_cast<int>(*stored.processes);
  if (stored.disk) defaults.disk = *stored.disk;
  return defaults;
}

// USER's workspace limits: the config's [workspace], overridden by `bmas user add|set`'s.
Result<WorkspaceSettings> LimitsFor(const Config& config, Store& store, const std::string& user) {
  auto found = store.FindUser(user);
  if (!found) return found.error();
  return Merge(config.workspace, *found ? (*found)->limits.workspace : WorkspaceLimits{});
}

}  // namespace

Result<WorkspaceSettings> WorkspaceLimitsFor(Services& services, const Config& config,
                                             const std::string& state_dir,
                                             const std::string& user) {
  if (!StoreIsOnPostgres() && !std::filesystem::exists(StorePath(state_dir))) {
    return config.workspace;
  }
  auto store = services.OpenStore(state_dir);
  if (!store) return store.error();
  return LimitsFor(config, **store, user);
}

namespace {

void Str(rapidjson::Writer<rapidjson::StringBuffer>& w, const char* key, const std::string& v) {
  w.Key(key);
  w.String(v.c_str(), static_cast<rapidjson::SizeType>(v.size()));
}

// `v` as a JSON string, or null when it is empty (no limit).
void StrOrNull(rapidjson::Writer<rapidjson::StringBuffer>& w, const char* key,
               const std::string& v) {
  if (!v.empty()) return Str(w, key, v);
  w.Key(key);
  w.Null();
}

// A count LXD holds as text, as a number; nullopt when it is unset or not a count.
std::optional<int64_t> Count(const std::string& v) {
  int64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec == std::errc() && end == v.data() + v.size() && !v.empty()) return n;
  return std::nullopt;
}

// An LXD size ("4GiB", "512MB", "1024") in bytes; nullopt for "", a percentage or anything else.
std::optional<int64_t> SizeBytes(const std::string& v) {
  static const std::regex kSize(R"(^([0-9]+(?:\.[0-9]+)?)(B|[kMGTPE]B|[KMGTPE]iB)?$)");
  std::smatch m;
  if (!std::regex_match(v, m, kSize)) return std::nullopt;
  const std::string unit = m[2].str();
  double scale = 1;
  if (!unit.empty() && unit != "B") {
    const char prefix = unit[0] == 'K' ? 'k' : unit[0];  // KiB, kB
    const int power = static_cast<int>(std::string_view("kMGTPE").find(prefix)) + 1;
    scale = std::pow(unit.size() == 3 ? 1024.0 : 1000.0, power);
  }
  return static_cast<int64_t>(std::stod(m[1].str()) * scale);
}

}  // namespace

std::string ApplyWorkspaceLimits(GlobalOptions& global, Store& store, const std::string& user) {
  LxdContext c = Context(global);
  if (geteuid() != 0) {
    return fmt::format("{}'s workspace gets them when root creates it or runs `bmas user set`",
                       user);
  }
  auto lxd = global.services->Lxd(c.socket, std::chrono::seconds(10));
  lxd::LxdApi& client = *lxd;
  if (!client.Server()) {
    return fmt::format("LXD does not answer on {}: {}'s workspace gets them when it is created",
                       c.socket, user);
  }
  lxd::Workspaces workspaces(client, c.pool_driver);
  if (!workspaces.Get(user)) {
    return fmt::format("{} has no workspace yet: it gets them when it is created", user);
  }
  auto limits = LimitsFor(c.config, store, user);
  if (!limits) return limits.error().message;
  auto w = workspaces.SetLimits(user, *limits);
  if (!w) return fmt::format("{}'s workspace was not changed: {}", user, w.error().message);
  return fmt::format("{} now has cpus {}, memory {}, processes {}, disk {}", w->name,
                     OrDash(w->cpus), OrDash(w->memory), OrDash(w->processes),
                     !limits->disk.empty() && c.pool_driver != "btrfs" ? "not enforced on this pool"
                                                                      : OrDash(w->disk));
}

void LxdCommands::Register(CLI::App& app, GlobalOptions& global) {
  CLI::App* lxd = app.add_subcommand("lxd", "LXD on this machine, for workspaces");
  lxd->require_subcommand(1);
  CLI::App* up = lxd->add_subcommand(
      "up", "Start lxcfs and lxd if they are not running, raise inotify limits, prepare "
            "/etc/subuid and /etc/subgid, create the storage pool and the bmas profile "
            "(idempotent; needs root)");
  up->callback([this, &global] { global.exit_code = RunUp(global); });
  CLI::App* trust = lxd->add_subcommand(
      "trust", "Make this node's LXD trust exactly its peers' node certificates, those in "
               "<node_dir>/lxd-peers/HOST.crt that the cluster CA issued for HOST: adds new "
               "ones, removes those of nodes that left (needs root; `bmas lxd up` does it too)");
  trust->callback([this, &global] { global.exit_code = RunTrust(global); });
  CLI::App* down = lxd->add_subcommand(
      "down", "Stop what `bmas lxd up` started (its LXD's running containers first)");
  down->callback([this, &global] { global.exit_code = RunDown(global); });
  CLI::App* status = lxd->add_subcommand(
      "status", "LXD's socket, version, storage pool (and whether it enforces disk limits)");
  status->add_flag("--json", json_, "One JSON object");
  status->callback([this, &global] { global.exit_code = RunStatus(global); });

  CLI::App* image = app.add_subcommand("image", "Container images built on this machine");
  image->require_subcommand(1);
  CLI::App* build = image->add_subcommand(
      "build", "Build an image locally and import it into LXD (no image server needed)");
  build->add_option("--base", base_,
                    "debian (the default: Debian 12 with python3, venv, pip, git and "
                    "build-essential; minutes the first time, then from the cache) or busybox "
                    "(1 MB, for tests)")
      ->check(CLI::IsMember({"busybox", "debian"}))
      ->default_str("debian");
  build->add_option("--init", init_,
                    "debian: minimal (tini as PID 1; an idle workspace holds a few MiB) or "
                    "systemd (services run inside; ~20 MiB more per workspace)")
      ->check(CLI::IsMember({"minimal", "systemd"}))
      ->default_str("minimal");
  build->add_option("--alias", alias_, "Alias to give it (default: bmas-<base>)");
  build->add_option("--cache-dir", cache_dir_,
                    "Where built Debian images are kept and imported from without debootstrap "
                    "(\"\" = no cache)")
      ->default_str(lxd::kImageCacheDir);
  build->add_flag("--rebuild", rebuild_,
                  "Run debootstrap even when the cache holds the image (and replace it there)");
  build->callback([this, &global] { global.exit_code = RunImageBuild(global); });
  CLI::App* list_images = image->add_subcommand("list", "Images in LXD");
  list_images->add_flag("--json", json_, "Print a JSON array");
  list_images->callback([this, &global] { global.exit_code = RunImageList(global); });

  CLI::App* ws = app.add_subcommand(
      "workspace", "A persistent container per user, with the user's home and uid");
  ws->require_subcommand(1);
  create_ = ws->add_subcommand("create", "Create and start USER's workspace");
  create_->add_option("user", user_, "A Unix account on this host")->required();
  create_->add_option("--image", image_, "Image alias or fingerprint (default: the newest "
                                         "`bmas image build` made)");
  // Each limit's default: the user's (`bmas user set`), else the config's [workspace].
  create_->add_option("--cpus", limits_.cpus, "CPUs (limits.cpu; 0 = none; default: the user's, "
                                              "else the config's)")
      ->check(CLI::Range(0, 4096));
  create_->add_option("--memory", limits_.memory, "Memory, e.g. 4GiB (limits.memory)");
  create_->add_option("--processes", limits_.processes, "Most processes (limits.processes)")
      ->check(CLI::Range(0, 1 << 22));
  create_->add_option("--disk", limits_.disk,
                      "Root disk size, e.g. 20GiB (enforced on a btrfs pool only)");
  create_->add_flag("--allow-system-account", allow_system_account_,
                    "Also for uid 0 or a system account (outside UID_MIN..UID_MAX of "
                    "/etc/login.defs); refused otherwise");
  create_->callback([this, &global] { global.exit_code = RunWorkspace(global, "create"); });
  for (const char* verb : {"start", "stop", "delete"}) {
    CLI::App* c = ws->add_subcommand(verb, fmt::format("{} USER's workspace", verb == std::string("delete")
                                                                                  ? "Delete (the home stays)"
                                                                                  : verb));
    c->add_option("user", user_, "A Unix account on this host")->required();
    c->callback([this, &global, verb] { global.exit_code = RunWorkspace(global, verb); });
  }
  CLI::App* list = ws->add_subcommand("list", "Every workspace, its state and limits");
  list->add_flag("--json", json_, "Print a JSON array");
  list->callback([this, &global] { global.exit_code = RunWorkspace(global, "list"); });
  CLI::App* exec = ws->add_subcommand(
      "exec", "Run a command in USER's workspace as USER (exit code and output passed through; "
              "output arrives when the command ends)");
  exec->add_option("user", user_, "A Unix account on this host")->required();
  exec->add_option("command", command_, "The command and its arguments (after --)")->required();
  exec->callback([this, &global] { global.exit_code = RunWorkspace(global, "exec"); });
  CLI::App* shell = ws->add_subcommand(
      "shell", "A login shell in USER's workspace as USER (yours without USER): on a terminal, "
               "interactive with a terminal of the workspace's own; else running what stdin "
               "gives it to its end. Under sshd's ForceCommand, $SSH_ORIGINAL_COMMAND (ssh "
               "host CMD, scp, rsync) runs instead, as `sh -c CMD`, and its exit code is "
               "returned");
  shell->add_option("user", user_, "A Unix account on this host (default: you)");
  shell->callback([this, &global] { global.exit_code = RunWorkspace(global, "shell"); });
}

int LxdCommands::RunUp(GlobalOptions& global) {
  global.SetUpLogging();
  LxdContext c = Context(global);
  auto l = lxd::StartLocalLxd(c.config.lxd, c.state_dir, c.config.gpu.driver_root);
  if (!l) return ReportFailure("lxd up", l.error());
  fmt::print("bmas lxd: LXD ready on {}\n", l->socket);
  fmt::print("  storage pool {} ({}{})\n", lxd::kPoolName, l->pool_driver,
             l->pool_driver == "btrfs" ? ", copy-on-write, disk limits enforced"
                                       : ", disk limits NOT enforced");
  if (!l->pool_note.empty()) fmt::print("  {}\n", l->pool_note);
  if (!l->peer_note.empty()) fmt::print("  {}\n", l->peer_note);
  if (!c.config.lxd.listen.empty() && lxd::HasJoined(c.config.lxd)) {
    auto synced = SyncPeerTrust(global, c);
    if (!synced) return ReportFailure("lxd up", synced.error());
    fmt::print("  peer trust: {}\n", *synced);
  }
  fmt::print("  profile {}\n", lxd::kProfileName);
  for (const auto& d : l->started) {
    fmt::print("  started {} (pid {}), log {}\n", d.name, d.pid, d.log);
  }
  if (l->started.empty()) fmt::print("  started nothing: lxcfs and lxd were already running\n");
  fmt::print("  stop what it started with: bmas lxd down\n");
  return 0;
}

int LxdCommands::RunTrust(GlobalOptions& global) {
  global.SetUpLogging();
  LxdContext c = Context(global);
  auto synced = SyncPeerTrust(global, c);
  if (!synced) return ReportFailure("lxd trust", synced.error());
  fmt::print("bmas lxd: this node's LXD {}\n", *synced);
  return 0;
}

int LxdCommands::RunDown(GlobalOptions& global) {
  global.SetUpLogging();
  LxdContext c = Context(global);
  if (std::string refusal = RefuseWhatUpOwns(c.state_dir, "lxd", "bmas lxd down");
      !refusal.empty()) {
    fmt::print(stderr, "{}\n", refusal);
    return 1;
  }
  auto stopped = lxd::StopLocalLxd(c.state_dir);
  if (!stopped) return ReportFailure("lxd down", stopped.error());
  if (stopped->empty()) fmt::print("bmas lxd: nothing that `bmas lxd up` started was running\n");
  for (const std::string& s : *stopped) fmt::print("bmas lxd: stopped {}\n", s);
  return 0;
}

int LxdCommands::RunStatus(GlobalOptions& global) {
  LxdContext c = Context(global);
  auto lxd = global.services->Lxd(c.socket, std::chrono::seconds(5));
  lxd::LxdApi& client = *lxd;
  auto server = client.Server();
  std::string driver = c.pool_driver;
  if (server) {
    if (auto pools = client.StoragePools()) {
      for (const auto& p : *pools) {
        if (p.name == lxd::kPoolName) driver = p.driver;
      }
    }
  }
  auto local = lxd::ReadLocalLxd(c.state_dir);
  // What the other nodes' [lxd] peers must give for this one.
  std::string fingerprint;
  if (server) {
    if (auto f = lxd::CertificateFingerprint(server->certificate)) fingerprint = *f;
  }
  if (json_) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    Str(w, "socket", c.socket);
    Member(w, "running", static_cast<bool>(server));
    Str(w, "version", server ? server->version : "");
    Str(w, "pool_driver", driver);
    Member(w, "lxcfs", lxd::LxcfsServes());
    Member(w, "disk_limits_enforced", driver == "btrfs");
    Str(w, "https_address", server ? server->config["core.https_address"] : "");
    Str(w, "certificate_fingerprint", fingerprint);
    ObjectsMember(w, "peers", c.config.lxd.peers, [&](const LxdPeer& peer) {
      Str(w, "url", peer.url);
      Str(w, "fingerprint", peer.fingerprint);
    });
    const std::vector<DaemonProcess> none;
    ObjectsMember(w, "started", local ? local->started : none, [&](const DaemonProcess& d) {
      Str(w, "name", d.name);
      Member(w, "pid", d.pid);
      Member(w, "running", d.Runs());
    });
    w.EndObject();
    fmt::print("{}\n", buf.GetString());
    return server ? 0 : 1;
  }
  if (!server) {
    fmt::print("LXD on {}: not answering ({})\n", c.socket, server.error().message);
    return 1;
  }
  fmt::print("LXD {} on {}\n", server->version, c.socket);
  if (driver.empty()) {
    fmt::print("  storage pool {}: missing (`bmas lxd up` creates it)\n", lxd::kPoolName);
  } else {
    fmt::print("  storage pool {}: {} ({})\n", lxd::kPoolName, driver,
               driver == "btrfs" ? "copy-on-write; disk limits enforced"
                                 : "disk limits NOT enforced");
  }
  fmt::print("  lxcfs: {}\n", lxd::LxcfsServes()
                                 ? "serving /var/lib/lxcfs"
                                 : "NOT serving: workspaces show the host's memory and CPUs "
                                   "(`bmas lxd up` starts it)");
  const std::string https = server->config["core.https_address"];
  fmt::print("  for other nodes: {}\n",
             https.empty() ? "not listening ([lxd] listen)" : "listening on " + https);
  if (!https.empty()) {
    fmt::print("  certificate fingerprint (the other nodes' [lxd] peers give it): {}\n",
               fingerprint);
  }
  for (const LxdPeer& peer : c.config.lxd.peers) {
    fmt::print("  peer (jobs here copy a workspace from it): {} fingerprint {}\n", peer.url,
               peer.fingerprint);
  }
  if (local) {
    for (const auto& d : local->started) {
      fmt::print("  {:<6} pid {:<8} {} (started by bmas lxd up)\n", d.name, d.pid,
                 d.Runs() ? "running" : "stopped");
    }
  }
  return 0;
}

int LxdCommands::RunImageBuild(GlobalOptions& global) {
  global.SetUpLogging();
  LxdContext c = Context(global);
  if (geteuid() != 0) {
    return ReportFailure("image build",
                         Error{ErrorCode::kPermissionDenied,
                               "importing an image needs LXD's root-only socket: run as root", {}});
  }
  lxd::ImageBuildRequest request;
  request.base = base_;
  request.init = init_;
  request.alias = alias_;
  request.work_dir = c.state_dir;
  request.cache_dir = cache_dir_;
  request.rebuild = rebuild_;
  if (base_ == "debian" && !rebuild_) {
    fmt::print("bmas image: Debian 12 with python3, git and build-essential: from the cache {} "
               "when it is there, else debootstrap from apt's mirror (minutes)...\n",
               cache_dir_.empty() ? "(none)" : cache_dir_);
    std::fflush(stdout);
  }
  auto built = lxd::BuildImage(*global.services->Lxd(c.socket, std::chrono::seconds(600)),
                               request, global.services->env());
  if (!built) return ReportFailure("image build", built.error());
  const std::string how = built->existed      ? "LXD holds it already"
                          : built->from_cache ? "imported from " + built->cache_file
                          : built->cache_file.empty()
                              ? "built"
                              : "built, and kept in " + built->cache_file;
  fmt::print("bmas image: {} {} ({} bytes) in {:.1f} s, alias {}, fingerprint {}\n", base_, how,
             built->size, built->seconds, built->alias, built->fingerprint.substr(0, 12));
  return 0;
}

int LxdCommands::RunImageList(GlobalOptions& global) {
  LxdContext c = Context(global);
  auto images = global.services->Lxd(c.socket)->Images();
  if (!images) return ReportFailure("image list", images.error());
  if (json_) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartArray();
    for (const auto& i : *images) {
      w.StartObject();
      Str(w, "fingerprint", i.fingerprint);
      w.Key("aliases");
      w.StartArray();
      for (const auto& a : i.aliases) w.String(a.c_str());
      w.EndArray();
      auto base = i.properties.find("bmas.base");
      Str(w, "base", base == i.properties.end() ? "" : base->second);
      Member(w, "size", i.size);
      Str(w, "uploaded_at", i.uploaded_at);
      w.EndObject();
    }
    w.EndArray();
    fmt::print("{}\n", buf.GetString());
    return 0;
  }
  fmt::print("{:<14} {:<20} {:<9} {:>12} {}\n", "FINGERPRINT", "ALIASES", "BASE", "SIZE",
             "UPLOADED");
  for (const auto& i : *images) {
    std::string aliases;
    for (const auto& a : i.aliases) aliases += (aliases.empty() ? "" : ",") + a;
    auto base = i.properties.find("bmas.base");
    fmt::print("{:<14} {:<20} {:<9} {:>12} {}\n", i.fingerprint.substr(0, 12), OrDash(aliases),
               base == i.properties.end() ? "-" : base->second, i.size, i.uploaded_at.substr(0, 19));
  }
  return 0;
}

int LxdCommands::RunWorkspace(GlobalOptions& global, const std::string& verb) {
  const std::string command = "workspace " + verb;
  LxdContext c = Context(global);
  if (verb == "shell" && user_.empty()) {
    const passwd* me = getpwuid(geteuid());
    if (me == nullptr) {
      return ReportFailure(command, Error{ErrorCode::kNotFound,
                                          fmt::format("uid {} has no account", geteuid())});
    }
    user_ = me->pw_name;
  }
  if (verb != "list") {
    if (auto account = lxd::LookUpAccount(user_); !account) {
      return ReportFailure(command, account.error());
    }
  }
  // Under sshd's `ForceCommand bmas workspace shell`, what the client asked for (`ssh host
  // CMD`, scp, rsync) is in $SSH_ORIGINAL_COMMAND: it runs in the workspace as `sh -c CMD`, on
  // this process's stdin, stdout and stderr (a terminal only when ssh asked for one), and its
  // exit code is ours.
  const char* original = verb == "shell" ? std::getenv("SSH_ORIGINAL_COMMAND") : nullptr;
  const std::vector<std::string> forced =
      original != nullptr && *original != '\0'
          ? std::vector<std::string>{"sh", "-c", original}
          : std::vector<std::string>{};
  // Users reach their own workspace through the agent: LXD's socket is root's.
  if ((verb == "exec" || verb == "shell") && geteuid() != 0) {
    passwd* me = getpwuid(geteuid());
    if (me != nullptr && user_ == me->pw_name) {
      const std::string socket = AgentSocketPath(c.state_dir);
      if (verb == "exec") return RunAgentEnter(socket, command_);
      return forced.empty() ? RunAgentShell(socket) : RunAgentEnter(socket, forced);
    }
  }
  if (auto allowed = lxd::CheckCaller(geteuid(), verb == "list" ? std::string() : user_);
      !allowed) {
    return ReportFailure(command, allowed.error());
  }
  auto lxd = global.services->Lxd(c.socket);
  lxd::LxdApi& client = *lxd;
  lxd::Workspaces workspaces(client, c.pool_driver);
  if (verb == "create") {
    auto account = lxd::LookUpAccount(user_);
    if (!account) return ReportFailure(command, account.error());
    auto owner = lxd::CheckWorkspaceOwner(*account, lxd::ReadLoginDefs(), allow_system_account_);
    if (!owner) return ReportFailure(command, owner.error());
    auto given = [this](const char* flag) { return create_->count(flag) > 0; };
    auto store = global.services->OpenStore(c.state_dir);
    if (!store) return ReportFailure(command, store.error());
    auto stored = LimitsFor(c.config, **store, user_);
    if (!stored) return ReportFailure(command, stored.error());
    WorkspaceSettings limits = *stored;
    if (given("--cpus")) limits.cpus = limits_.cpus;
    if (given("--memory")) limits.memory = limits_.memory;
    if (given("--processes")) limits.processes = limits_.processes;
    if (given("--disk")) limits.disk = limits_.disk;
    auto w = workspaces.Create(user_, image_, limits);
    if (!w) return ReportFailure(command, w.error());
    fmt::print("bmas workspace: {} runs {}'s workspace (home {}; cpus {}, memory {}, processes "
               "{}, disk {})\n",
               w->name, user_, w->home, OrDash(w->cpus), OrDash(w->memory), OrDash(w->processes),
               !limits.disk.empty() && c.pool_driver != "btrfs" ? "not enforced on this pool"
                                                                 : OrDash(w->disk));
    return 0;
  }
  if (verb == "start" || verb == "stop" || verb == "delete") {
    auto r = verb == "start" ? workspaces.Start(user_)
             : verb == "stop" ? workspaces.Stop(user_)
                              : workspaces.Delete(user_);
    if (!r) return ReportFailure(command, r.error());
    fmt::print("bmas workspace: {} {}\n", lxd::WorkspaceName(user_),
               verb == "start" ? "started" : verb == "stop" ? "stopped" : "deleted");
    return 0;
  }
  if (verb == "list") {
    auto list = workspaces.List();
    if (!list) return ReportFailure(command, list.error());
    if (json_) {
      fmt::print("{}\n", JsonObjectArray(*list, [](JsonWriter& w, const auto& ws) {
        Str(w, "user", ws.user);
        Str(w, "name", ws.name);
        Member(w, "status", lxd::InstanceStatusName(ws.status));
        Str(w, "image", ws.image);
        // Counts as numbers; sizes as LXD holds them ("4GiB", "50%") and in bytes; null: no
        // limit.
        Member(w, "cpus", Count(ws.cpus));
        StrOrNull(w, "memory", ws.memory);
        Member(w, "memory_bytes", SizeBytes(ws.memory));
        Member(w, "processes", Count(ws.processes));
        StrOrNull(w, "disk", ws.disk);
        Member(w, "disk_bytes", SizeBytes(ws.disk));
        Str(w, "home", ws.home);
      }));
      return 0;
    }
    fmt::print("{:<16} {:<20} {:<8} {:>5} {:>8} {:>6} {:>7}  {}\n", "USER", "NAME", "STATE",
               "CPUS", "MEMORY", "PROCS", "DISK", "IMAGE");
    for (const auto& ws : *list) {
      fmt::print("{:<16} {:<20} {:<8} {:>5} {:>8} {:>6} {:>7}  {}\n", ws.user, ws.name, ws.status,
                 OrDash(ws.cpus), OrDash(ws.memory), OrDash(ws.processes), OrDash(ws.disk),
                 OrDash(ws.image));
    }
    return 0;
  }
  if (verb == "exec") {
    auto r = workspaces.Exec(user_, command_);
    if (!r) return ReportFailure(command, r.error());
    std::fwrite(r->out.data(), 1, r->out.size(), stdout);
    std::fwrite(r->err.data(), 1, r->err.size(), stderr);
    std::fflush(stdout);
    return r->exit_code;
  }
  // shell: LXD's exec through its websockets; on a pty when stdin is a terminal, else on pipes
  // so that a piped script's end reaches the shell.
  auto account = lxd::LookUpAccount(user_);
  auto w = workspaces.Get(user_);
  if (!w) return ReportFailure(command, w.error());
  if (w->status != lxd::InstanceStatus::kRunning) {
    return ReportFailure(command, Error{ErrorCode::kUnavailable,
                                        fmt::format("{}'s workspace is {}: `bmas workspace start "
                                                    "{}`",
                                                    user_, w->status, user_),
                                        {}});
  }
  lxd::ExecSpec spec;
  spec.command = forced.empty() ? std::vector<std::string>{"/bin/sh", "-l"} : forced;
  spec.user = account->uid;
  spec.group = account->gid;
  spec.cwd = account->home;
  const char* term = std::getenv("TERM");
  spec.environment = {{"HOME", account->home},
                      {"USER", account->name},
                      {"LOGNAME", account->name},
                      {"TERM", term != nullptr ? term : "xterm"},
                      {"PATH", "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"}};
  auto code =
      isatty(STDIN_FILENO)
          ? lxd::RunInteractive(client, c.socket, w->name, spec, STDIN_FILENO, STDOUT_FILENO)
          : lxd::RunPiped(client, c.socket, w->name, spec, STDIN_FILENO, STDOUT_FILENO,
                          STDERR_FILENO);
  if (!code) return ReportFailure(command, code.error());
  return *code;
}

}  // namespace bmas
