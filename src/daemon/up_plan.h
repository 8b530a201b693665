#pragma once

// What `bmas up` runs, decided apart from running it. PlanUp takes up's options and what was
// found on the machine (UpFacts, gathered by up.cc) and returns the parts to start, in order,
// with their command lines, ports and environment, and what up does besides: Slurm, LXD, the
// inference deployment, the summary's notes. It is pure (no I/O, no clock, no files); up.cc
// runs the plan and supervises what it started (daemon/up_children.h).
//
// What only running can tell stays with the runner, named in the plan: a URL that a part prints
// when it starts (the engines' for the gateway, the gateway's operator listener for the
// controller and the dashboard, the agent's for the dashboard) is a link; a part that needs
// LXD is skipped when LXD did not start. Slurm's start is the one outcome that changes the plan
// itself: when it fails, up sets UpFacts::slurm_start_error and asks PlanUp again.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "daemon/up.h"

namespace bmas {

// What up finds on the machine before it starts anything.
struct UpFacts {
  // The account that runs the parts facing the network: its name ("" when they run as up's
  // user, and service_why_not says why) and the prefix that starts a command as it.
  std::string service_name;
  std::string service_why_not;
  std::vector<std::string> service_prefix;
  uid_t euid = 0;
  // The bmas up that died and left parts running (0: none), and what it owned.
  pid_t previous_pid = 0;
  bool previous_owns_slurm = false;
  bool previous_owns_lxd = false;
  // A local Slurm that runs in the state dir already: its REST URL ("" when none).
  std::string slurm_running_url;
  // Why this machine cannot run a local Slurm ("" when it can; asked only with [up] slurm).
  std::string slurm_why_not;
  // Why up's start of a local Slurm failed: set by up, which then plans again.
  std::string slurm_start_error;
  // Why this machine cannot run LXD ("" when it can; asked only with [up] lxd).
  std::string lxd_why_not;
  // For the cluster's config (kSystemConfigPath): whether it exists, and whether the state dir
  // is kDefaultStateDir.
  bool system_config_exists = false;
  bool default_state_dir = false;
  // [cluster.slurm] slurmrestd of up's inventory ([up] cluster, else the config's [cluster])
  // when it is "https://HOST:PORT": other nodes reach this Slurm through a TLS front there.
  std::string slurmrestd_https;
  // [cluster.slurm] slurmrestd of up's config (not [up] cluster's) when [up] slurm = false: the
  // cluster's own Slurm, run as the system's services (a real controller), which up uses and
  // neither starts nor stops ("" when none).
  std::string cluster_slurm;
  // The state dir holds the replica CA's public copy (`bmas cluster init` made the cluster's
  // identity here): the nodes' joins wrote replica certificates, which the replicas serve with.
  bool replica_ca = false;
};

enum class UpSlurm {
  kNone,          // not asked for ([up] slurm = false)
  kAdopt,         // the dead up's Slurm still runs: this up owns it, and stops it
  kLeaveRunning,  // `bmas slurm up`'s runs: left alone
  kCannot,        // not started, and slurm_line says why
  kStart,         // up starts one
  kCluster,       // [up] slurm = false and the config names the cluster's slurmrestd: used
};

enum class UpLxd {
  kNone,    // not asked for ([up] lxd = false)
  kCannot,  // not started, and lxd_line says why
  kStart,   // up starts it (or prepares the one that runs)
};

enum class UpPartKind {
  kEngine,
  kGateway,
  kController,
  kSlurmMonitor,
  kTlsFront,
  kAgent,
  kDashboard
};

// A socket up holds for a part (HoldListener) and passes on its command line.
struct UpListenerPlan {
  std::string flag;        // "--port"
  std::string host;
  uint16_t port = 0;       // 0: any free port
  bool pass_host = false;  // the flag takes "host:port" (else the port alone)
  // Why it cannot be held, found while planning (a bad address in the config): for a part up
  // cannot do without, the whole message up fails with; else the summary's "not started: ...".
  std::string error;
  std::string bind_error_prefix;  // before the error when binding fails
};

// A value only a started part knows, passed as `flag VALUE` (once per value).
enum class UpLinkTo {
  kEngines,         // each engine's URL
  kGatewayMetrics,  // host:port of the gateway's operator listener
  kAgent,           // host:port of the agent's listener
  kSlurmRest,       // host:port of the local Slurm's (loopback) slurmrestd
};
struct UpLink {
  UpLinkTo to;
  std::string flag;
  bool required = false;  // the part is not started when there is no value
};

enum class UpScrape { kNo, kUrl, kMetricsUrl };  // what prometheus.yml scrapes of a part

struct UpPartPlan {
  UpPartKind kind = UpPartKind::kEngine;
  std::string name;  // "engine-0", "gateway", "controller", "slurm-mon", "tls-front", "agent",
                     // "dashboard"
  std::string log;   // its log's path
  // Its command line: args, then each listener's flag and value, each link's, then trailing_args.
  std::vector<std::string> args;
  std::vector<UpListenerPlan> listeners;
  std::vector<UpLink> links;
  std::vector<std::string> trailing_args;
  std::string port_flag;     // the flag pinned after the first start ("" when none)
  bool backend_key = false;  // BMAS_BACKEND_API_KEY in its environment
  // Up fails when it does not start (and says "<fail_label> <why>"); else the summary says
  // "not started: <why>" and up goes on.
  bool essential = false;
  std::string fail_label;
  bool needs_lxd = false;   // started only when LXD is ready
  std::string private_dir;  // made 0750, the service account's, before it starts ("" none)
  // Its summary line: "<name> <URL, or `shown` when set> <what>", then its log.
  std::string shown;
  std::string what;
  bool what_names_metrics = false;  // the line goes on ": <URL>/metrics"
  bool what_names_operator_metrics = false;  // "; operator metrics: <metrics URL>" when one
  UpScrape scrape = UpScrape::kNo;
  // In the summary: with the engines and the gateway (before the notes) or after Slurm's line.
  bool serving = false;
};

struct UpPlan {
  UpSlurm slurm = UpSlurm::kNone;
  std::string slurm_line;  // the summary's line, except after a start, which only it can tell
  bool owns_slurm = false;  // this up stops the Slurm when it stops (kStart: when it started)
  bool slurm_runs = false;  // a local Slurm runs once the Slurm step is done
  // With a Slurm, the engines are an inference deployment whose replicas are Slurm jobs; else
  // plain processes, and inference_why says why.
  bool elastic = false;
  std::string inference_why;
  std::vector<std::string> deploy;  // `bmas inference deploy ...`, run first; empty when none
  std::string model;                // [engine] model, for the deployment's failure
  UpLxd lxd = UpLxd::kNone;
  std::string lxd_line;  // kCannot's summary line
  size_t lxd_at = 0;     // LXD is brought up before parts[lxd_at]
  // Once LXD is up, the default workspace image goes in when LXD has none ([up] image).
  bool default_image = false;
  bool previous_owns_lxd = false;  // the dead up's LXD, if it still runs, is this one's
  std::vector<UpPartPlan> parts;   // in start order
  std::string notes;  // the summary's lines on how the engines run, after the parts'
  bool write_system_config = false;
  bool key_hint = false;  // prints how to get a key for the gateway
  std::chrono::seconds stop_grace{5};  // how long the parts get to stop on Ctrl-C
};

// `bmas --state-dir DIR [--config FILE]`: the start of a part's command line.
std::vector<std::string> SelfArgs(const UpOptions& options);

UpPlan PlanUp(const UpOptions& options, const UpFacts& facts);

}  // namespace bmas
