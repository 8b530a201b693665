#include "common/config.h"

#include <unistd.h>

#include <cctype>
#include <cstdlib>

#include <fmt/format.h>
#include <toml++/toml.h>

#include "common/config_table.h"

namespace bmas {

namespace {

// [lxd] peers = [{ url = "https://HOST:8443", fingerprint = "..." }, ...]
std::vector<LxdPeer> ReadPeers(ConfigTable& lxd) {
  const std::string form =
      "each peer is { url = \"https://HOST:8443\", fingerprint = \"SHA-256 of its LXD "
      "certificate\" } (`bmas lxd status` on that node prints it)";
  std::vector<ConfigTable> tables;
  try {
    tables = lxd.TableArray("peers");
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}; {}", e.what(), form));
  }
  std::vector<LxdPeer> peers;
  for (ConfigTable& t : tables) {
    LxdPeer peer;
    peer.url = t.String("url", "");
    if (peer.url.rfind("https://", 0) != 0 || peer.url.size() == 8) {
      t.Invalid("url", fmt::format("\"{}\" is not another node's LXD; {}", peer.url, form));
    }
    const std::string given = t.String("fingerprint", "");
    peer.fingerprint = NormalizeFingerprint(given);
    if (peer.fingerprint.empty()) {
      t.Invalid("fingerprint", fmt::format("\"{}\" is not a SHA-256 fingerprint (64 hex "
                                           "digits); {}",
                                           given, form));
    }
    t.RejectUnknownKeys();
    peers.push_back(std::move(peer));
  }
  return peers;
}

}  // namespace

std::string NormalizeFingerprint(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == ':') continue;
    if (!std::isxdigit(static_cast<unsigned char>(c))) return "";
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out.size() == 64 ? out : "";
}

Config LoadConfig(const std::string& path) {
  Config config;
  if (path.empty()) return config;
  config.source = path;
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    if (e.source().begin.line == 0) {
      throw ConfigError(fmt::format("{}: cannot read the config file: {}", path, e.description()));
    }
    throw ConfigError(fmt::format("{}:{}: {}", path, e.source().begin.line, e.description()));
  }
  ConfigTable top(root, path, "");
  config.state_dir = top.String("state_dir", "");
  if (auto t = top.Table("engine")) {
    EngineSettings& e = config.engine;
    e.model = t->String("model", e.model);
    if (e.model.empty()) throw ConfigError(fmt::format("{}: engine.model must not be empty", path));
    e.profile = t->String("profile", e.profile);
    e.profiles_file = t->String("profiles_file", e.profiles_file);
    e.host = t->String("host", e.host);
    e.port = static_cast<int>(t->Int("port", e.port, 0, 65535));
    e.max_num_seqs = static_cast<int>(t->Int("max_num_seqs", 0, 0, 1 << 20));
    e.max_num_batched_tokens = static_cast<int>(t->Int("max_num_batched_tokens", 0, 0, 1 << 24));
    e.num_kv_blocks = static_cast<int>(t->Int("num_kv_blocks", 0, 0, 1 << 28));
    e.block_size = static_cast<int>(t->Int("block_size", 0, 0, 4096));
    e.max_model_len = static_cast<int>(t->Int("max_model_len", 0, 0, 1 << 24));
    e.scheduling_policy = t->String("scheduling_policy", e.scheduling_policy, {"fcfs", "priority"});
    e.prefix_caching = t->Bool("prefix_caching", e.prefix_caching);
    e.max_body_bytes = t->Int("max_body_bytes", e.max_body_bytes, 1024, int64_t{1} << 32);
    e.shutdown_timeout_s = static_cast<int>(t->Int("shutdown_timeout_s", 30, 0, 3600));
    e.default_chat_max_tokens =
        static_cast<int>(t->Int("default_chat_max_tokens", 256, 1, 1 << 24));
    e.api_key_file = t->String("api_key_file", e.api_key_file);
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("gateway")) {
    GatewaySettings& g = config.gateway;
    g.host = t->String("host", g.host);
    g.port = static_cast<int>(t->Int("port", g.port, 0, 65535));
    g.backends = t->StringArray("backends");
    g.unverified_backends = t->StringArray("unverified_backends");
    g.routing = t->String("routing", g.routing, {"cache_aware", "prefix_affinity", "least_load", "round_robin"});
    g.fairness = t->String("fairness", g.fairness, {"vtc", "none"});
    g.reserve_fraction = t->Double("reserve_fraction", g.reserve_fraction, 0, 0.9);
    g.default_capacity = static_cast<int>(t->Int("default_capacity", g.default_capacity, 1, 1 << 20));
    g.threads = static_cast<int>(t->Int("threads", g.threads, 1, 256));
    g.queue_timeout_s = t->Double("queue_timeout_s", g.queue_timeout_s, 0.001, 86400);
    g.max_body_bytes = t->Int("max_body_bytes", g.max_body_bytes, 1024, int64_t{1} << 32);
    g.shutdown_timeout_s = static_cast<int>(t->Int("shutdown_timeout_s", 30, 0, 3600));
    g.metrics_listen = t->String("metrics_listen", g.metrics_listen);
    g.key_cache_size = static_cast<int>(t->Int("key_cache_size", g.key_cache_size, 1, 1 << 24));
    g.upstream_idle_timeout_s =
        t->Double("upstream_idle_timeout_s", g.upstream_idle_timeout_s, 0.001, 86400);
    g.usage_flush_interval_s =
        t->Double("usage_flush_interval_s", g.usage_flush_interval_s, 0.01, 3600);
    g.backend_api_key_file = t->String("backend_api_key_file", g.backend_api_key_file);
    if (t->Has("shared_limits")) g.shared_limits = t->Bool("shared_limits", false);
    g.limits_when_store_down =
        t->String("limits_when_store_down", g.limits_when_store_down, {"closed", "open"});
    g.default_max_tokens = t->Int("default_max_tokens", g.default_max_tokens, 1, int64_t{1} << 30);
    if (t->Has("store_connections")) {
      g.store_connections = static_cast<int>(t->Int("store_connections", 1, 1, 64));
    }
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("up")) {
    config.up.engines = static_cast<int>(t->Int("engines", config.up.engines, 0, 64));
    config.up.engine_base_port = static_cast<int>(t->Int("engine_base_port", 0, 0, 65535));
    config.up.gateway = t->Bool("gateway", config.up.gateway);
    config.up.slurm = t->Bool("slurm", config.up.slurm);
    config.up.lxd = t->Bool("lxd", config.up.lxd);
    config.up.image = t->Bool("image", config.up.image);
    config.up.slurm_monitor_port =
        static_cast<int>(t->Int("slurm_monitor_port", 0, 0, 65535));
    config.up.dashboard = t->Bool("dashboard", config.up.dashboard);
    config.up.inference = t->String("inference", config.up.inference, {"slurm", "processes"});
    config.up.replica_scale_down_idle_s =
        t->Double("replica_scale_down_idle_s", config.up.replica_scale_down_idle_s, 1, 86400);
    config.up.replica_load_window_s =
        t->Double("replica_load_window_s", config.up.replica_load_window_s, 1, 3600);
    config.up.replica_breach_settle_s =
        t->Double("replica_breach_settle_s", config.up.replica_breach_settle_s, 0, 3600);
    config.up.timetable_lead_s =
        t->Double("timetable_lead_s", config.up.timetable_lead_s, 0, 86400);
    config.up.timezone = t->String("timezone", config.up.timezone);
    config.up.replica_port_base =
        static_cast<int>(t->Int("replica_port_base", config.up.replica_port_base, 1024, 64535));
    config.up.cluster = t->String("cluster", config.up.cluster);
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("lxd")) {
    LxdSettings& l = config.lxd;
    l.dir = t->String("dir", l.dir);
    l.storage_driver = t->String("storage_driver", l.storage_driver, {"auto", "btrfs", "dir"});
    l.pool_size = t->String("pool_size", l.pool_size);
    l.users = static_cast<int>(t->Int("users", l.users, 1, 100000));
    l.listen = t->String("listen", l.listen);
    if (!l.listen.empty() && l.listen.find(':') == std::string::npos) {
      throw ConfigError(fmt::format("{}: lxd.listen = \"{}\" needs a port: \"ADDRESS:8443\"", path,
                                    l.listen));
    }
    l.peers = ReadPeers(*t);
    l.cert = t->String("cert", l.cert);
    l.key = t->String("key", l.key);
    if (l.cert.empty() != l.key.empty()) {
      throw ConfigError(fmt::format("{}: lxd.cert and lxd.key go together: set both (a shared "
                                    "client certificate) or neither (each node's own)",
                                    path));
    }
    l.node_dir = t->String("node_dir", l.node_dir);
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("workspace")) {
    WorkspaceSettings& w = config.workspace;
    w.cpus = static_cast<int>(t->Int("cpus", w.cpus, 0, 4096));
    w.memory = t->String("memory", w.memory);
    w.processes = static_cast<int>(t->Int("processes", w.processes, 0, 1 << 22));
    w.disk = t->String("disk", w.disk);
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("gpu")) {
    config.gpu.driver_root = t->String("driver_root", config.gpu.driver_root);
    if (!config.gpu.driver_root.empty() && config.gpu.driver_root[0] != '/') {
      throw ConfigError(
          fmt::format("{}: gpu.driver_root = \"{}\" must be an absolute path "
                      "(\"/\" on a node) or \"\" for none",
                      path, config.gpu.driver_root));
    }
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("telemetry")) {
    TelemetrySettings& m = config.telemetry;
    m.nvml_library = t->String("nvml_library", m.nvml_library);
    m.interval_s = t->Double("interval_s", m.interval_s, 0.1, 3600);
    m.node = t->String("node", m.node);
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("dashboard")) {
    DashboardSettings& d = config.dashboard;
    d.listen = t->String("listen", d.listen);
    if (d.listen.find(':') == std::string::npos) {
      throw ConfigError(fmt::format("{}: dashboard.listen = \"{}\" needs a port: "
                                    "\"127.0.0.1:8080\" (0 = any free port)",
                                    path, d.listen));
    }
    d.refresh_s = t->Double("refresh_s", d.refresh_s, 0.1, 3600);
    d.session_hours = static_cast<int>(t->Int("session_hours", d.session_hours, 1, 24 * 30));
    d.agents = t->StringArray("agents");
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("agent")) {
    AgentSettings& a = config.agent;
    a.listen = t->String("listen", a.listen);
    if (a.listen.find(':') == std::string::npos) {
      t->Invalid("listen", "needs a port: \"10.0.0.11:9400\" (0 = any free port)");
    }
    a.tls_cert = t->String("tls_cert", a.tls_cert);
    a.tls_key = t->String("tls_key", a.tls_key);
    if (a.tls_cert.empty() != a.tls_key.empty()) {
      t->Invalid(a.tls_cert.empty() ? "tls_cert" : "tls_key",
                 "give tls_cert and tls_key together (the certificate and its key)");
    }
    a.ca = t->String("ca", a.ca);
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("idle")) {
    IdleGpuSettings& i = config.idle;
    i.enabled = t->Bool("enabled", i.enabled);
    i.threshold_pct = t->Double("threshold_pct", i.threshold_pct, 0, 100);
    i.warn_after_min = t->Double("warn_after_min", i.warn_after_min, 0.01, 7 * 24 * 60);
    i.cancel_after_min = t->Double("cancel_after_min", i.cancel_after_min, 0.01, 7 * 24 * 60);
    if (i.cancel_after_min < i.warn_after_min) {
      t->Invalid("cancel_after_min", "must be at least warn_after_min (a job is warned first)");
    }
    if (t->Has("partitions")) i.partitions = t->StringArray("partitions");
    t->RejectUnknownKeys();
  }
  if (auto t = top.Table("store")) {
    // The file is read by every user's bmas: a password in it would be theirs too.
    const std::string& url = config.store.url = t->String("url", "");
    if (!url.empty() && url.rfind("postgresql://", 0) != 0 && url.rfind("postgres://", 0) != 0) {
      t->Invalid("url",
                 "give a PostgreSQL URL: postgresql://USER@HOST:PORT/DATABASE (leave it "
                 "out for the embedded SQLite store)");
    }
    const size_t at = url.find('@');
    const size_t colon = url.find(':', url.find("://") + 3);
    if ((at != std::string::npos && colon < at && url.find('/', url.find("://") + 3) > at) ||
        url.find("password=") != std::string::npos) {
      t->Invalid("url",
                 "holds a password, and every user reads this file: remove it, and put "
                 "it in a libpq password file that only the store's users read (passfile= "
                 "in the URL, or ~/.pgpass), or in BMAS_STORE_URL");
    }
    t->RejectUnknownKeys();
  }
  // [cluster] is the inventory: LoadCluster (core/cluster.h) reads and checks it.
  top.Table("cluster");
  top.RejectUnknownKeys();
  return config;
}

std::string ResolveStateDir(const std::string& flag, const Config& config) {
  if (!flag.empty()) return flag;
  if (const char* env = std::getenv("BMAS_STATE_DIR"); env != nullptr && *env != '\0') return env;
  if (!config.state_dir.empty()) return config.state_dir;
  return kDefaultStateDir;
}

std::string DefaultConfigPath() {
  if (const char* env = std::getenv("BMAS_CONFIG"); env != nullptr) return env;
  return access(kSystemConfigPath, F_OK) == 0 ? kSystemConfigPath : "";
}

}  // namespace bmas
