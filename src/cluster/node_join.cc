#include "cluster/node_join.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <utility>
#include <sstream>

#include <toml++/toml.h>

#include "cluster/cluster_ca.h"
#include "cluster/join_protocol.h"
#include "cluster/join_tls.h"
#include "cluster/node_files.h"
#include "cluster/node_store.h"
#include "common/config.h"
#include "common/config_table.h"
#include "common/listen_socket.h"
#include "common/private_files.h"
#include "common/version.h"
#include "core/cluster.h"

namespace bmas::cluster {
namespace {

namespace fs = std::filesystem;

Error Step(const char* step, const Error& e) {
  return Error{e.code, fmt::format("{}: {}", step, e.message), e.param};
}

std::string In(const std::string& dir, const char* name) { return (fs::path(dir) / name).string(); }

// Whether this node holds a certificate for `host` from the CA the token pins.
bool AlreadyJoined(const JoinToken& token, const NodeJoinOptions& o, int64_t unix_now) {
  auto ca = ReadNodeFile(In(o.paths.config_dir, "ca.crt"));
  auto cert = ReadNodeFile(In(o.paths.config_dir, "node.crt"));
  auto key = ReadNodeFile(In(o.paths.config_dir, "node.key"));
  if (!ca || !*ca || !cert || !*cert || !key || !*key) return false;
  return CheckControllerCa(token, (*ca)->contents) &&
         VerifyPeerCertificate((*ca)->contents, (*cert)->contents, unix_now, o.host);
}

std::vector<std::string> SlurmdArgs(const JoinToken& token, const Cluster& inventory,
                                    const NodeJoinOptions& o) {
  std::vector<std::string> args = {
      "-D", "--conf-server",
      JoinHostPort(token.address, static_cast<uint16_t>(inventory.slurm.slurmctld_port))};
  if (o.dynamic) {
    const Node* node = inventory.FindNode(o.host);
    std::string conf;
    if (node != nullptr) {
      conf = fmt::format("CPUs={} RealMemory={}", node->cpus, node->memory_mib);
      if (node->gpus.count > 0) {
        conf += fmt::format(" Gres=gpu:{}:{}", node->gpus.type, node->gpus.count);
      }
    }
    args.push_back("-Z");
    if (!conf.empty()) args.insert(args.end(), {"--conf", conf});
  }
  return args;
}

// The node's LXD looks for its certificate, key and peers' certificates where the join puts
// them, whatever the controller's [lxd] node_dir says.
void SetLxdNodeDir(toml::table& root, const std::string& config_dir) {
  if (!root["lxd"].is_table()) root.insert_or_assign("lxd", toml::table{});
  root.get_as<toml::table>("lxd")->insert_or_assign("node_dir", config_dir);
}

// A node that had joined asks the controller again for its LXD peers (with its node.crt, no
// secret) and brings <config_dir>/lxd-peers/ to that set: the nodes that joined after it are
// added, and those the controller no longer names are removed.
Result<void> RefreshLxdPeers(const JoinToken& token, const NodeJoinOptions& o, FileInstall& files,
                             NodeJoinReport& report, int64_t unix_now) {
  auto ca = ReadNodeFile(In(o.paths.config_dir, "ca.crt"));
  auto cert = ReadNodeFile(In(o.paths.config_dir, "node.crt"));
  auto key = ReadNodeFile(In(o.paths.config_dir, "node.key"));
  if (!ca || !*ca || !cert || !*cert || !key || !*key) {
    return NotFound(fmt::format("{} lacks ca.crt, node.crt or node.key", o.paths.config_dir));
  }
  auto peers = RequestLxdPeers(token.address, token.port, (*ca)->contents,
                               {(*cert)->contents, (*key)->contents}, o.host, unix_now, o.timeout);
  if (!peers) return peers.error();
  auto wanted = LxdPeerFiles(*peers, o.paths.config_dir);
  if (!wanted) return wanted.error();
  for (const NodeFile& f : *wanted) {
    auto put = files.Put(f);
    if (!put) return put.error();
    if (*put) report.written.push_back(f.path);
  }
  const fs::path dir = fs::path(o.paths.config_dir) / "lxd-peers";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".crt" || peers->count(e.path().stem().string()) != 0) continue;
    if (fs::remove(e.path(), ec)) report.removed.push_back(e.path().string());
  }
  return {};
}

// When the controller's [store] url names PostgreSQL, the node's points at that server over
// TLS with the node's certificate beside `ca_path` (cluster/node_store.h); else it is left as is.
Result<void> PointStoreAtController(toml::table& root, const std::string& ca_path) {
  const std::string url = root["store"]["url"].value_or(std::string());
  const std::string controller = root["cluster"]["controller"]["name"].value_or(std::string());
  auto server = NodeStoreServerFor(url, controller);
  if (!server) return server.error();
  if (!*server) return {};
  if (!root["store"].is_table()) root.insert_or_assign("store", toml::table{});
  root.get_as<toml::table>("store")->insert_or_assign(
      "url", NodeStoreUrl(**server, fs::path(ca_path).parent_path().string()));
  return {};
}

}  // namespace

Result<std::vector<NodeFile>> LxdPeerFiles(const std::map<std::string, std::string>& peers,
                                           const std::string& config_dir) {
  std::vector<NodeFile> files;
  for (const auto& [host, pem] : peers) {
    if (!IsPeerHostName(host)) {
      return InvalidArgument(fmt::format("the controller named a peer '{}', which is not a host "
                                         "name: check the inventory's node names",
                                         host));
    }
    files.push_back({(fs::path(config_dir) / "lxd-peers" / (host + ".crt")).string(), pem, 0644,
                     0, 0});
  }
  return files;
}

bool ServesLxd(const std::string& bmas_toml) {
  try {
    toml::table root = toml::parse(bmas_toml);
    return !root["lxd"]["listen"].value_or(std::string()).empty();
  } catch (const toml::parse_error&) {
    return false;
  }
}

std::string FetchedSlurmConf(const std::string& spool_dir) {
  return (fs::path(spool_dir) / "conf-cache" / "slurm.conf").string();
}

Result<std::string> NodeBmasToml(const std::string& controller_toml, const std::string& ca_path) {
  toml::table root;
  try {
    root = toml::parse(controller_toml, std::string_view("the controller's bmas.toml"));
  } catch (const toml::parse_error& e) {
    return InvalidArgument(fmt::format("the controller's bmas.toml is not TOML (line {}: {}): fix "
                                       "the inventory that `bmas cluster serve` was given",
                                       e.source().begin.line, e.description()));
  }
  toml::table* cluster = root["cluster"].as_table();
  if (cluster == nullptr) {
    return InvalidArgument(
        "the controller's bmas.toml has no [cluster] table: give `bmas cluster serve` the "
        "cluster's inventory");
  }
  if (!(*cluster)["slurm"].is_table()) cluster->insert_or_assign("slurm", toml::table{});
  cluster->get_as<toml::table>("slurm")->insert_or_assign("slurmrestd_ca", ca_path);
  SetLxdNodeDir(root, fs::path(ca_path).parent_path().string());
  if (auto store = PointStoreAtController(root, ca_path); !store) return store.error();
  std::ostringstream out;
  out << "# Written by `bmas node join` from the controller's bmas.toml; slurmrestd_ca is this\n"
         "# node's copy of the cluster CA, which every user may read.\n"
      << root << '\n';
  return out.str();
}

Result<std::string> WithAgentListener(const std::string& node_toml, const std::string& address,
                                      const std::string& config_dir) {
  toml::table root;
  try {
    root = toml::parse(node_toml, std::string_view("the node's bmas.toml"));
  } catch (const toml::parse_error& e) {
    return InvalidArgument(fmt::format("the node's bmas.toml is not TOML (line {}: {})",
                                       e.source().begin.line, e.description()));
  }
  if (!root["agent"].is_table()) root.insert_or_assign("agent", toml::table{});
  toml::table& agent = *root.get_as<toml::table>("agent");
  uint16_t port = kAgentPort;
  if (auto given = agent["listen"].value<std::string>()) {
    if (auto hp = SplitHostPort(*given); hp && hp->second != 0) port = hp->second;
  }
  const bool v6 = address.find(':') != std::string::npos;
  agent.insert_or_assign("listen", v6 ? fmt::format("[{}]:{}", address, port)
                                      : fmt::format("{}:{}", address, port));
  agent.insert_or_assign("tls_cert", In(config_dir, "node.crt"));
  agent.insert_or_assign("tls_key", In(config_dir, "node.key"));
  agent.insert_or_assign("ca", In(config_dir, "ca.crt"));
  std::ostringstream out;
  out << root << '\n';
  return out.str();
}

Result<std::string> SourceAddressFor(const std::string& address, uint16_t port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (getaddrinfo(address.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) {
    return NotFound(fmt::format("cannot resolve {}", address));
  }
  const int fd = socket(found->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  // A UDP connect only picks the route and the source address.
  const bool ok = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int e = errno;
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  if (!ok) {
    return Error{
        ErrorCode::kUnavailable, fmt::format("no route to {}: {}", address, std::strerror(e)), {}};
  }
  char text[INET6_ADDRSTRLEN] = {};
  const void* at = local.ss_family == AF_INET
                       ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
                       : &reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr;
  inet_ntop(local.ss_family, at, text, sizeof text);
  return std::string(text);
}

namespace {

// The replica key and certificate: the key the replica account's alone (root's, and a note
// naming the fix, when there is no such account).
std::vector<NodeFile> ReplicaFiles(const NodeJoinOptions& o,
                                   const std::optional<std::pair<uid_t, gid_t>>& account,
                                   const std::string& key_pem, const std::string& cert_pem,
                                   NodeJoinReport& report) {
  if (!account) {
    report.notes.push_back(fmt::format(
        "there is no `{0}` account, which inference replicas run as: create it (the package "
        "does; or `useradd --system --no-create-home --shell /usr/sbin/nologin {0}`), then "
        "`chown {0} {1}/replica.key` and make {2}/replicas, the account's",
        o.replica_account, o.paths.config_dir, o.paths.state_dir));
  }
  const auto [uid, gid] = account.value_or(std::pair<uid_t, gid_t>{0, 0});
  return {{In(o.paths.config_dir, "replica.key"), key_pem, 0600, uid, gid},
          {In(o.paths.config_dir, "replica.crt"), cert_pem, 0644, 0, 0}};
}

// The replica jobs' working directory <state_dir>/replicas, the replica account's. The state
// directory must be root's alone (OpenPrivateDir), and the new directory is given away through
// a descriptor opened with no symlink on its path (HandDirTo): root's chown never follows a link.
Result<void> MakeReplicaDir(const NodeJoinOptions& o, uid_t uid, gid_t gid) {
  auto state = OpenPrivateDir(o.paths.state_dir, 0755);
  if (!state) return state.error();
  const bool made = mkdirat(*state, "replicas", 0700) == 0;
  const int err = errno;
  close(*state);
  const std::string dir = o.paths.state_dir + "/replicas";
  if (!made && err != EEXIST) {
    return Internal(fmt::format("cannot make {}: {}", dir, std::strerror(err)));
  }
  return HandDirTo(dir, uid, gid);
}

}  // namespace

Result<NodeJoinReport> JoinNode(const JoinToken& token, const NodeJoinOptions& o,
                                NodeDaemons& daemons, int64_t unix_now) {
  NodeJoinReport report;
  std::error_code ec;
  fs::create_directories(o.paths.run_dir, ec);
  if (ec) return Internal(fmt::format("cannot create {}: {}", o.paths.run_dir, ec.message()));

  std::string inventory_text;
  if (AlreadyJoined(token, o, unix_now)) {
    report.already_joined = true;
    auto toml = ReadNodeFile(In(o.paths.config_dir, "bmas.toml"));
    if (toml && *toml) inventory_text = (*toml)->contents;
  }

  FileInstall files;
  auto fail = [&](const char* step, const Error& e) {
    daemons.StopStarted();
    files.Undo();
    return Step(step, e);
  };
  if (report.already_joined) {
    // Not fatal: the node works with the peers it has, and a controller that is down must not
    // make a second join fail.
    if (auto ok = RefreshLxdPeers(token, o, files, report, unix_now); !ok) {
      report.notes.push_back(fmt::format(
          "the LXD peers were not refreshed ({}): run `bmas node join TOKEN` again once the "
          "join service answers",
          ok.error().message));
    }
  }
  if (!report.already_joined) {
    std::string address = o.address;
    if (address.empty()) {
      auto routed = SourceAddressFor(token.address, token.port);
      if (!routed) return Step("finding this node's address", routed.error());
      address = *routed;
    }
    auto csr = MakeNodeCsr({o.host, address});
    if (!csr) return Step("making this node's key", csr.error());
    auto replica_csr = MakeNodeCsr({o.host, address});
    if (!replica_csr) return Step("making the replicas' key", replica_csr.error());
    JoinRequest request;
    request.host = o.host;
    request.address = address;
    request.csr_pem = csr->csr_pem;
    request.replica_csr_pem = replica_csr->csr_pem;
    auto reply = RequestJoin(token, request, unix_now, o.timeout);
    if (!reply) return Step("asking the controller", reply.error());
    if (auto note = ReleaseMismatch(reply->bmas_version, kBmasVersion)) {
      report.notes.push_back(*note);
    }
    inventory_text = reply->bmas_toml;
    Cluster inventory;
    try {
      inventory = ParseCluster(inventory_text, "the controller's bmas.toml");
    } catch (const ConfigError& e) {
      return Step("reading the controller's bmas.toml", Internal(e.what()));
    }
    auto node_toml = NodeBmasToml(reply->bmas_toml, In(o.paths.config_dir, "ca.crt"));
    if (node_toml) node_toml = WithAgentListener(*node_toml, address, o.paths.config_dir);
    if (!node_toml) return Step("reading the controller's bmas.toml", node_toml.error());
    const passwd* munge = getpwnam("munge");
    if (munge == nullptr) {
      return Step("installing the munge key",
                  NotFound("there is no `munge` account: install munge"));
    }
    std::vector<NodeFile> wanted = {
        {o.paths.munge_key, reply->munge_key, 0400, munge->pw_uid, munge->pw_gid},
        {In(o.paths.config_dir, "ca.crt"), reply->ca_cert_pem, 0644, 0, 0},
        {In(o.paths.config_dir, "node.key"), csr->key_pem, 0600, 0, 0},
        {In(o.paths.config_dir, "node.crt"), reply->node_cert_pem, 0644, 0, 0},
        {In(o.paths.config_dir, "bmas.toml"), *node_toml, 0644, 0, 0},
        {o.paths.OperatorSecret(), reply->operator_secret + "\n", 0600, 0, 0},
    };
    std::optional<std::pair<uid_t, gid_t>> replica_account;
    if (const passwd* pw = getpwnam(o.replica_account.c_str()); pw != nullptr) {
      replica_account.emplace(pw->pw_uid, pw->pw_gid);
    }
    if (!reply->replica_cert_pem.empty()) {
      auto replica = ReplicaFiles(o, replica_account, replica_csr->key_pem,
                                  reply->replica_cert_pem, report);
      wanted.insert(wanted.end(), replica.begin(), replica.end());
    } else {
      report.notes.push_back(
          "the controller has no replica CA, so inference replicas here cannot serve TLS: run "
          "`bmas cluster init` again on the controller, then `bmas node leave` and join again");
    }
    if (!inventory.slurm.prolog.empty()) {
      wanted.push_back({inventory.slurm.prolog, reply->prolog, 0755, 0, 0});
    }
    if (!inventory.slurm.epilog.empty()) {
      wanted.push_back({inventory.slurm.epilog, reply->epilog, 0755, 0, 0});
    }
    auto peers = LxdPeerFiles(reply->lxd_peers, o.paths.config_dir);
    if (!peers) return Step("reading the controller's answer", peers.error());
    wanted.insert(wanted.end(), peers->begin(), peers->end());
    for (const NodeFile& f : wanted) {
      auto put = files.Put(f);
      if (!put) return fail("writing the node's files", put.error());
      if (*put) report.written.push_back(f.path);
    }
    if (!reply->replica_cert_pem.empty() && replica_account) {
      if (auto ok = MakeReplicaDir(o, replica_account->first, replica_account->second); !ok) {
        return fail("making the replicas' directory", ok.error());
      }
    }
  }

  Cluster inventory;
  try {
    inventory = ParseCluster(inventory_text, In(o.paths.config_dir, "bmas.toml"));
  } catch (const ConfigError& e) {
    return fail("reading bmas.toml", Internal(e.what()));
  }
  const bool new_munge_key = std::find(report.written.begin(), report.written.end(),
                                       o.paths.munge_key) != report.written.end();
  if (daemons.MungeRunning() && new_munge_key) {
    // It still holds the key it started with: the controller would refuse every credential.
    return fail("starting munged",
                Error{ErrorCode::kUnavailable,
                      fmt::format("munged already runs, with the key {} had before this join: "
                                  "stop it (e.g. systemctl stop munge), then run `bmas node "
                                  "join` again",
                                  o.paths.munge_key),
                      {}});
  }
  if (!daemons.MungeRunning()) {
    if (auto ok = daemons.StartMunge(o.paths); !ok) return fail("starting munged", ok.error());
    report.started.push_back("munged");
  }
  if (!daemons.SlurmdRunning(o.paths)) {
    const std::string cache = FetchedSlurmConf(inventory.slurm.spool_dir);
    if (auto ok = daemons.StartSlurmd(o.paths, SlurmdArgs(token, inventory, o), cache); !ok) {
      return fail("starting slurmd", ok.error());
    }
    report.started.push_back("slurmd");
  }
  if (ServesLxd(inventory_text)) {
    auto lxd = daemons.StartLxd(o.paths, In(o.paths.config_dir, "bmas.toml"));
    if (!lxd) return fail("starting LXD", lxd.error());
    report.lxd = *lxd;
    // Not fatal: workspaces wait for an image, Slurm and the agent do not.
    auto image = daemons.ImportDefaultImage(o.paths, In(o.paths.config_dir, "bmas.toml"));
    if (image) {
      report.image = *image;
    } else {
      report.notes.push_back("no default workspace image: " + image.error().message);
    }
  }
  if (!daemons.AgentRunning(o.paths)) {
    if (auto ok = daemons.StartAgent(o.paths, In(o.paths.config_dir, "bmas.toml")); !ok) {
      return fail("starting the agent", ok.error());
    }
    report.started.push_back("agent");
  }
  return report;
}

}  // namespace bmas::cluster
