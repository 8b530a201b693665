// The store's inference deployments and the controller's replica rows.

#include "store/sqlite_statement.h"

namespace bmas::sqlite_internal {

bool PutDeployment(sqlite3* db, const Deployment& d, int64_t now) {
  Statement s(db,
              "INSERT INTO deployments (model, min_replicas, max_replicas, gpus_per_replica, "
              "profile, ttft_slo_ms, command, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
              "ON CONFLICT(model) DO UPDATE SET min_replicas = excluded.min_replicas, "
              "max_replicas = excluded.max_replicas, gpus_per_replica = excluded.gpus_per_replica, "
              "profile = excluded.profile, ttft_slo_ms = excluded.ttft_slo_ms, "
              "command = excluded.command, updated_at = excluded.updated_at");
  s.Bind(1, d.model).Bind(2, int64_t{d.min_replicas}).Bind(3, int64_t{d.max_replicas});
  s.Bind(4, int64_t{d.gpus_per_replica}).Bind(5, d.profile).Bind(6, int64_t{d.ttft_slo_ms});
  s.Bind(7, d.command).Bind(8, d.updated_at != 0 ? d.updated_at : now);
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
              "command, updated_at FROM deployments ORDER BY model");
  std::vector<Deployment> rows;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    rows.push_back({s.Text(0), static_cast<int>(s.Int(1)), static_cast<int>(s.Int(2)),
                    static_cast<int>(s.Int(3)), s.Text(4), static_cast<int>(s.Int(5)), s.Text(6),
                    s.Int(7)});
  }
  if (rc != SQLITE_DONE) return std::nullopt;
  return rows;
}

bool ReplaceReplicas(sqlite3* db, const std::vector<ReplicaRecord>& replicas) {
  Statement clear(db, "DELETE FROM replicas");
  if (clear.Step() != SQLITE_DONE) return false;
  Statement s(db,
              "INSERT OR REPLACE INTO replicas (job_id, model, state, node, port, url, gpus, "
              "floor, since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)");
  for (const ReplicaRecord& r : replicas) {
    s.Reset();
    s.Bind(1, r.job_id).Bind(2, r.model).Bind(3, r.state).Bind(4, r.node);
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
  std::vector<ReplicaRecord> rows;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    rows.push_back({s.Int(0), s.Text(1), s.Text(2), s.Text(3), static_cast<int>(s.Int(4)),
                    s.Text(5), static_cast<int>(s.Int(6)), s.Int(7) != 0, s.Int(8)});
  }
  if (rc != SQLITE_DONE) return std::nullopt;
  return rows;
}

}  // namespace bmas::sqlite_internal
