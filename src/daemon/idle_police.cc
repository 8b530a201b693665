#include "daemon/idle_police.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "slurm/modes.h"

namespace bmas {

void IdlePolice::OnSample(const std::vector<GpuReading>& gpus,
                          const std::map<int, GpuHolder>& holders, int64_t now) {
  // Each job's GPUs on this node, by their utilisation, with the user of the process that
  // named the job (a cgroup name inside a workspace is its root's to choose).
  std::map<int64_t, std::vector<std::pair<std::string, double>>> util;
  for (const GpuReading& g : gpus) {
    const auto held = holders.find(g.index);
    if (held != holders.end() && held->second.job > 0) {
      util[held->second.job].emplace_back(held->second.user, static_cast<double>(g.util_pct));
    }
  }
  std::map<int64_t, JobInfo> seen;
  std::vector<JobGpuSample> samples;
  for (const auto& [id, held] : util) {
    auto known = jobs_.find(id);
    if (known == jobs_.end()) {
      auto info = hooks_.job(id);
      if (!info) {
        // Not judged without Slurm's word (its partition decides whether it is policed).
        spdlog::debug("bmas agent: idle GPUs: job {}: {}", id, info.error().message);
        continue;
      }
      known = jobs_.emplace(id, *info).first;
    }
    const JobInfo& job = known->second;
    seen.emplace(id, job);
    // Only GPUs whose process is the job's own user's count for it: another user's process in
    // a cgroup named after this job neither makes it look idle nor hides its own GPUs.
    std::vector<double> utils;
    for (const auto& [user, u] : held) {
      if (user == job.user) utils.push_back(u);
    }
    if (utils.empty()) continue;
    const bool replica = job.name.rfind(kReplicaJobPrefix, 0) == 0;
    // A job in the research reservation is in research mode: left alone.
    const std::string partition =
        job.reservation == slurm::kResearchReservation ? std::string() : job.partition;
    samples.push_back({id, job.user, partition, replica, utils});
  }
  jobs_ = std::move(seen);
  for (const IdleAction& a : DecideIdle(settings_, /*research_mode=*/false, samples, now,
                                        state_)) {
    auto job = jobs_.find(a.job_id);
    if (job != jobs_.end()) hooks_.act(a, job->second);
  }
}

Result<void> AppendToJobOutput(const JobInfo& job, const std::string& line) {
  if (job.stdout_path.empty()) return NotFound(fmt::format("job {} has no output file", job.id));
  passwd pwd{}, *pw = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(job.user.c_str(), &pwd, buf.data(), buf.size(), &pw) != 0 || pw == nullptr) {
    return NotFound(fmt::format("job {}: no account {}", job.id, job.user));
  }
  const int fd = open(job.stdout_path.c_str(),
                      O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    return Internal(fmt::format("cannot open {}: {}", job.stdout_path, std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != pw->pw_uid) {
    close(fd);
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("{} is not a file of {}'s: not written", job.stdout_path, job.user)};
  }
  const std::string text = line + "\n";
  const ssize_t n = write(fd, text.data(), text.size());
  close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return Internal(fmt::format("cannot write {}", job.stdout_path));
  }
  return {};
}

}  // namespace bmas
