#include "lxd/job_copy.h"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "lxd/gpu_binding.h"
#include "lxd/lxd_internal.h"
#include "lxd/lxd_tls.h"
#include "lxd/workspace.h"

namespace bmas::lxd {
namespace {

bool IsCopy(const Instance& i) { return i.config.count(kCopyOfKey) != 0; }

std::string UserOf(const StringMap& config) {
  auto it = config.find(kWorkspaceUserKey);
  return it == config.end() ? "" : it->second;
}

std::vector<int64_t> JobsOf(const Instance& i) {
  auto it = i.config.find(kCopyJobsKey);
  return it == i.config.end() ? std::vector<int64_t>{} : ParseJobList(it->second);
}

Result<void> SetJobs(LxdApi& local, const std::string& name, const std::vector<int64_t>& jobs) {
  return local.UpdateInstance(name, {{kCopyJobsKey, JobList(jobs)}}, {});
}

Result<void> DeleteCopy(LxdApi& local, const Instance& copy) {
  if (copy.status == InstanceStatus::kRunning) {
    if (auto r = local.ChangeState(copy.name, "stop", /*force=*/true); !r) return r;
  }
  return local.DeleteInstance(copy.name);
}

// Adds `job` to the jobs of copy `copy` and makes sure it runs.
Result<void> UseCopy(LxdApi& local, const Instance& copy, int64_t job) {
  std::vector<int64_t> jobs = JobsOf(copy);
  if (std::find(jobs.begin(), jobs.end(), job) == jobs.end()) {
    jobs.push_back(job);
    if (auto r = SetJobs(local, copy.name, jobs); !r) return r;
  }
  if (copy.status != InstanceStatus::kRunning) return StartInstance(local, copy.name);
  return {};
}

}  // namespace

Result<Peer> OpenPeer(const std::string& url, const std::string& cert, const std::string& key,
                      const std::string& fingerprint, std::chrono::milliseconds timeout) {
  if (auto where = ParseHttpsUrl(url); !where) return where.error();
  Peer peer;
  peer.url = url;
  while (!peer.url.empty() && peer.url.back() == '/') peer.url.pop_back();
  auto presented = FetchServerCertificate(url, timeout);
  if (!presented) return presented.error();
  auto got = CertificateFingerprint(*presented);
  if (!got) return got.error();
  if (fingerprint.empty() || *got != fingerprint) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("{} presents a certificate with fingerprint {}, not the {} that "
                             "[lxd] peers gives for it: not trusted (if that node's LXD "
                             "certificate changed on purpose, put the new fingerprint, from "
                             "`bmas lxd status` there, in the config)",
                             url, *got, fingerprint.empty() ? "(none)" : fingerprint),
                 {}};
  }
  // From here the connection is pinned to exactly that certificate.
  peer.certificate = *presented;
  peer.client = std::make_unique<LxdClient>(
      NewHttpsLxdTransport(HttpsEndpoint{url, cert, key, peer.certificate}, timeout), timeout);
  auto server = peer.client->Server();
  if (!server) return server.error();
  if (server->auth != "trusted") {
    auto mine = CertificateFingerprint(internal::ReadText(cert));
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("the LXD at {} does not trust this node's client certificate {} "
                             "(fingerprint {}): on that node, put this node's certificate in "
                             "<node_dir>/lxd-peers/HOST.crt and run `bmas lxd trust` (a node "
                             "that left, or a certificate the cluster CA did not issue, stays "
                             "out; a certificate shared by every node is trusted by `bmas lxd "
                             "up` there with the same [lxd] cert)",
                             url, cert, mine ? *mine : std::string("unreadable")),
                 {}};
  }
  return peer;
}

InstanceSpec CopySpec(const InstanceSpec& local, const std::string& peer_url, int64_t job) {
  InstanceSpec spec = local;
  spec.image.clear();  // the file system comes from the peer
  spec.config[kCopyOfKey] = peer_url;
  spec.config[kCopyJobsKey] = JobList({job});
  return spec;
}

std::vector<int64_t> ParseJobList(const std::string& text) {
  std::vector<int64_t> jobs;
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    int64_t job = 0;
    auto [end, ec] = std::from_chars(text.data() + start, text.data() + comma, job);
    if (ec == std::errc() && end == text.data() + comma && job > 0 &&
        std::find(jobs.begin(), jobs.end(), job) == jobs.end()) {
      jobs.push_back(job);
    }
    start = comma + 1;
  }
  return jobs;
}

std::string JobList(const std::vector<int64_t>& jobs) {
  std::string out;
  for (int64_t job : jobs) out += (out.empty() ? "" : ",") + std::to_string(job);
  return out;
}

Result<JobContainer> EnsureJobContainer(
    LxdApi& local, const InstanceSpec& spec, int64_t job, const std::vector<LxdPeer>& peers,
    const std::function<Result<Peer>(const LxdPeer& peer)>& open,
    const std::function<Result<void>()>& prepare) {
  const std::string& name = spec.name;
  auto here = local.GetInstance(name);
  if (here && !IsCopy(*here)) {  // the workspace itself: the common case, no lock
    if (here->status != InstanceStatus::kRunning) {
      if (auto r = StartInstance(local, name); !r) return r.error();
    }
    return JobContainer{};
  }
  if (!here && here.error().code != ErrorCode::kNotFound) return here.error();
  if (!here && peers.empty()) return here.error();

  // Copies are made and changed one at a time on this node: two jobs of one user starting
  // together must share one copy.
  auto lock = CreationLock::Acquire();
  if (!lock) return lock.error();
  here = local.GetInstance(name);
  if (here) {
    if (auto r = UseCopy(local, *here, job); !r) return r.error();
    return JobContainer{};
  }
  if (here.error().code != ErrorCode::kNotFound) return here.error();

  std::string unreachable;
  for (const LxdPeer& configured : peers) {
    const std::string& url = configured.url;
    auto peer = open(configured);
    if (!peer) {
      unreachable += fmt::format("; {}: {}", url, peer.error().message);
      continue;
    }
    auto source = peer->client->GetInstance(name);
    if (!source) {
      if (source.error().code != ErrorCode::kNotFound) {
        unreachable += fmt::format("; {}: {}", url, source.error().message);
      }
      continue;
    }
    if (IsCopy(*source)) continue;  // another node's copy: not the workspace
    // The peer's instance of that name must be this user's workspace.
    const std::string owner = UserOf(spec.config);
    if (UserOf(source->config) != owner) {
      unreachable += fmt::format("; {}: its {} is not {}'s workspace", url, name, owner);
      continue;
    }
    if (auto r = prepare(); !r) return r.error();
    auto outgoing = peer->client->StartMigrationSource(name);
    if (!outgoing) return outgoing.error();
    const MigrationPull pull{peer->url + outgoing->operation, peer->certificate,
                             outgoing->secrets};
    if (auto made = local.CreateInstanceByMigration(CopySpec(spec, peer->url, job),
                                                    source->architecture, pull);
        !made) {
      (void)peer->client->CancelOperation(outgoing->operation);
      return made.error();
    }
    if (auto r = StartInstance(local, name); !r) {
      (void)local.ChangeState(name, "stop", /*force=*/true);
      (void)local.DeleteInstance(name);
      return r.error();
    }
    return JobContainer{peer->url};
  }
  std::vector<std::string> urls;
  for (const LxdPeer& p : peers) urls.push_back(p.url);
  return NotFound(fmt::format("{} is neither on this node nor on its peers ({}){}", name,
                              fmt::join(urls, ", "), unreachable),
                  "instance");
}

Result<bool> ReleaseJobCopy(LxdApi& local, const std::string& name, int64_t job,
                            const std::string& lock_dir) {
  auto lock = CreationLock::Acquire(lock_dir);
  if (!lock) return lock.error();
  auto copy = local.GetInstance(name);
  if (!copy) {
    if (copy.error().code == ErrorCode::kNotFound) return false;
    return copy.error();
  }
  if (!IsCopy(*copy)) return false;
  std::vector<int64_t> jobs = JobsOf(*copy);
  jobs.erase(std::remove(jobs.begin(), jobs.end(), job), jobs.end());
  if (jobs.empty()) {
    if (auto r = DeleteCopy(local, *copy); !r) return r.error();
    return true;
  }
  if (auto r = SetJobs(local, name, jobs); !r) return r.error();
  return false;
}

Result<std::vector<std::string>> ReconcileCopies(
    LxdApi& local, const std::function<Result<bool>(int64_t job)>& alive,
    const std::string& lock_dir) {
  auto instances = local.Instances();
  if (!instances) return instances.error();
  std::vector<std::string> deleted;
  for (const Instance& listed : *instances) {
    if (!IsCopy(listed)) continue;
    auto lock = CreationLock::Acquire(lock_dir);
    if (!lock) return lock.error();
    auto copy = local.GetInstance(listed.name);  // a prolog may have changed it meanwhile
    if (!copy) continue;
    const std::vector<int64_t> before = JobsOf(*copy);
    std::vector<int64_t> jobs;
    for (int64_t job : before) {
      auto running = alive(job);
      if (!running || *running) jobs.push_back(job);
    }
    if (jobs.empty()) {
      if (auto r = DeleteCopy(local, *copy); !r) return r.error();
      deleted.push_back(copy->name);
    } else if (jobs != before) {
      if (auto r = SetJobs(local, copy->name, jobs); !r) return r.error();
    }
  }
  return deleted;
}

}  // namespace bmas::lxd
