#pragma once

// The PostgreSQL store's parts shared by its files: its schema, its deployments and replicas
// (pg_deployments.cc), and a transaction that rolls back unless committed.

#include <memory>
#include <vector>

#include "store/pg_conn.h"
#include "store/store.h"

namespace bmas::pg_internal {

// The schema version this bmas writes: the number of migrations in pg_store.cc.
int PgSchemaVersion();

// BEGIN on construction; ROLLBACK at the end of its scope unless Commit() ran.
class Transaction {
 public:
  explicit Transaction(Connection& c) : c_(c) {}
  ~Transaction() {
    if (open_) c_.Rollback();
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Result<void> Begin() {
    auto r = c_.Script("starting a transaction", "BEGIN");
    open_ = static_cast<bool>(r);
    return r;
  }
  Result<void> Commit() {
    open_ = false;
    return c_.Script("committing", "COMMIT");
  }

 private:
  Connection& c_;
  bool open_ = false;
};

Result<void> PutDeployment(Connection& c, const Deployment& d, int64_t now);
Result<void> RemoveDeployment(Connection& c, const std::string& model);
Result<std::vector<Deployment>> ListDeployments(Connection& c);
Result<void> ReplaceReplicas(Connection& c, const std::vector<ReplicaRecord>& replicas);
Result<std::vector<ReplicaRecord>> ListReplicas(Connection& c);

Result<Reservation> Reserve(Connection& c, const std::string& request_id, const std::string& user,
                            int64_t tokens, int64_t now);
Result<void> Settle(Connection& c, const std::string& request_id, int64_t used_tokens);

}  // namespace bmas::pg_internal
