// The PostgreSQL store's inference deployments and the controller's replica rows.

#include "store/pg_store.h"
#include "store/store_rules.h"

namespace bmas::pg_internal {

Result<void> PutDeployment(Connection& c, const Deployment& d, int64_t now) {
  auto r = c.Exec(
      "saving a deployment",
      "INSERT INTO deployments (model, min_replicas, max_replicas, gpus_per_replica, "
      "profile, ttft_slo_ms, command, updated_at, gpu_slice, timetable) "
      "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) "
      "ON CONFLICT (model) DO UPDATE SET min_replicas = excluded.min_replicas, "
      "max_replicas = excluded.max_replicas, "
      "gpus_per_replica = excluded.gpus_per_replica, profile = excluded.profile, "
      "ttft_slo_ms = excluded.ttft_slo_ms, command = excluded.command, "
      "updated_at = excluded.updated_at, gpu_slice = excluded.gpu_slice, "
      "timetable = excluded.timetable",
      {P(d.model), P(d.min_replicas), P(d.max_replicas), P(d.gpus_per_replica), P(d.profile),
       P(d.ttft_slo_ms), P(d.command), P(d.updated_at != 0 ? d.updated_at : now), P(d.gpu_slice),
       P(store_rules::TimetableJson(d.timetable))});
  if (!r) return r.error();
  return {};
}

Result<void> RemoveDeployment(Connection& c, const std::string& model) {
  Transaction t(c);
  if (auto r = t.Begin(); !r) return r;
  auto removed =
      c.Exec("removing a deployment", "DELETE FROM deployments WHERE model = $1", {P(model)});
  if (!removed) return removed.error();
  auto replicas = c.Exec("removing a deployment's replicas",
                         "DELETE FROM replicas WHERE model = $1", {P(model)});
  if (!replicas) return replicas.error();
  if (auto r = t.Commit(); !r) return r;
  if (removed->Changed() == 0) return store_rules::NoSuchDeployment(model);
  return {};
}

Result<std::vector<Deployment>> ListDeployments(Connection& c) {
  auto rows = c.Exec("listing deployments",
                     "SELECT model, min_replicas, max_replicas, gpus_per_replica, profile, "
                     "ttft_slo_ms, command, updated_at, gpu_slice, timetable FROM deployments "
                     "ORDER BY model");
  if (!rows) return rows.error();
  std::vector<Deployment> out;
  for (int i = 0; i < rows->size(); ++i) {
    const Rows& r = *rows;
    out.push_back(Deployment{r.Text(i, 0), static_cast<int>(r.Int(i, 1)),
                             static_cast<int>(r.Int(i, 2)), static_cast<int>(r.Int(i, 3)),
                             r.Text(i, 4), static_cast<int>(r.Int(i, 5)), r.Text(i, 6), r.Int(i, 7),
                             r.Text(i, 8), store_rules::ParseTimetableJson(r.Text(i, 9))});
  }
  return out;
}

Result<void> ReplaceReplicas(Connection& c, const std::vector<ReplicaRecord>& replicas) {
  Transaction t(c);
  if (auto r = t.Begin(); !r) return r;
  // Two controllers replacing at once take turns rather than interleave their rows.
  auto cleared = c.Exec("recording replicas", "LOCK TABLE replicas IN SHARE ROW EXCLUSIVE MODE");
  if (!cleared) return cleared.error();
  cleared = c.Exec("recording replicas", "DELETE FROM replicas");
  if (!cleared) return cleared.error();
  for (const ReplicaRecord& r : replicas) {
    auto added = c.Exec("recording replicas",
                        "INSERT INTO replicas (job_id, model, state, node, port, url, gpus, "
                        "floor, since) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) "
                        "ON CONFLICT (job_id) DO UPDATE SET model = excluded.model, "
                        "state = excluded.state, node = excluded.node, port = excluded.port, "
                        "url = excluded.url, gpus = excluded.gpus, floor = excluded.floor, "
                        "since = excluded.since",
                        {P(r.job_id), P(r.model), P(std::string(ReplicaStateName(r.state))),
                         P(r.node), P(r.port), P(r.url), P(r.gpus), P(r.floor), P(r.since)});
    if (!added) return added.error();
  }
  return t.Commit();
}

Result<std::vector<ReplicaRecord>> ListReplicas(Connection& c) {
  auto rows = c.Exec("listing replicas",
                     "SELECT job_id, model, state, node, port, url, gpus, floor, since "
                     "FROM replicas ORDER BY model, job_id");
  if (!rows) return rows.error();
  std::vector<ReplicaRecord> out;
  for (int i = 0; i < rows->size(); ++i) {
    const Rows& r = *rows;
    // A name this version does not know reads as pending: the gateway sends it nothing.
    out.push_back(ReplicaRecord{r.Int(i, 0), r.Text(i, 1),
                                ParseReplicaState(r.Text(i, 2)).value_or(ReplicaState::kPending),
                                r.Text(i, 3), static_cast<int>(r.Int(i, 4)), r.Text(i, 5),
                                static_cast<int>(r.Int(i, 6)), r.Text(i, 7) == "t", r.Int(i, 8)});
  }
  return out;
}

}  // namespace bmas::pg_internal
