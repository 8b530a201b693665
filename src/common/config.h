#pragma once

// bmas's configuration file (TOML). Every key is optional; examples/bmas.toml documents each
// key with its default. Command-line flags override the file.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bmas {

struct EngineSettings {
  std::string model = "meta-llama/Llama-3.1-8B-Instruct";
  std::string profile = "llama-3.1-8b-h100";
  std::string profiles_file;  // extra profiles; "" = built-in only
  std::string host = "127.0.0.1";
  int port = 0;               // 0 = any free port
  int max_num_seqs = 0;       // 0 = the profile's value
  int max_num_batched_tokens = 0;
  int num_kv_blocks = 0;
  int block_size = 0;
  int max_model_len = 0;
  std::string scheduling_policy = "fcfs";
  bool prefix_caching = true;
  int64_t max_body_bytes = 4 << 20;
  int shutdown_timeout_s = 30;
  int default_chat_max_tokens = 256;
  // vLLM's --api-key: /v1/* then requires `Authorization: Bearer KEY`. A secret: read from the
  // file `api_key_file` (which must not be readable by others) or $VLLM_API_KEY, never from
  // the config file itself.
  std::string api_key_file;
  std::string api_key;  // `--api-key` only, never read from the file
  // Seconds the engine waits before it listens, as vLLM does while it loads: 0 starts at once;
  // nullopt takes the profile's startup_s (`--startup-s profile`).
  std::optional<double> startup_s = 0.0;
};

struct GatewaySettings {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port
  std::vector<std::string> backends;  // base URLs; more can be added with `bmas gateway backend`
  // Backends not challenged for their identity (real vLLM): only safe where no user can bind
  // their port. See GatewayOptions::unverified_backends.
  std::vector<std::string> unverified_backends;
  std::string routing = "cache_aware";  // cache_aware, prefix_affinity, least_load, round_robin
  std::string fairness = "vtc";             // vtc or none (FCFS)
  double reserve_fraction = 0.25;
  int default_capacity = 64;
  int threads = 1;  // worker threads serving connections
  double queue_timeout_s = 30;
  int64_t max_body_bytes = 4 << 20;
  int shutdown_timeout_s = 30;
  // /metrics (user names, per-user tokens) is served only here: "host:port", "" = nowhere.
  std::string metrics_listen = "127.0.0.1:0";
  int key_cache_size = 10000;            // API keys remembered (LRU)
  double upstream_idle_timeout_s = 30;   // a backend silent this long: 504 or error event
  // How often metered usage goes to the store (`bmas usage`, quotas of the day); what is not
  // there yet is in the usage journal beside the store, so a killed gateway loses none of it.
  double usage_flush_interval_s = 0.5;
  // The backend secret, from which each backend's key (its --api-key) is derived: read from
  // this file (not readable by others) or $BMAS_BACKEND_API_KEY.
  std::string backend_api_key_file;
  // Limits shared through the store (Store::Reserve/Settle), exact across gateways on one
  // store. nullopt: on when the store is PostgreSQL (the only store two gateways can share).
  std::optional<bool> shared_limits;
  // When shared limits cannot reach the store: "closed" refuses requests (503), "open" falls
  // back to this gateway's own limits.
  std::string limits_when_store_down = "closed";
  // Output tokens reserved for a request that gives no max_tokens (its worst case).
  int64_t default_max_tokens = 1024;
  // Connections to the store that the gateway uses at once (its store threads). nullopt: 4 on
  // PostgreSQL (two round trips per request with shared limits), 1 on SQLite (one writer).
  std::optional<int> store_connections;
};

struct UpSettings {
  int engines = 2;  // simulated engines `bmas up` starts
  int engine_base_port = 0;  // engine i listens on base + i; 0 = any free ports
  bool gateway = true;       // start a gateway in front of the engines
  bool slurm = true;         // start a local Slurm (root, Slurm installed)
  int slurm_monitor_port = 0;  // `bmas slurm monitor`'s /metrics; 0 = any free port
  bool lxd = true;             // start and prepare LXD for workspaces (root, LXD installed)
  // With lxd: put the default workspace image (bmas-debian) in an LXD that has none, from
  // /var/cache/bmas/images when it is there, else built (debootstrap: minutes, once).
  bool image = true;
  bool dashboard = true;       // start the web dashboard (bmas dashboard)
  // How the engines run: "slurm" (an inference deployment of [engine] model, its replicas
  // Slurm jobs sized to load by `bmas inference controller`, when a Slurm runs) or
  // "processes" (plain engine processes, a fixed set).
  std::string inference = "slurm";
  int replica_port_base = 18100;  // replicas listen on the lowest free port from here
  double replica_scale_down_idle_s = 300;  // low load this long before a replica goes
  double replica_load_window_s = 60;  // the autoscaler smooths the load over this long
  double replica_breach_settle_s = 30;  // a new replica's time to show in TTFT before more
  // Timetable floors (`inference deploy --timetable`): their replicas start this long ahead,
  // and their times are read in this tz database zone ("" = the machine's: $TZ, /etc/localtime).
  double timetable_lead_s = 120;
  std::string timezone;
  // The local Slurm's inventory (examples/cluster-local-mig.toml); "" = the built-in 3 nodes of
  // 4 fake GPUs.
  std::string cluster;
};

// The web dashboard (`bmas dashboard`).
struct DashboardSettings {
  std::string listen = "127.0.0.1:0";  // "host:port"; 0 = any free port
  double refresh_s = 2;                 // how often it reads Slurm, the store, gateway, agents
  int session_hours = 8;                // a sign-in lasts this long
  // Each agent's metrics listener it reads /gpus from: a loopback "host:port", or
  // "https://NODE:PORT" checked against [agent] ca (`--agent` adds more).
  std::vector<std::string> agents;
};

// Each node's agent: its metrics listener (/metrics, /gpus, /health, behind the operator
// secret), and how bmas's clients of agents check them.
struct AgentSettings {
  // "host:port" (0 = any free port). Off loopback it serves TLS only (agent/agent_listen.h).
  std::string listen = "127.0.0.1:0";
  // The listener's certificate and key (PEM files); "" = none on loopback, and off it the
  // node's own, /etc/bmas/node.crt and node.key (`bmas node join` writes them).
  std::string tls_cert;
  std::string tls_key;
  // The CA an https:// agent's certificate must chain to, for the dashboard and `bmas agent
  // get` (the cluster CA, which `bmas node join` writes).
  std::string ca = "/etc/bmas/ca.crt";
};

// LXD as `bmas lxd up` runs it, and the defaults of `bmas workspace create`.
// Another node's LXD, and the SHA-256 fingerprint its server certificate must have (`bmas lxd
// status` on that node prints it). bmas trusts no peer on first use: an unprivileged user can
// listen on a peer's port first.
struct LxdPeer {
  std::string url;          // "https://node02:8443"
  std::string fingerprint;  // 64 lowercase hex digits
};

struct LxdSettings {
  std::string dir = "/var/lib/lxd";  // LXD_DIR: its data and its socket (<dir>/unix.socket)
  std::string storage_driver = "auto";  // auto (btrfs, else dir), btrfs or dir
  std::string pool_size = "20GiB";      // the btrfs loop file's size
  int users = 300;  // id ranges in /etc/subuid and /etc/subgid are sized for this many
  // Across nodes (a real cluster): `listen` is this LXD's core.https_address ("" = none); the
  // peers are the other nodes' LXDs ("https://node02:8443"), where a job's prolog looks for a
  // workspace this node lacks and copies it from. The client certificate bmas shows them
  // (lxd/peer_trust.h, ChoosePeerIdentity): `cert`/`key` when set (the old way: one file shared
  // by every node, which `bmas lxd up` makes when absent and has its LXD trust); else, on a node
  // that joined, its own <node_dir>/node.crt and node.key; else /etc/bmas/lxd-peer.crt/.key.
  // A joined node's LXD trusts exactly the node certificates in <node_dir>/lxd-peers/.
  std::string listen;
  std::vector<LxdPeer> peers;
  std::string cert;
  std::string key;
  std::string node_dir = "/etc/bmas";  // what `bmas node join` left: ca.crt, node.crt, node.key
};

// Limits of a new workspace; 0 or "" = none.
struct WorkspaceSettings {
  int cpus = 0;
  std::string memory;  // "4GiB"
  int processes = 0;
  std::string disk;    // "20GiB"; enforced on btrfs only
};

// Each agent's GPU telemetry (NVML, loaded at run time) and what it exports.
struct TelemetrySettings {
  std::string nvml_library;  // "" = libnvidia-ml.so.1 wherever the loader finds it
  double interval_s = 10;    // between samples; the dcgm-exporter's default is 30 s
  std::string node;          // the Hostname label; "" = this machine's host name
};

// What a job's workspace gets beside its GPUs (lxd/cuda_devices.h): the NVIDIA driver's
// user-space files found under `driver_root` ("/" on a node; another directory where the driver
// lives elsewhere; "" = none), bind-mounted read-only at the same paths inside.
struct GpuSettings {
  std::string driver_root = "/";
};

// Idle-GPU policing by each agent (idle/idle_policy.h): a job whose GPUs all stay under
// `threshold_pct` is warned after `warn_after_min`, cancelled after `cancel_after_min`.
struct IdleGpuSettings {
  bool enabled = true;
  double threshold_pct = 1.0;
  double warn_after_min = 60;
  double cancel_after_min = 120;
  std::vector<std::string> partitions = {"lab"};  // where it applies
};

// Where the state store is. $BMAS_STORE_URL, when set, wins over `url`.
struct StoreSettings {
  // "" = the embedded SQLite store under the state dir; else a PostgreSQL URL
  // (postgresql://USER@HOST:PORT/DATABASE) that holds no password (the file is every user's).
  std::string url;
};

struct Config {
  std::string source;     // the file read, or "" for defaults only
  std::string state_dir;  // "" = $BMAS_STATE_DIR or the default
  EngineSettings engine;
  GatewaySettings gateway;
  UpSettings up;
  LxdSettings lxd;
  WorkspaceSettings workspace;
  TelemetrySettings telemetry;
  GpuSettings gpu;
  IdleGpuSettings idle;
  DashboardSettings dashboard;
  AgentSettings agent;
  StoreSettings store;
};

// "AB:cd:..." or "abcd..." as 64 lowercase hex digits; "" when it is not a SHA-256 fingerprint.
std::string NormalizeFingerprint(std::string_view text);

// Reads `path`; "" gives the defaults. Throws ConfigError naming file, line and key.
Config LoadConfig(const std::string& path);

// The cluster's own config, read by every user's bmas: an admin writes it once per node, and
// `bmas up` writes it when absent (for the default state dir).
inline constexpr const char* kSystemConfigPath = "/etc/bmas/bmas.toml";
inline constexpr const char* kDefaultStateDir = "/var/lib/bmas";

// The config file to read when no --config is given: $BMAS_CONFIG when set (empty: none, as
// the tests set it), else kSystemConfigPath when it exists, else "" (the defaults).
std::string DefaultConfigPath();

// The state directory: `flag`, else $BMAS_STATE_DIR, else the config's, else /var/lib/bmas
// for every user (the cluster's: a user never gets a private one by accident).
std::string ResolveStateDir(const std::string& flag, const Config& config);

}  // namespace bmas
