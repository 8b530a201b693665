#pragma once

// The dashboard's JSON (its /api/ endpoints, which its pages use too). Pure functions of the
// state, of who asks and of the time. A user sees their own jobs, usage and limits, plus
// cluster-wide totals; others' jobs show only as GPUs held and places in the queue. An admin
// sees everything.

#include <string>
#include <string_view>

#include "common/result.h"
#include "dashboard/state.h"

namespace bmas::dashboard {

// {"user", "admin", "now", "sources": {"slurm", "gateway", "store": {"ok", "error"}, "agents"}}
std::string MeJson(const ClusterState& s, const Viewer& v);
// {"nodes": [{"name", "state", "reason", "telemetry", "status", "responding", "agent",
// "agent_error", "status_text" (dashboard/node_health.h), "gpus": [{"index", "state", "job_id",
// "user", "util", "mine", ...}]}], "totals": {...}, "mode"}
std::string ClusterJson(const ClusterState& s, const Viewer& v);
// {"pending": [...], "running": [...], "recent": [...], "totals": {...}}; pending jobs carry
// "reason_text" (dashboard/queue_reason.h) and "eta_s" (null when unknown).
std::string QueueJson(const ClusterState& s, const Viewer& v);
// {"gateway": {"reachable", "error"}, "models": [...], "users": [...], "ttft_p95_s"}
std::string InferenceJson(const ClusterState& s, const Viewer& v);
// {"users": [...], "totals": {...}}: every user for an admin, the viewer alone otherwise.
std::string UsersJson(const ClusterState& s, const Viewer& v);
// One user's details. PermissionDenied for another user's unless the viewer is an admin;
// NotFound for a name the store does not have.
Result<std::string> UserJson(const ClusterState& s, const Viewer& v, std::string_view name);
// {"mode": "lab"|"research", "users", "nodes", "since", "owners": [{"node", "owner"}]}
std::string ModeJson(const ClusterState& s, const Viewer& v);
// {"points": [{"t", "training", "inference", "idle", "queue", "ttft_p95_s"}]}
std::string HistoryJson(const ClusterState& s);

}  // namespace bmas::dashboard
