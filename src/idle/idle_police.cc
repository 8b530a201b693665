#include "idle/idle_police.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/cluster.h"
#include "slurm/modes.h"

namespace bmas {

void IdlePolice::OnSample(const std::vector<GpuReading>& gpus,
                          const std::map<int, GpuHolder>& holders, int64_t now,
                          const MigHolders& mig_holders) {
  auto jobs = hooks_.jobs();
  if (!jobs) {
    // Not judged without Slurm's word: its allocations say which GPUs are whose.
    spdlog::debug("bmas agent: idle GPUs: {}", jobs.error().message);
    return;
  }
  std::map<int, const GpuReading*> readings;
  for (const GpuReading& g : gpus) readings[g.index] = &g;
  const std::string host = node_.substr(0, node_.find('.'));
  std::map<std::string, std::vector<slurm::GresSlot>> slots;  // by Slurm node, read once
  auto slots_of = [&](const std::string& node) -> const std::vector<slurm::GresSlot>& {
    auto it = slots.find(node);
    if (it == slots.end()) {
      it = slots.emplace(node, hooks_.gres_slots ? hooks_.gres_slots(node)
                                                 : std::vector<slurm::GresSlot>{}).first;
    }
    return it->second;
  };
  std::map<int64_t, const JobInfo*> here;
  std::vector<JobGpuSample> samples;
  for (const JobInfo& job : *jobs) {
    if (job.state != JobState::kRunning) continue;
    // A job in the research reservation is in research mode: left alone.
    JobGpuSample sample{job.id, job.user,
                        job.reservation == slurm::kResearchReservation ? "" : job.partition, {}};
    for (const NodeGpus& alloc : job.gpu_alloc) {
      const bool layout_node = IsLayoutNodeOf(alloc.node, host);
      if (alloc.node != node_ && alloc.node != host && !layout_node) continue;
      const std::vector<slurm::GresSlot>& node_slots = slots_of(layout_node ? alloc.node : host);
      if (layout_node && node_slots.empty()) continue;  // its indexes cannot be placed
      for (int index : alloc.indexes) {
        slurm::GresSlot slot;
        slot.gpu = index;  // without gres.conf lines, the GPU's number
        if (index >= 0 && static_cast<size_t>(index) < node_slots.size()) slot = node_slots[index];
        const auto reading = readings.find(slot.gpu);
        if (reading == readings.end()) continue;
        // Only a process of this job's, of its own user's, makes its GPU busy: another job's
        // (or another user's in a cgroup named after it) counts for nothing.
        auto own_holder = [&](const auto& map, const auto& key) {
          const auto held = map.find(key);
          return held != map.end() && held->second.job == job.id &&
                 held->second.user == job.user;
        };
        if (slot.gpu_instance < 0) {
          sample.gpus.push_back({static_cast<double>(reading->second->util_pct),
                                 own_holder(holders, slot.gpu)});
          continue;
        }
        const auto& slices = reading->second->mig_devices;
        const auto mig = std::find_if(slices.begin(), slices.end(), [&](const MigDeviceReading& m) {
          return m.gpu_instance == slot.gpu_instance;
        });
        if (mig == slices.end()) continue;
        const bool own = own_holder(mig_holders, std::make_pair(slot.gpu, slot.gpu_instance));
        if (!mig->util_known && own) continue;  // a process of its own, activity unknown
        sample.gpus.push_back({mig->util_known ? mig->util_pct : 0.0, own});
      }
    }
    if (sample.gpus.empty()) continue;
    here.emplace(job.id, &job);
    samples.push_back(std::move(sample));
  }
  for (const IdleAction& a : DecideIdle(settings_, /*research_mode=*/false, samples, now,
                                        state_)) {
    const auto job = here.find(a.job_id);
    if (job != here.end()) hooks_.act(a, *job->second);
  }
}

namespace {

// Where the child stopped, sent to the parent with its errno.
enum class AppendStep : int { kDone, kDrop, kOpen, kNotTheirs, kWrite };

struct AppendOutcome {
  AppendStep step = AppendStep::kDrop;
  int error = 0;
};

// In the forked child: only async-signal-safe calls. Drops to the user's ids, checked, then
// opens `path` without following any symlink and appends `text` to the user's regular file.
[[noreturn]] void AppendAsUser(int report, uid_t uid, gid_t gid, const std::vector<gid_t>& groups,
                               const char* path, const std::string& text) {
  auto done = [report](AppendStep step, int error) {
    const AppendOutcome outcome{step, error};
    [[maybe_unused]] const ssize_t n = write(report, &outcome, sizeof outcome);
    _exit(0);
  };
  if (setgroups(groups.size(), groups.data()) != 0 || setgid(gid) != 0 || setuid(uid) != 0 ||
      setuid(0) == 0 || getuid() != uid || geteuid() != uid || getegid() != gid) {
    done(AppendStep::kDrop, errno);
  }
  open_how how{};
  how.flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const int fd = static_cast<int>(syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how));
  if (fd < 0) done(AppendStep::kOpen, errno);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != uid) {
    done(AppendStep::kNotTheirs, 0);
  }
  const ssize_t n = write(fd, text.data(), text.size());
  done(n == static_cast<ssize_t>(text.size()) ? AppendStep::kDone : AppendStep::kWrite,
       n < 0 ? errno : 0);
  _exit(0);
}

}  // namespace

Result<void> AppendToJobOutput(const JobInfo& job, const std::string& line) {
  if (job.stdout_path.empty()) return NotFound(fmt::format("job {} has no output file", job.id));
  passwd pwd{}, *pw = nullptr;
  std::vector<char> buf(16384);
  if (getpwnam_r(job.user.c_str(), &pwd, buf.data(), buf.size(), &pw) != 0 || pw == nullptr) {
    return NotFound(fmt::format("job {}: no account {}", job.id, job.user));
  }
  if (pw->pw_uid == 0) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("job {} is root's: its output {} is not written", job.id,
                             job.stdout_path)};
  }
  // The user's groups, looked up here: the child may call nothing but system calls.
  int count = 64;
  std::vector<gid_t> groups(count);
  if (getgrouplist(pw->pw_name, pw->pw_gid, groups.data(), &count) < 0) {
    groups.resize(count);
    if (getgrouplist(pw->pw_name, pw->pw_gid, groups.data(), &count) < 0) count = 0;
  }
  groups.resize(count);
  if (groups.empty()) groups.push_back(pw->pw_gid);
  const std::string text = line + "\n";
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) {
    return Internal(fmt::format("cannot write {}: pipe: {}", job.stdout_path,
                                std::strerror(errno)));
  }
  const pid_t child = fork();
  if (child == 0) {
    close(report[0]);
    AppendAsUser(report[1], pw->pw_uid, pw->pw_gid, groups, job.stdout_path.c_str(), text);
  }
  close(report[1]);
  AppendOutcome outcome;
  const bool reported =
      child > 0 && read(report[0], &outcome, sizeof outcome) == sizeof outcome;
  close(report[0]);
  if (child > 0) {
    while (waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (!reported) {
    return Internal(fmt::format("cannot write {}: the child that writes as {} failed",
                                job.stdout_path, job.user));
  }
  switch (outcome.step) {
    case AppendStep::kDone:
      return {};
    case AppendStep::kDrop:
      return Internal(fmt::format("cannot write {}: cannot become {}: {}", job.stdout_path,
                                  job.user, std::strerror(outcome.error)));
    case AppendStep::kOpen:
      return Error{ErrorCode::kPermissionDenied,
                   fmt::format("{} cannot open {}{}: {}", job.user, job.stdout_path,
                               outcome.error == ELOOP ? " (a symlink in the path: not followed)"
                                                      : "",
                               std::strerror(outcome.error))};
    case AppendStep::kNotTheirs:
      return Error{ErrorCode::kPermissionDenied,
                   fmt::format("{} is not a file of {}'s: not written", job.stdout_path,
                               job.user)};
    case AppendStep::kWrite:
      break;
  }
  return Internal(fmt::format("cannot write {}: {}", job.stdout_path,
                              outcome.error != 0 ? std::strerror(outcome.error) : "short write"));
}

}  // namespace bmas
