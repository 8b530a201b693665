#pragma once

// An in-memory Slurm for unit tests of code that drives SlurmApi: submitted jobs are listed
// PENDING until the test starts, preempts or ends them; cancels are recorded.

#include <map>
#include <string>
#include <vector>

#include "slurm/rest_client.h"

namespace bmas {

class FakeSlurmApi final : public SlurmApi {
 public:
  Result<int64_t> Submit(const JobSpec& spec) override {
    if (fail_next_submit) {
      fail_next_submit = false;
      return Error{ErrorCode::kUnavailable, "fake: slurmrestd is down"};
    }
    JobInfo j;
    j.id = next_id++;
    j.name = spec.name;
    j.user = user;
    j.partition = spec.partition;
    j.state = JobState::kPending;
    j.gpus = spec.gpus_per_node;
    j.submit_time = 1;
    jobs[j.id] = j;
    specs[j.id] = spec;
    return j.id;
  }
  Result<std::vector<JobInfo>> Jobs() override {
    std::vector<JobInfo> out;
    for (const auto& [id, j] : jobs) out.push_back(j);
    return out;
  }
  Result<void> Cancel(int64_t id, int signal = 0) override {
    auto it = jobs.find(id);
    if (it == jobs.end()) return Error{ErrorCode::kNotFound, "fake: no such job"};
    cancelled.push_back(id);
    if (signal == 0) it->second.state = JobState::kCancelled;
    return {};
  }
  Result<std::vector<NodeInfo>> Nodes() override { return nodes; }
  Result<std::string> Ping() override { return std::string("22.05.8"); }
  Result<int64_t> ControllerTime() override { return controller_time; }
  Result<std::vector<JobInfo>> AccountedJobs(int64_t) override { return Jobs(); }
  Result<JobInfo> Job(int64_t id) override {
    auto it = jobs.find(id);
    if (it == jobs.end()) return Error{ErrorCode::kNotFound, "fake: no such job"};
    return it->second;
  }

  // Test controls.
  void Run(int64_t id, const std::string& node) {
    jobs[id].state = JobState::kRunning;
    jobs[id].nodes = {node};
    jobs[id].start_time = 2;
  }

  std::string user = "bmas";
  int64_t next_id = 100;
  bool fail_next_submit = false;
  std::map<int64_t, JobInfo> jobs;
  std::map<int64_t, JobSpec> specs;
  std::vector<int64_t> cancelled;
  std::vector<NodeInfo> nodes;
  int64_t controller_time = 1'700'000'000;
};

}  // namespace bmas
