#include "store/mem_store.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <string_view>
#include <tuple>

#include "store/store_rules.h"

namespace bmas {
namespace {

using store_rules::Digest;

struct KeptKey {
  KeyInfo info;
  Digest digest{};
};

class MemStore final : public Store {
 public:
  explicit MemStore(std::function<int64_t()> now) : now_(std::move(now)) {
    if (!now_) {
      now_ = [] { return static_cast<int64_t>(Env::Default().UnixNow()); };
    }
  }

  Result<void> AddUser(const std::string& name, const UserLimits& limits) override {
    if (auto r = store_rules::CheckUserName(name); !r) return r;
    if (auto r = store_rules::CheckLimits(limits); !r) return r;
    if (users_.contains(name)) return store_rules::UserExists(name);
    users_[name] = User{name, limits, now_(), false};
    return {};
  }

  Result<void> ChangeUser(const std::string& name, const UserChange& change) override {
    auto it = users_.find(name);
    if (it == users_.end()) return store_rules::NoSuchUser(name);
    auto changed = store_rules::ApplyChange(it->second.limits, change);
    if (!changed) return changed.error();
    it->second.limits = *changed;
    if (change.admin) it->second.admin = *change.admin;
    return {};
  }

  Result<void> RemoveUser(const std::string& name) override {
    if (users_.erase(name) == 0) return store_rules::NoSuchUser(name);
    for (auto& [id, k] : keys_) {
      if (k.info.user == name && !k.info.revoked_at) k.info.revoked_at = now_();
    }
    return {};
  }

  Result<std::optional<User>> FindUser(const std::string& name) override {
    auto it = users_.find(name);
    if (it == users_.end()) return std::optional<User>();
    return std::optional<User>(it->second);
  }

  Result<std::vector<User>> ListUsers() override {
    std::vector<User> out;
    for (const auto& [name, u] : users_) out.push_back(u);
    return out;
  }

  Result<std::string> CreateKey(const std::string& user) override {
    if (!users_.contains(user)) return store_rules::NoSuchUser(user);
    store_rules::NewKey key = store_rules::MintKey();
    keys_[key.id] = KeptKey{KeyInfo{key.id, user, now_(), std::nullopt}, key.digest};
    return key.key;
  }

  Result<void> RevokeKey(const std::string& key_id) override {
    auto it = keys_.find(key_id);
    if (it == keys_.end() || it->second.info.revoked_at) return store_rules::NoSuchKey(key_id);
    it->second.info.revoked_at = now_();
    return {};
  }

  Result<std::vector<KeyInfo>> ListKeys(const std::string& user) override {
    if (!users_.contains(user)) return store_rules::NoSuchUser(user);
    std::vector<KeyInfo> out;
    for (const auto& [id, k] : keys_) {
      if (k.info.user == user) out.push_back(k.info);
    }
    std::stable_sort(out.begin(), out.end(), [](const KeyInfo& a, const KeyInfo& b) {
      return std::tie(a.created_at, a.id) < std::tie(b.created_at, b.id);
    });
    return out;
  }

  Result<std::optional<std::string>> Authenticate(const std::string& key) override {
    auto presented = store_rules::ParseKey(key);
    if (!presented) return std::optional<std::string>();
    auto it = keys_.find(presented->id);
    if (it == keys_.end() || it->second.info.revoked_at || !users_.contains(it->second.info.user)) {
      return std::optional<std::string>();
    }
    const Digest& kept = it->second.digest;
    const std::string_view bytes(reinterpret_cast<const char*>(kept.data()), kept.size());
    if (!store_rules::SameDigest(bytes, presented->digest)) return std::optional<std::string>();
    return std::optional<std::string>(it->second.info.user);
  }

  Result<void> RecordUsage(const std::vector<UsageDelta>& deltas) override {
    for (const UsageDelta& d : deltas) {
      UsageDelta& row = usage_[{d.minute, d.user, d.model, d.backend}];
      row.requests += d.requests;
      row.prompt_tokens += d.prompt_tokens;
      row.completion_tokens += d.completion_tokens;
    }
    return {};
  }

  Result<std::vector<UsageRow>> QueryUsage(const std::optional<std::string>& user,
                                           int64_t since_unix) override {
    std::map<std::tuple<std::string, std::string, std::string>, UsageRow> sums;
    for (const auto& [key, d] : usage_) {
      const auto& [minute, u, model, backend] = key;
      if (minute < since_unix / 60 || (user && u != *user)) continue;
      UsageRow& row = sums[{u, model, backend}];
      row.user = u;
      row.model = model;
      row.backend = backend;
      row.requests += d.requests;
      row.prompt_tokens += d.prompt_tokens;
      row.completion_tokens += d.completion_tokens;
    }
    std::vector<UsageRow> out;
    for (const auto& [key, row] : sums) out.push_back(row);
    return out;
  }

  Result<int> RecordJobs(const std::vector<JobRecord>& jobs) override {
    int added = 0;
    for (const JobRecord& j : jobs) {
      added += jobs_.emplace(std::make_tuple(j.cluster, j.id, j.start_time), j).second ? 1 : 0;
    }
    return added;
  }

  Result<std::vector<JobUsageRow>> QueryJobUsage(const std::optional<std::string>& user,
                                                 int64_t since_unix) override {
    std::map<std::string, JobUsageRow> sums;
    for (const auto& [key, j] : jobs_) {
      if (j.end_time < since_unix || (user && j.user != *user)) continue;
      JobUsageRow& row = sums[j.user];
      row.user = j.user;
      row.jobs += 1;
      if (j.start_time > 0 && j.end_time > j.start_time) {
        row.gpu_seconds += int64_t{j.gpus} * (j.end_time - j.start_time);
      }
    }
    std::vector<JobUsageRow> out;
    for (const auto& [u, row] : sums) out.push_back(row);
    return out;
  }

  Result<void> RecordIdle(const IdleRecord& record) override {
    idle_.emplace(std::make_tuple(record.job, record.kind, record.idle_since), record);
    return {};
  }

  Result<std::vector<IdleRecord>> QueryIdle(const std::optional<std::string>& user,
                                            int64_t since_unix) override {
    std::vector<IdleRecord> out;
    for (const auto& [key, r] : idle_) {
      if (r.at >= since_unix && (!user || r.user == *user)) out.push_back(r);
    }
    std::stable_sort(out.begin(), out.end(), [](const IdleRecord& a, const IdleRecord& b) {
      return std::tie(a.at, a.job) > std::tie(b.at, b.job);
    });
    return out;
  }

  Result<void> AddBackend(const std::string& url) override {
    for (const auto& [added, u] : backends_) {
      if (u == url) return store_rules::BackendListed(url);
    }
    backends_.emplace(now_(), url);
    return {};
  }

  Result<void> RemoveBackend(const std::string& url) override {
    for (auto it = backends_.begin(); it != backends_.end(); ++it) {
      if (it->second == url) {
        backends_.erase(it);
        return {};
      }
    }
    return store_rules::NoSuchBackend(url);
  }

  Result<std::vector<std::string>> ListBackends() override {
    std::vector<std::string> out;
    for (const auto& [added, url] : backends_) out.push_back(url);
    return out;
  }

  Result<void> PutDeployment(const Deployment& deployment) override {
    Deployment& d = deployments_[deployment.model] = deployment;
    if (d.updated_at == 0) d.updated_at = now_();
    return {};
  }

  // Its replicas go with it.
  Result<void> RemoveDeployment(const std::string& model) override {
    const bool removed = deployments_.erase(model) > 0;
    std::erase_if(replicas_, [&](const auto& r) { return r.second.model == model; });
    if (!removed) return store_rules::NoSuchDeployment(model);
    return {};
  }

  Result<std::vector<Deployment>> ListDeployments() override {
    std::vector<Deployment> out;
    for (const auto& [model, d] : deployments_) out.push_back(d);
    return out;
  }

  Result<void> ReplaceReplicas(const std::vector<ReplicaRecord>& replicas) override {
    replicas_.clear();
    for (const ReplicaRecord& r : replicas) replicas_[r.job_id] = r;
    return {};
  }

  Result<std::vector<ReplicaRecord>> ListReplicas() override {
    std::vector<ReplicaRecord> out;
    for (const auto& [job, r] : replicas_) out.push_back(r);
    std::stable_sort(out.begin(), out.end(), [](const ReplicaRecord& a, const ReplicaRecord& b) {
      return std::tie(a.model, a.job_id) < std::tie(b.model, b.job_id);
    });
    return out;
  }

  Result<Reservation> Reserve(const std::string& request_id, const std::string& user,
                              int64_t tokens, int64_t now) override {
    std::lock_guard lock(reservations_mu_);
    if (reservations_.contains(request_id)) return Reservation{true, ""};
    auto it = users_.find(user);
    if (it == users_.end()) return Reservation{false, "user"};
    std::erase_if(reservations_, [&](const auto& r) {
      return r.second.at < now - store_rules::kKeptReservationSeconds;
    });
    store_rules::ReservationTotals t;
    for (const auto& [id, r] : reservations_) {
      if (r.user != user) continue;
      const int64_t counted = r.used.value_or(r.tokens);
      if (r.at > now - 60) {
        ++t.requests_minute;
        t.tokens_minute += counted;
      }
      if (r.at >= now - now % 86400) t.tokens_day += counted;
      if (!r.used && r.at > now - store_rules::kStaleReservationSeconds) ++t.in_flight;
    }
    Reservation answer = store_rules::Admit(it->second.limits, t, tokens);
    if (answer.admitted) reservations_[request_id] = Held{user, now, tokens, std::nullopt};
    return answer;
  }

  Result<void> Settle(const std::string& request_id, int64_t used_tokens) override {
    std::lock_guard lock(reservations_mu_);
    auto it = reservations_.find(request_id);
    if (it == reservations_.end()) return store_rules::NoSuchReservation(request_id);
    if (!it->second.used) it->second.used = used_tokens;
    return {};
  }

  Result<void> PutGatewayReport(const GatewayReport& report) override {
    std::lock_guard lock(reservations_mu_);
    std::erase_if(gateway_reports_, [&](const auto& r) {
      return r.second.at_ms < report.at_ms - store_rules::kKeptGatewayReportMs;
    });
    gateway_reports_[report.gateway] = report;
    return {};
  }

  Result<std::vector<GatewayReport>> ListGatewayReports() override {
    std::lock_guard lock(reservations_mu_);
    std::vector<GatewayReport> out;
    for (const auto& [gateway, r] : gateway_reports_) out.push_back(r);
    return out;
  }

  int schema_version() const override { return 0; }

 private:
  std::function<int64_t()> now_;
  std::map<std::string, User> users_;       // by name
  std::map<std::string, KeptKey> keys_;     // by id
  std::map<std::tuple<int64_t, std::string, std::string, std::string>, UsageDelta> usage_;
  std::map<std::tuple<std::string, int64_t, int64_t>, JobRecord> jobs_;  // cluster, id, start
  std::map<std::tuple<int64_t, std::string, int64_t>, IdleRecord> idle_;  // job, kind, since
  std::set<std::pair<int64_t, std::string>> backends_;  // when added, url
  std::map<std::string, Deployment> deployments_;
  std::map<int64_t, ReplicaRecord> replicas_;  // by Slurm job
  // Reservations, by request id: the one part that threads share (a simulation's gateways).
  struct Held {
    std::string user;
    int64_t at = 0;
    int64_t tokens = 0;
    std::optional<int64_t> used;
  };
  std::mutex reservations_mu_;
  std::map<std::string, Held> reservations_;  // guarded by reservations_mu_
  std::map<std::string, GatewayReport> gateway_reports_;  // guarded by reservations_mu_
};

}  // namespace

StorePtr NewMemStore(std::function<int64_t()> now) {
  return std::make_unique<MemStore>(std::move(now));
}

}  // namespace bmas
