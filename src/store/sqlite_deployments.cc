// The store's inference deployments and the controller's replica rows.

#include "store/sqlite_statement.h"
#include "store/store_rules.h"

namespace bmas::sqlite_internal {

bool PutDeployment(sqlite3* db, const Deployment& d, int64_t now) {
  Statement s(db,
              "INSERT INTO deployments (model, min_replicas, max_replicas, gpus_per_replica, "
              "profile, ttft_slo_ms, command, updated_at, gpu_slice, timetable) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
              "ON CONFLICT(model) DO UPDATE SET min_replicas = excluded.min_replicas, "
              "max_replicas = excluded.max_replicas, gpus_per_replica = excluded.gpus_per_replica, "
              "profile = excluded.profile, ttft_slo_ms = excluded.ttft_slo_ms, "
              "command = excluded.command, updated_at = excluded.updated_at, "
              "gpu_slice = excluded.gpu_slice, timetable = excluded.timetable");
  s.Bind(1, d.model).Bind(2, int64_t{d.min_replicas}).Bind(3, int64_t{d.max_replicas});
  s.Bind(4, int64_t{d.gpus_per_replica}).Bind(5, d.profile).Bind(6, int64_t{d.ttft_slo_ms});
  s.Bind(7, d.command).Bind(8, d.updated_at != 0 ? d.updated_at : now).Bind(9, d.gpu_slice);
  s.Bind(10, store_rules::TimetableJson(d.timetable));
  return s.Step() == SQLITE_DONE;
}

std::optional<bool> RemoveDeployment(sqlite3* db, const std::string& model) {
  Statement s(db, "DELETE FROM deployments WHERE model = ?");
  s.Bind(1, model);
  if (s.Step() != SQLITE_DONE) return std::nullopt;
  const bool removed = sqlite3_changes(db) > 0;
  Statement r(db, "DELETE FROM replicas WHERE model = ?");
  r.Bind(1, model);
  if (r.Step() != SQLITE_DONE) return std::nullopt;
  return removed;
}

std::optional<std::vector<Deployment>> ListDeployments(sqlite3* db) {
  Statement s(db,
              "SELECT model, min_replicas, max_replicas, gpus_per_replica, profile, ttft_slo_ms, "
              "command, updated_at, gpu_slice, timetable FROM deployments ORDER BY model");
  return Rows(s, [](const Statement& row) {
    return Deployment{row.Text(0), static_cast<int>(row.Int(1)), static_cast<int>(row.Int(2)),
                      static_cast<int>(row.Int(3)), row.Text(4), static_cast<int>(row.Int(5)),
                      row.Text(6), row.Int(7), row.Text(8),
                      store_rules::ParseTimetableJson(row.Text(9))};
  });
}

bool ReplaceReplicas(sqlite3* db, const std::vector<ReplicaRecord>& replicas) {
  Statement clear(db, "DELETE FROM replicas");
  if (clear.Step() != SQLITE_DONE) return false;
  Statement s(db,
              "INSERT OR REPLACE INTO replicas (job_id, model, state, node, port, url, gpus, "
              "floor, since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  for (const ReplicaRecord& r : replicas) {
    s.Reset();
    s.Bind(1, r.job_id).Bind(2, r.model).Bind(3, ReplicaStateName(r.state)).Bind(4, r.node);
    s.Bind(5, int64_t{r.port}).Bind(6, r.url).Bind(7, int64_t{r.gpus});
    s.Bind(8, int64_t{r.floor ? 1 : 0}).Bind(9, r.since);
    if (s.Step() != SQLITE_DONE) return false;
  }
  return true;
}

std::optional<std::vector<ReplicaRecord>> ListReplicas(sqlite3* db) {
  Statement s(db,
              "SELECT job_id, model, state, node, port, url, gpus, floor, since FROM replicas "
              "ORDER BY model, job_id");
  return Rows(s, [](const Statement& row) {
    // A name this version does not know reads as pending: the gateway sends it nothing.
    return ReplicaRecord{row.Int(0), row.Text(1),
                         ParseReplicaState(row.Text(2)).value_or(ReplicaState::kPending),
                         row.Text(3),
                         static_cast<int>(row.Int(4)), row.Text(5),
                         static_cast<int>(row.Int(6)), row.Int(7) != 0, row.Int(8)};
  });
}

}  // namespace bmas::sqlite_internal
