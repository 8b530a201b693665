#include "dashboard/views.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/json_object.h"
#include "core/mig.h"
#include "dashboard/cluster_map.h"
#include "dashboard/queue_reason.h"

namespace bmas::dashboard {
namespace {

bool Sees(const Viewer& v, const std::string& user) { return v.admin || user == v.user; }

void Str(JsonWriter& w, const char* key, std::string_view value) {
  w.Key(key);
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}

void Num(JsonWriter& w, const char* key, int64_t value) {
  w.Key(key);
  w.Int64(value);
}

void Real(JsonWriter& w, const char* key, double value) {
  w.Key(key);
  w.Double(value);
}

void Source(JsonWriter& w, const char* key, bool ok, const std::string& error) {
  ObjectMember(w, key, [&] {
    Member(w, "ok", ok);
    Str(w, "error", error);
  });
}

// A number of seconds, or null where `seconds` is negative (no figure).
void Seconds(JsonWriter& w, const char* key, double seconds) {
  w.Key(key);
  if (seconds >= 0) w.Double(seconds); else w.Null();
}

// Per job, the largest waste any of its records says (a warning, then the cancellation).
std::map<int64_t, const IdleRecord*> LatestIdlePerJob(const ClusterState& s) {
  std::map<int64_t, const IdleRecord*> latest;
  for (const IdleRecord& r : s.idle) {
    auto& slot = latest[r.job];
    if (slot == nullptr || r.at >= slot->at) slot = &r;
  }
  return latest;
}

std::map<std::string, double> WastedGpuHoursPerUser(const ClusterState& s) {
  std::map<int64_t, const IdleRecord*> worst;
  for (const IdleRecord& r : s.idle) {
    auto& slot = worst[r.job];
    if (slot == nullptr || r.wasted_gpu_seconds > slot->wasted_gpu_seconds) slot = &r;
  }
  std::map<std::string, double> hours;
  for (const auto& [job, r] : worst) hours[r->user] += static_cast<double>(r->wasted_gpu_seconds) / 3600;
  return hours;
}

// A job's members, as `v` may see them.
void Job(JsonWriter& w, const JobInfo& j, const Viewer& v, const ClusterState& s,
         const QueueOutlook& outlook, const std::map<int64_t, const IdleRecord*>& idle) {
  const bool seen = Sees(v, j.user);
  Num(w, "id", seen ? j.id : 0);
  Str(w, "user", seen ? j.user : "");
  Str(w, "name", seen ? j.name : "");
  Member(w, "mine", j.user == v.user);
  Str(w, "partition", j.partition);
  Str(w, "state", JobStateName(j.state));
  Num(w, "gpus", j.gpus);
  Str(w, "slice", IsMigProfileName(j.gpu_type) ? j.gpu_type : "");
  Num(w, "shards", j.shards);
  Num(w, "submitted", j.submit_time);
  Num(w, "started", j.start_time);
  Num(w, "ended", j.end_time);
  Num(w, "time_limit_min", j.time_limit_minutes);
  StringsMember(w, "nodes", j.nodes);
  Str(w, "reason", j.reason);
  if (j.state == JobState::kPending) {
    Str(w, "reason_text", outlook.Explain(j, s.now));
    Member(w, "eta_s", outlook.EstimateStartSeconds(j, s.now));
    Num(w, "waiting_s", std::max<int64_t>(0, s.now - j.submit_time));
  }
  w.Key("idle");
  auto it = idle.find(j.id);
  if (seen && it != idle.end()) {
    const IdleRecord& r = *it->second;
    w.StartObject();
    Str(w, "kind", r.kind);
    Num(w, "since", r.idle_since);
    Num(w, "at", r.at);
    Real(w, "wasted_gpu_hours", static_cast<double>(r.wasted_gpu_seconds) / 3600);
    Str(w, "reason", r.reason);
    w.EndObject();
  } else {
    w.Null();
  }
}

struct UserTotals {
  int64_t jobs = 0;
  double gpu_hours = 0;
  int64_t tokens_today = 0;
  int64_t requests_today = 0;
  double wasted = 0;
  int running = 0;
  int gpus_held = 0;
  int pending = 0;
};

std::map<std::string, UserTotals> TotalsPerUser(const ClusterState& s) {
  std::map<std::string, UserTotals> t;
  for (const User& u : s.users) t[u.name];
  for (const JobUsageRow& r : s.gpu_usage) {
    t[r.user].jobs += r.jobs;
    t[r.user].gpu_hours += static_cast<double>(r.gpu_seconds) / 3600;
  }
  for (const UsageRow& r : s.tokens_day) {
    t[r.user].tokens_today += r.prompt_tokens + r.completion_tokens;
    t[r.user].requests_today += r.requests;
  }
  for (const auto& [user, hours] : WastedGpuHoursPerUser(s)) t[user].wasted += hours;
  for (const JobInfo& j : s.jobs) {
    if (HoldsGpus(j.state)) {
      ++t[j.user].running;
      t[j.user].gpus_held += j.gpus;
    } else if (IsPending(j.state)) {
      ++t[j.user].pending;
    }
  }
  return t;
}

void UserRow(JsonWriter& w, const std::string& name, const User* u, const UserTotals& t) {
  Str(w, "user", name);
  Member(w, "admin", u != nullptr && u->admin);
  Member(w, "in_store", u != nullptr);
  Num(w, "jobs_30d", t.jobs);
  Real(w, "gpu_hours_30d", t.gpu_hours);
  Real(w, "wasted_gpu_hours_30d", t.wasted);
  Num(w, "tokens_today", t.tokens_today);
  Num(w, "requests_today", t.requests_today);
  Num(w, "running_jobs", t.running);
  Num(w, "pending_jobs", t.pending);
  Num(w, "gpus_held", t.gpus_held);
  if (u == nullptr) {
    w.Key("limits");
    w.Null();
    return;
  }
  ObjectMember(w, "limits", [&] {
    Real(w, "weight", u->limits.weight);
    Member(w, "rpm", u->limits.rpm);
    Member(w, "tpm", u->limits.tpm);
    Member(w, "tokens_per_day", u->limits.tokens_per_day);
    Member(w, "max_concurrent", u->limits.max_concurrent);
    Member(w, "workspace_cpus", u->limits.workspace.cpus);
    Str(w, "workspace_memory", u->limits.workspace.memory.value_or(""));
  });
}

const User* FindUser(const ClusterState& s, std::string_view name) {
  for (const User& u : s.users) {
    if (u.name == name) return &u;
  }
  return nullptr;
}

}  // namespace

std::string MeJson(const ClusterState& s, const Viewer& v) {
  return JsonObject([&](JsonWriter& w) {
    Str(w, "user", v.user);
    Member(w, "admin", v.admin);
    Num(w, "now", s.now);
    ObjectMember(w, "sources", [&] {
      Source(w, "slurm", s.slurm_reachable, s.slurm_error);
      Source(w, "gateway", s.gateway.reachable, s.gateway.error);
      Source(w, "store", s.store_ok, s.store_error);
      int up = 0;
      for (const NodeTelemetry& t : s.telemetry) up += t.up ? 1 : 0;
      Num(w, "agents", static_cast<int64_t>(s.telemetry.size()));
      Num(w, "agents_with_telemetry", up);
    });
  });
}

std::string ClusterJson(const ClusterState& s, const Viewer& v) {
  return JsonObject([&](JsonWriter& w) {
    std::map<std::string, int64_t> totals = {{"gpus", 0},     {"training", 0}, {"inference", 0},
                                             {"idle", 0},     {"reserved", 0}, {"drained", 0},
                                             {"down", 0}};
    ObjectsMember(w, "nodes", BuildClusterMap(s), [&](const NodeCell& n) {
      Str(w, "name", n.name);
      Str(w, "state", n.state);
      Str(w, "reason", n.reason);
      Member(w, "telemetry", n.telemetry);
      Str(w, "status", n.health.status);
      Member(w, "responding", n.health.responding);
      Str(w, "agent", n.health.agent);
      Str(w, "agent_error", n.health.agent_error);
      Str(w, "status_text", n.health.text);
      ObjectsMember(w, "gpus", n.gpus, [&](const GpuCell& g) {
        ++totals["gpus"];
        ++totals[g.state];
        const bool seen = Sees(v, g.user);
        Num(w, "index", g.index);
        Str(w, "state", g.state);
        Num(w, "job_id", seen ? g.job_id : 0);
        Str(w, "user", seen ? g.user : "");
        Str(w, "job_name", seen ? g.job_name : "");
        Str(w, "partition", g.partition);
        Str(w, "slice", g.slice);
        Num(w, "shards", g.shards);
        Num(w, "sharers", g.sharers);
        Member(w, "mine", !g.user.empty() && g.user == v.user);
        w.Key("util");
        if (g.util >= 0) w.Int(g.util); else w.Null();
        Num(w, "mem_used_mb", static_cast<int64_t>(g.mem_used_mb));
        Num(w, "mem_total_mb", static_cast<int64_t>(g.mem_total_mb));
      });
    });
    ObjectMember(w, "totals", [&] {
      for (const auto& [k, n] : totals) Num(w, k.c_str(), n);
    });
    Str(w, "mode", s.mode.research ? "research" : "lab");
  });
}

std::string QueueJson(const ClusterState& s, const Viewer& v) {
  const auto idle = LatestIdlePerJob(s);
  const QueueOutlook outlook(s);
  std::vector<const JobInfo*> pending, running, recent;
  for (const JobInfo& j : s.jobs) {
    if (IsPending(j.state)) pending.push_back(&j);
    else if (HoldsGpus(j.state)) running.push_back(&j);
    else if (Sees(v, j.user)) recent.push_back(&j);
  }
  std::sort(pending.begin(), pending.end(), [](const JobInfo* a, const JobInfo* b) {
    return std::tie(a->submit_time, a->id) < std::tie(b->submit_time, b->id);
  });
  std::sort(running.begin(), running.end(), [](const JobInfo* a, const JobInfo* b) {
    return std::tie(a->start_time, a->id) < std::tie(b->start_time, b->id);
  });
  std::sort(recent.begin(), recent.end(), [](const JobInfo* a, const JobInfo* b) {
    return std::tie(a->end_time, a->id) > std::tie(b->end_time, b->id);
  });
  return JsonObject([&](JsonWriter& w) {
    int64_t pending_gpus = 0;
    for (const JobInfo* j : pending) pending_gpus += j->gpus;
    for (auto [key, list] : {std::pair{"pending", &pending}, std::pair{"running", &running},
                             std::pair{"recent", &recent}}) {
      ObjectsMember(w, key, *list, [&](const JobInfo* j) { Job(w, *j, v, s, outlook, idle); });
    }
    ObjectMember(w, "totals", [&] {
      Num(w, "pending", static_cast<int64_t>(pending.size()));
      Num(w, "pending_gpus", pending_gpus);
      Num(w, "running", static_cast<int64_t>(running.size()));
    });
  });
}

std::string InferenceJson(const ClusterState& s, const Viewer& v) {
  std::set<std::string> models;
  for (const BackendLoad& b : s.gateway.backends) models.insert(b.models.begin(), b.models.end());
  for (const auto& [m, q] : s.gateway.queued) models.insert(m);
  for (const UsageRow& r : s.tokens_hour) models.insert(r.model);
  return JsonObject([&](JsonWriter& w) {
    ObjectMember(w, "gateway", [&] {
      Member(w, "reachable", s.gateway.reachable);
      Str(w, "error", s.gateway.error);
    });
    ObjectsMember(w, "models", models, [&](const std::string& m) {
      Str(w, "model", m);
      int ready = 0;
      auto serving = [&](const BackendLoad& b) {
        return std::find(b.models.begin(), b.models.end(), m) != b.models.end();
      };
      ObjectsMemberWhere(w, "replicas", s.gateway.backends, serving,
                    [&](const BackendLoad& b) {
                      ready += b.healthy && !b.draining ? 1 : 0;
                      Str(w, "url", b.url);
                      Str(w, "state", b.draining ? "draining" : b.healthy ? "ready" : "unhealthy");
                      Num(w, "in_flight", b.in_flight);
                      Num(w, "capacity", b.capacity);
                      Real(w, "kv_usage", b.kv_usage);
                    });
      Num(w, "ready", ready);
      auto q = s.gateway.queued.find(m);
      Num(w, "queued", q == s.gateway.queued.end() ? 0 : q->second);
      int64_t tokens = 0, requests = 0;
      for (const UsageRow& r : s.tokens_hour) {
        if (r.model != m) continue;
        tokens += r.prompt_tokens + r.completion_tokens;
        requests += r.requests;
      }
      Num(w, "tokens_last_hour", tokens);
      Num(w, "requests_last_hour", requests);
    });
    std::map<std::string, UsageRow> per_user;
    for (const UsageRow& r : s.tokens_hour) {
      UsageRow& u = per_user[r.user];
      u.user = r.user;
      u.requests += r.requests;
      u.prompt_tokens += r.prompt_tokens;
      u.completion_tokens += r.completion_tokens;
    }
    int64_t total = 0;
    for (const auto& [name, u] : per_user) total += u.prompt_tokens + u.completion_tokens;
    auto seen = [&](const auto& row) { return Sees(v, row.first); };
    ObjectsMemberWhere(w, "users", per_user, seen, [&](const auto& row) {
      const auto& [name, u] = row;
      Str(w, "user", name);
      Num(w, "requests", u.requests);
      Num(w, "prompt_tokens", u.prompt_tokens);
      Num(w, "completion_tokens", u.completion_tokens);
    });
    Num(w, "tokens_last_hour", total);
    // The latest interval of the last hour that had streamed requests.
    auto latest = std::find_if(s.history.rbegin(), s.history.rend(), [&](const HistoryPoint& p) {
      return p.ttft_p95_s >= 0 && p.t >= s.now - 3600;
    });
    Seconds(w, "ttft_p95_s", latest != s.history.rend() ? latest->ttft_p95_s : -1);
  });
}

std::string UsersJson(const ClusterState& s, const Viewer& v) {
  const auto per_user = TotalsPerUser(s);
  return JsonObject([&](JsonWriter& w) {
    UserTotals all;
    for (const auto& [name, t] : per_user) {
      all.gpu_hours += t.gpu_hours;
      all.tokens_today += t.tokens_today;
      all.wasted += t.wasted;
      all.jobs += t.jobs;
    }
    auto seen = [&](const auto& row) { return Sees(v, row.first); };
    ObjectsMemberWhere(w, "users", per_user, seen, [&](const auto& row) {
      UserRow(w, row.first, FindUser(s, row.first), row.second);
    });
    ObjectMember(w, "totals", [&] {
      Num(w, "users", static_cast<int64_t>(s.users.size()));
      Num(w, "jobs_30d", all.jobs);
      Real(w, "gpu_hours_30d", all.gpu_hours);
      Real(w, "wasted_gpu_hours_30d", all.wasted);
      Num(w, "tokens_today", all.tokens_today);
    });
  });
}

Result<std::string> UserJson(const ClusterState& s, const Viewer& v, std::string_view name) {
  if (!v.admin && name != v.user) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("you are signed in as {}: only an admin sees another user's details",
                             v.user)};
  }
  const User* u = FindUser(s, name);
  const auto per_user = TotalsPerUser(s);
  auto t = per_user.find(std::string(name));
  if (u == nullptr && t == per_user.end()) {
    return Error{ErrorCode::kNotFound, fmt::format("no user {} in bmas's store", name)};
  }
  const auto idle = LatestIdlePerJob(s);
  const QueueOutlook outlook(s);
  return JsonObject([&](JsonWriter& w) {
    UserRow(w, std::string(name), u, t == per_user.end() ? UserTotals{} : t->second);
    auto theirs = [&](const auto& row) { return row.user == name; };
    ObjectsMemberWhere(w, "jobs", s.jobs, theirs,
                  [&](const JobInfo& j) { Job(w, j, v, s, outlook, idle); });
    ObjectsMemberWhere(w, "idle_actions", s.idle, theirs, [&](const IdleRecord& r) {
      Num(w, "job", r.job);
      Str(w, "kind", r.kind);
      Num(w, "at", r.at);
      Real(w, "wasted_gpu_hours", static_cast<double>(r.wasted_gpu_seconds) / 3600);
      Str(w, "reason", r.reason);
    });
    ObjectsMemberWhere(w, "tokens_today", s.tokens_day, theirs, [&](const UsageRow& r) {
      Str(w, "model", r.model);
      Num(w, "requests", r.requests);
      Num(w, "prompt_tokens", r.prompt_tokens);
      Num(w, "completion_tokens", r.completion_tokens);
    });
  });
}

std::string ModeJson(const ClusterState& s, const Viewer& v) {
  (void)v;  // the mode and its owners are public: the reservation is Slurm's, seen by all
  return JsonObject([&](JsonWriter& w) {
    Str(w, "mode", s.mode.research ? "research" : "lab");
    StringsMember(w, "users", s.mode.users);
    StringsMember(w, "nodes", s.mode.nodes);
    Str(w, "since", s.mode.start_time);
    ObjectsMember(w, "owners", s.nodes, [&](const NodeInfo& n) {
      const bool reserved = s.mode.research && std::find(s.mode.nodes.begin(), s.mode.nodes.end(),
                                                         n.name) != s.mode.nodes.end();
      Str(w, "node", n.name);
      Str(w, "owner", reserved ? fmt::format("research: {}", fmt::join(s.mode.users, ", "))
                               : "lab: everyone");
    });
  });
}

std::string HistoryJson(const ClusterState& s) {
  return JsonObject([&](JsonWriter& w) {
    ObjectsMember(w, "points", s.history, [&](const HistoryPoint& p) {
      Num(w, "t", p.t);
      Num(w, "training", p.gpus_training);
      Num(w, "inference", p.gpus_inference);
      Num(w, "idle", p.gpus_idle);
      Num(w, "queue", p.queue);
      Seconds(w, "ttft_p95_s", p.ttft_p95_s);
    });
  });
}

}  // namespace bmas::dashboard
