#pragma once

// `bmas dashboard`: the web dashboard. A refresh thread gathers the cluster's state every
// interval through bmas's own interfaces (Slurm through slurmrestd, the store, the gateway's
// /load, each agent's /gpus); the HTTP server answers pages, assets and /api/ from the last
// state. Sign-in is with a bmas API key, which starts a session cookie (HttpOnly,
// SameSite=Strict, expiring); /api/ also takes the key as `Authorization: Bearer`.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/result.h"
#include "daemon/slurm_monitor.h"

namespace bmas {

struct DashboardOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::chrono::milliseconds interval{2000};
  std::string store_path;
  // Polls Slurm; empty when there is none to watch.
  std::function<Result<SlurmSnapshot>()> poll_slurm;
  std::string gateway;              // "host:port" of the gateway's operator listener; "" = none
  // Each agent's metrics listener: a loopback "host:port", or "https://NODE:PORT", whose
  // certificate must chain to `ca_file` and name NODE (slurm/rest_client.h, HttpGet).
  std::vector<std::string> agents;
  std::string ca_file;
  // Sent to the gateway's and the agents' operator listeners (daemon/secret.h). A secret.
  std::string operator_secret;
  int64_t session_s = 8 * 3600;
  int64_t history_step_s = 10;      // one plot point per step
  size_t history_points = 360;      // an hour of points at 10 s (what every page load fetches)
};

// Serves until SIGINT or SIGTERM; prints "bmas dashboard: listening on URL" once ready.
// Returns the process exit code.
int RunDashboard(const DashboardOptions& options);

}  // namespace bmas
