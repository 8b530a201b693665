#include "daemon/slurm_monitor.h"

#include <csignal>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/http_server.h"
#include "common/metrics.h"
#include "common/operator_auth.h"
#include "common/serve.h"
#include "daemon/services.h"

namespace bmas {
namespace {

std::string Label(const char* key, const std::string& value) {
  return fmt::format("{}=\"{}\"", key, EscapeLabelValue(value));
}

}  // namespace

std::string RenderSlurmMetrics(const SlurmSnapshot& s, int64_t jobs_recorded,
                               int64_t poll_errors) {
  MetricsRegistry r;
  r.AddGauge("bmas_slurm_up", "1 when the last poll of slurmrestd succeeded", "")
      .Set(s.reachable ? 1 : 0);
  r.AddCounter("bmas_slurm_poll_errors_total", "Polls of slurmrestd that failed", "")
      .Inc(static_cast<double>(poll_errors));
  r.AddCounter("bmas_slurm_jobs_recorded_total",
               "Finished jobs recorded in bmas's store for accounting", "")
      .Inc(static_cast<double>(jobs_recorded));
  r.AddGauge("bmas_mode", "The cluster's mode: 1 for the current one", "mode=\"lab\"")
      .Set(s.mode.research ? 0 : 1);
  r.AddGauge("bmas_mode", "", "mode=\"research\"").Set(s.mode.research ? 1 : 0);
  r.AddGauge("bmas_research_nodes", "Nodes reserved for research mode's users", "")
      .Set(static_cast<double>(s.mode.nodes.size()));
  r.AddGauge("bmas_research_users", "Users who own research mode's nodes", "")
      .Set(static_cast<double>(s.mode.users.size()));

  // Per (user, partition): running and pending jobs, GPUs held; per partition: pending jobs.
  struct Held {
    int running = 0, pending = 0, gpus = 0;
  };
  std::map<std::pair<std::string, std::string>, Held> held;
  std::map<std::string, int> pending;
  for (const JobInfo& j : s.jobs) {
    if (HoldsGpus(j.state)) {
      Held& h = held[{j.user, j.partition}];
      ++h.running;
      h.gpus += j.gpus;
    } else if (IsPending(j.state)) {
      ++held[{j.user, j.partition}].pending;
      ++pending[j.partition];
    }
  }
  for (const auto& [key, h] : held) {
    std::string labels = Label("user", key.first) + "," + Label("partition", key.second);
    r.AddGauge("bmas_slurm_jobs", "Jobs by user, partition and state (running or pending)",
               labels + ",state=\"running\"")
        .Set(h.running);
    r.AddGauge("bmas_slurm_jobs", "", labels + ",state=\"pending\"").Set(h.pending);
    r.AddGauge("bmas_slurm_gpus_held", "GPUs held by running jobs, by user and partition", labels)
        .Set(h.gpus);
  }
  for (const auto& [partition, n] : pending) {
    r.AddGauge("bmas_slurm_pending_jobs", "Jobs waiting to start, by partition",
               Label("partition", partition))
        .Set(n);
  }

  std::map<std::string, int> nodes_by_state;
  int gpus = 0, gpus_used = 0;
  for (const NodeInfo& n : s.nodes) {
    ++nodes_by_state[n.state];
    gpus += n.gpus;
    gpus_used += n.gpus_used;
  }
  for (const auto& [state, n] : nodes_by_state) {
    r.AddGauge("bmas_slurm_nodes", "Nodes by Slurm state", Label("state", state)).Set(n);
  }
  r.AddGauge("bmas_slurm_gpus", "GPUs in the cluster, allocated or not",
             "state=\"allocated\"")
      .Set(gpus_used);
  r.AddGauge("bmas_slurm_gpus", "", "state=\"idle\"").Set(gpus - gpus_used);
  return r.Render();
}

std::vector<JobRecord> FinishedJobRecords(const std::vector<JobInfo>& jobs,
                                          const std::string& cluster) {
  std::vector<JobRecord> out;
  for (const JobInfo& j : jobs) {
    if (!IsFinal(j.state) || j.end_time == 0) continue;
    JobRecord r;
    r.cluster = cluster;
    r.id = j.id;
    r.user = j.user;
    r.name = j.name;
    r.partition = j.partition;
    r.state = JobStateName(j.state);
    r.gpus = j.gpus;
    r.nodes = j.nodes;
    r.submit_time = j.submit_time;
    r.start_time = j.start_time;
    r.end_time = j.end_time;
    r.exit_code = j.exit_code;
    out.push_back(std::move(r));
  }
  return out;
}

int RunSlurmMonitor(const SlurmMonitorOptions& options) {
  auto store = OpenConfiguredStore(options.store_path);
  if (!store) {
    fmt::print(stderr, "bmas slurm monitor: {}\n", store.error().message);
    return 1;
  }
  std::signal(SIGPIPE, SIG_IGN);

  // The poll thread writes `text`; the server's thread reads it.
  std::mutex mu;
  std::condition_variable wake;
  bool stopping = false;
  std::string text = RenderSlurmMetrics({}, 0, 0);

  std::thread poller([&, store = std::move(*store)] {
    int64_t recorded = 0, errors = 0;
    std::string last_error;
    std::unique_lock lock(mu);
    while (!stopping) {
      lock.unlock();
      auto snapshot = options.poll();
      SlurmSnapshot s;
      if (snapshot) {
        s = std::move(*snapshot);
        s.reachable = true;
        // slurmctld's jobs, and slurmdbd's: those catch jobs that ended while no monitor ran.
        std::vector<JobRecord> finished = FinishedJobRecords(s.jobs, s.cluster);
        for (JobRecord& r : FinishedJobRecords(s.accounted, s.cluster)) {
          finished.push_back(std::move(r));
        }
        auto added = store->RecordJobs(finished);
        if (added) {
          recorded += *added;
        } else {
          spdlog::warn("bmas slurm monitor: {}", added.error().message);
        }
        if (!last_error.empty()) spdlog::info("bmas slurm monitor: slurmrestd answers again");
        last_error.clear();
      } else {
        ++errors;
        s.error = snapshot.error().message;
        if (s.error != last_error) spdlog::warn("bmas slurm monitor: {}", s.error);
        last_error = s.error;
      }
      std::string rendered = RenderSlurmMetrics(s, recorded, errors);
      lock.lock();
      text = std::move(rendered);
      wake.wait_for(lock, options.interval, [&] { return stopping; });
    }
  });

  net::io_context io(1);
  HttpServerOptions http;
  http.host = options.host;
  http.port = options.port;
  http.server_name = "bmas-slurm-monitor";
  HttpServer server(io, http, [&](HttpRequest& req, ResponseWriter& w) -> awaitable<void> {
    if (req.target() != "/health") {
      if (!co_await RequireOperator(req, w, options.operator_secret)) co_return;
    }
    if (req.target() == "/metrics") {
      std::string body;
      {
        std::lock_guard lock(mu);
        body = text;
      }
      co_await w.Send(http::status::ok, "text/plain; version=0.0.4", std::move(body));
    } else if (req.target() == "/health") {
      co_await w.Send(http::status::ok, "application/json", "{\"status\":\"ok\"}");
    } else {
      co_await w.SendError(http::status::not_found,
                           fmt::format("no such path {}: try /metrics or /health",
                                       std::string(req.target())));
    }
  });
  auto port = server.Listen();
  int exit_code = 0;
  if (!port) {
    fmt::print(stderr, "bmas slurm monitor: {}\n", port.error().message);
    exit_code = 1;
  } else {
    server.Start();
    // `bmas up` and the tests read this line: the URL ends it.
    fmt::print("bmas slurm monitor: listening on http://{}:{}\n", options.host, *port);
    std::fflush(stdout);
    ServeUntilSignalled(io, server, std::chrono::seconds(2), "bmas slurm monitor");
  }
  {
    std::lock_guard lock(mu);
    stopping = true;
  }
  wake.notify_all();
  poller.join();
  return exit_code;
}

}  // namespace bmas
