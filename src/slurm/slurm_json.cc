#include "slurm/slurm_json.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>

#include "common/json_read.h"
#include "core/hostlist.h"

namespace bmas {
namespace {

using rapidjson::Value;

// ---- Reading values that may be missing, null, or of another numeric kind ----

// Slurm writes NO_VAL / INFINITE as null in v0.0.38 and a few as their raw values
// (0xfffffffe, 0xffffffff, and the 64-bit ones); all read as `fallback`.
int64_t Int(const Value& v, const char* key, int64_t fallback = 0) {
  const Value* m = JsonMember(v, key);
  if (m == nullptr) return fallback;
  if (m->IsUint64()) {
    const uint64_t u = m->GetUint64();
    const bool sentinel = u == 0xfffffffeULL || u == 0xffffffffULL || u >= 0xfffffffffffffffeULL;
    return sentinel || u > uint64_t{INT64_MAX} ? fallback : static_cast<int64_t>(u);
  }
  if (m->IsInt64()) return m->GetInt64();
  // Converting a double outside int64_t's range is undefined: those read as `fallback` too.
  if (m->IsDouble() && m->GetDouble() >= -0x1p63 && m->GetDouble() < 0x1p63) {
    return static_cast<int64_t>(m->GetDouble());
  }
  return fallback;
}

Result<rapidjson::Document> ParseDocument(std::string_view body, std::string_view what) {
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  if (doc.HasParseError() || !doc.IsObject()) {
    const std::string_view head = body.substr(0, 120);
    const char* why =
        doc.HasParseError() ? rapidjson::GetParseError_En(doc.GetParseError()) : "not an object";
    return Internal(
        fmt::format("slurmrestd's {} response is not a JSON object ({}): {}", what, why, head));
  }
  return doc;
}

// ---- Small text helpers ----

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::optional<int64_t> ToInt(std::string_view s) {
  int64_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

// Splits at commas that are not inside parentheses: "gpu:2(IDX:0,2),shard:1" has two items.
std::vector<std::string_view> SplitTopLevel(std::string_view s) {
  std::vector<std::string_view> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || (s[i] == ',' && depth == 0)) {
      if (i > start) out.push_back(s.substr(start, i - start));
      start = i + 1;
    } else if (s[i] == '(') {
      ++depth;
    } else if (s[i] == ')' && depth > 0) {
      --depth;
    }
  }
  return out;
}

std::vector<std::string_view> SplitOn(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i) {
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// One GRES item without its "(...)" suffix and "gres:"/"gres/" prefix, as name/type/count.
// "gpu" -> {gpu, "", 1}; "gpu:4" -> {gpu, "", 4}; "gpu:h100:4" and "gpu:h100=4" ->
// {gpu, h100, 4}; "gpu=4" -> {gpu, "", 4}.
struct GresItem {
  std::string_view name;
  std::string_view type;
  int64_t count = 1;
};

GresItem ParseGresItem(std::string_view item) {
  if (const size_t paren = item.find('('); paren != std::string_view::npos) {
    item = item.substr(0, paren);
  }
  if (StartsWith(item, "gres:") || StartsWith(item, "gres/")) item.remove_prefix(5);
  GresItem g;
  if (const size_t eq = item.find('='); eq != std::string_view::npos) {
    g.count = ToInt(item.substr(eq + 1)).value_or(0);
    item = item.substr(0, eq);
  }
  const std::vector<std::string_view> fields = SplitOn(item, ':');
  g.name = fields[0];
  if (fields.size() >= 2) {
    const std::string_view last = fields.back();
    if (auto n = ToInt(last); n.has_value() && fields.size() <= 3) {
      g.count = *n;
      if (fields.size() == 3) g.type = fields[1];
    } else {
      g.type = fields[1];
    }
  }
  return g;
}

std::string GpuTypeInGres(std::string_view gres) {
  for (std::string_view item : SplitTopLevel(gres)) {
    const GresItem g = ParseGresItem(item);
    if (g.name == "gpu" && !g.type.empty()) return std::string(g.type);
  }
  return {};
}

// Decodes a wait(2) status as Slurm stores it in exit_code.
void DecodeExitStatus(int64_t status, JobInfo& job) {
  const int signal = static_cast<int>(status & 0x7f);
  if (signal != 0) {
    job.exit_signal = signal;
    job.exit_code = 128 + signal;
  } else {
    job.exit_signal = 0;
    job.exit_code = static_cast<int>((status >> 8) & 0xff);
  }
}

JobInfo ParseJob(const Value& j) {
  JobInfo job;
  job.id = Int(j, "job_id");
  job.name = JsonString(j, "name");
  job.user = JsonString(j, "user_name");
  job.partition = JsonString(j, "partition");
  job.state = ParseJobState(JsonString(j, "job_state"));
  job.reason = JsonString(j, "state_reason");
  job.node_count = static_cast<int>(Int(j, "node_count"));
  job.tasks = static_cast<int>(Int(j, "tasks"));
  job.restart_count = static_cast<int>(Int(j, "restart_cnt"));
  job.submit_time = Int(j, "submit_time");
  job.eligible_time = Int(j, "eligible_time");
  job.time_limit_minutes = static_cast<int>(Int(j, "time_limit"));
  job.cwd = JsonString(j, "current_working_directory");
  job.batch_host = JsonString(j, "batch_host");
  job.reservation = JsonString(j, "resv_name");
  job.qos = JsonString(j, "qos");

  const std::string nodes = JsonString(j, "nodes");
  if (!nodes.empty()) {
    auto expanded = ExpandHostlist(nodes);
    job.nodes = expanded ? std::move(*expanded) : std::vector<std::string>{nodes};
  }

  const bool pending = job.state == JobState::kPending;
  // COMPLETING is no end: a requeued job passes through it with its old expected end_time.
  const bool ended = IsFinal(job.state);
  job.start_time = pending ? 0 : Int(j, "start_time");
  job.end_time = ended ? Int(j, "end_time") : 0;
  if (ended) DecodeExitStatus(Int(j, "exit_code"), job);

  // GPUs held now, node by node; gres_detail follows the order of `nodes`.
  const std::vector<std::string> detail = JsonStringList(j, "gres_detail");
  int held = 0;
  for (size_t i = 0; i < detail.size(); ++i) {
    if (const int shards = CountGresIn(detail[i], "shard"); shards > 0) {
      job.shards += shards;
      NodeGpus g;
      g.node = i < job.nodes.size() ? job.nodes[i] : std::string();
      g.indexes = ParseGresIndexes(detail[i]);
      job.shard_alloc.push_back(std::move(g));
    }
    const int count = CountGpusInGres(detail[i]);
    held += count;
    if (count == 0) continue;
    NodeGpus g;
    g.node = i < job.nodes.size() ? job.nodes[i] : std::string();
    g.type = GpuTypeInGres(detail[i]);
    g.indexes = ParseGresIndexes(detail[i]);
    job.gpu_alloc.push_back(std::move(g));
  }
  job.gpu_type = !job.gpu_alloc.empty() ? job.gpu_alloc.front().type : std::string();
  for (const char* asked : {"tres_per_job", "tres_per_node", "tres_per_task"}) {
    if (job.gpu_type.empty()) job.gpu_type = GpuTypeInGres(JsonString(j, asked));
  }
  if (job.shards == 0) {
    job.shards = CountGresIn(JsonString(j, "tres_per_node"), "shard") * std::max(job.node_count, 1);
  }
  if (held > 0) {
    job.gpus = held;
  } else if (const int alloc = CountGpusInGres(JsonString(j, "tres_alloc_str")); alloc > 0) {
    job.gpus = alloc;
  } else {
    const int per_job = CountGpusInGres(JsonString(j, "tres_per_job"));
    const int per_node = CountGpusInGres(JsonString(j, "tres_per_node"));
    const int per_task = CountGpusInGres(JsonString(j, "tres_per_task"));
    job.gpus = per_job + per_node * std::max(job.node_count, 1) + per_task * std::max(job.tasks, 1);
  }

  const std::string out = JsonString(j, "standard_output");
  const std::string err = JsonString(j, "standard_error");
  job.stdout_path = ExpandFilenamePattern(out.empty() ? "slurm-%j.out" : out, job);
  job.stderr_path = err.empty() ? job.stdout_path : ExpandFilenamePattern(err, job);
  return job;
}

NodeInfo ParseNode(const Value& n) {
  NodeInfo node;
  node.name = JsonString(n, "name");
  node.state = JsonString(n, "state");
  node.state_flags = JsonStringList(n, "state_flags");
  node.address = JsonString(n, "address");
  node.hostname = JsonString(n, "hostname");
  node.reason = JsonString(n, "reason");
  node.cpus = static_cast<int>(Int(n, "cpus"));
  node.alloc_cpus = static_cast<int>(Int(n, "alloc_cpus"));
  node.real_memory_mb = Int(n, "real_memory");
  node.alloc_memory_mb = Int(n, "alloc_memory");
  const std::string gres = JsonString(n, "gres");
  node.gpus = CountGpusInGres(gres);
  node.gpu_type = GpuTypeInGres(gres);
  node.gpus_used = CountGpusInGres(JsonString(n, "gres_used"));
  node.partitions = JsonStringList(n, "partitions");
  return node;
}

// ---- Rendering ----

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void Key(Writer& w, std::string_view key) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
}
void String(Writer& w, std::string_view value) {
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}
void StringIfSet(Writer& w, std::string_view key, std::string_view value) {
  if (value.empty()) return;
  Key(w, key);
  String(w, value);
}
void IntIfSet(Writer& w, std::string_view key, int64_t value) {
  if (value == 0) return;
  Key(w, key);
  w.Int64(value);
}
// v0.0.38 takes GPU counts as strings, "[type:]count".
void GpusIfSet(Writer& w, std::string_view key, int count, std::string_view type) {
  if (count == 0) return;
  Key(w, key);
  String(w, type.empty() ? fmt::format("{}", count) : fmt::format("{}:{}", type, count));
}

std::string ErrorText(const SlurmError& e) {
  if (e.description.empty()) return e.error.empty() ? "unknown error" : e.error;
  if (e.error.empty() || e.description.find(e.error) != std::string::npos) return e.description;
  return fmt::format("{}: {}", e.error, e.description);
}

// Slurm's error numbers (slurm_errno.h) that bmas treats specially.
constexpr int kSlurmAccessDenied = 2002;   // ESLURM_ACCESS_DENIED
constexpr int kSlurmInvalidJobId = 2017;   // ESLURM_INVALID_JOB_ID
constexpr int kSlurmUserIdMissing = 2010;  // ESLURM_USER_ID_MISSING
constexpr int kSlurmParseFailure = 9001;   // ESLURM_REST_FAIL_PARSING
constexpr int kSlurmUnspecified = -1;      // SLURM_ERROR

ErrorCode CodeFor(int http_status, const std::vector<SlurmError>& errors) {
  for (const SlurmError& e : errors) {
    if (e.number == kSlurmAccessDenied || e.number == kSlurmUserIdMissing ||
        e.error.find("denied") != std::string::npos) {
      return ErrorCode::kPermissionDenied;
    }
    if (e.number == kSlurmInvalidJobId) return ErrorCode::kNotFound;
  }
  if (http_status == 400) return ErrorCode::kInvalidArgument;
  for (const SlurmError& e : errors) {
    if (e.number >= 1000 && e.number < 2000) return ErrorCode::kUnavailable;  // communication
    if (e.number >= 2000 && e.number < 3000) return ErrorCode::kInvalidArgument;
  }
  if (http_status == 503 || http_status == 502) return ErrorCode::kUnavailable;
  return ErrorCode::kInternal;
}

// A JWT that slurmctld rejects and a slurmctld that does not answer both reach the client
// only as SLURM_ERROR (-1), "Unspecified error", from whichever call slurmrestd made.
bool LooksLikeRejectedToken(int http_status, const std::vector<SlurmError>& errors) {
  if (http_status < 500 || errors.empty()) return false;
  return std::all_of(errors.begin(), errors.end(), [](const SlurmError& e) {
    return e.number == kSlurmUnspecified && e.error == "Unspecified error";
  });
}

}  // namespace

// ---- Public ----

Result<std::string> RenderJobSubmit(const JobSpec& spec) {
  if (spec.script.empty()) return InvalidArgument("the job has no script", "script");
  if (!StartsWith(spec.script, "#!")) {
    return InvalidArgument("the job script must start with \"#!\" (an interpreter line)", "script");
  }
  if (spec.cwd.empty() || spec.cwd[0] != '/') {
    return InvalidArgument(
        fmt::format("the job needs an absolute working directory, got \"{}\" (slurmrestd would "
                    "otherwise use its own)",
                    spec.cwd),
        "cwd");
  }
  const std::array<std::pair<const char*, int64_t>, 10> counts = {{
      {"nodes", spec.nodes},
      {"tasks", spec.tasks},
      {"tasks_per_node", spec.tasks_per_node},
      {"gpus", spec.gpus},
      {"gpus_per_node", spec.gpus_per_node},
      {"gpus_per_task", spec.gpus_per_task},
      {"cpus_per_task", spec.cpus_per_task},
      {"memory_per_cpu_mb", spec.memory_per_cpu_mb},
      {"memory_per_node_mb", spec.memory_per_node_mb},
      {"time_limit_minutes", spec.time_limit_minutes},
  }};
  for (const auto& [name, value] : counts) {
    if (value < 0) {
      return InvalidArgument(fmt::format("{} must not be negative, got {}", name, value), name);
    }
  }
  for (const auto& [key, value] : spec.environment) {
    if (key.empty() || key.find('=') != std::string::npos) {
      return InvalidArgument(fmt::format("bad environment variable name \"{}\"", key),
                             "environment");
    }
  }

  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  Key(w, "job");
  w.StartObject();
  StringIfSet(w, "name", spec.name);
  StringIfSet(w, "partition", spec.partition);
  IntIfSet(w, "nodes", spec.nodes);
  IntIfSet(w, "tasks", spec.tasks);
  IntIfSet(w, "tasks_per_node", spec.tasks_per_node);
  GpusIfSet(w, "gpus", spec.gpus, spec.gpu_type);
  GpusIfSet(w, "gpus_per_node", spec.gpus_per_node, spec.gpu_type);
  GpusIfSet(w, "gpus_per_task", spec.gpus_per_task, spec.gpu_type);
  StringIfSet(w, "gres", spec.gres);
  IntIfSet(w, "cpus_per_task", spec.cpus_per_task);
  IntIfSet(w, "memory_per_cpu", spec.memory_per_cpu_mb);
  IntIfSet(w, "memory_per_node", spec.memory_per_node_mb);
  IntIfSet(w, "time_limit", spec.time_limit_minutes);
  StringIfSet(w, "current_working_directory", spec.cwd);
  StringIfSet(w, "standard_output", spec.stdout_path);
  StringIfSet(w, "standard_error", spec.stderr_path);
  Key(w, "environment");
  w.StartObject();
  if (spec.environment.empty()) {
    Key(w, "PATH");
    String(w, "/usr/local/bin:/usr/bin:/bin");
  }
  for (const auto& [key, value] : spec.environment) {
    Key(w, key);
    String(w, value);
  }
  w.EndObject();
  StringIfSet(w, "reservation", spec.reservation);
  StringIfSet(w, "qos", spec.qos);
  StringIfSet(w, "account", spec.account);
  if (spec.requeue.has_value()) {
    Key(w, *spec.requeue ? "requeue" : "no_requeue");
    w.Bool(true);
  }
  if (spec.exclusive) {
    // v0.0.38 refuses `true` and "true" here although its schema lists them.
    Key(w, "exclusive");
    String(w, "exclusive");
  }
  w.EndObject();
  Key(w, "script");
  String(w, spec.script);
  w.EndObject();
  return std::string(buf.GetString(), buf.GetSize());
}

std::vector<SlurmError> ParseErrors(std::string_view body) {
  std::vector<SlurmError> out;
  rapidjson::Document doc;
  doc.Parse(body.data(), body.size());
  if (doc.HasParseError() || !doc.IsObject()) return out;
  const Value* errors = JsonMember(doc, "errors");
  if (errors == nullptr || !errors->IsArray()) return out;
  for (const Value& e : errors->GetArray()) {
    SlurmError se;
    se.number = static_cast<int>(JsonMember(e, "error_number") != nullptr ? Int(e, "error_number")
                                                                          : Int(e, "error_code"));
    se.error = JsonString(e, "error");
    se.description = JsonString(e, "description");
    se.source = JsonString(e, "source");
    out.push_back(std::move(se));
  }
  return out;
}

std::optional<Error> ErrorFromResponse(int http_status, std::string_view body,
                                       std::string_view what, std::string_view user) {
  std::vector<SlurmError> errors = ParseErrors(body);
  const bool ok_status = http_status >= 200 && http_status < 300;
  if (ok_status && errors.empty()) return std::nullopt;
  // A job queued while the nodes that could run it are down (a standby MIG layout's, say):
  // slurmctld answers with its id and ESLURM_NODE_NOT_AVAIL, and the job waits, as sbatch
  // reports it.
  constexpr int kNodeNotAvailable = 2068;
  if (ok_status && std::all_of(errors.begin(), errors.end(), [](const SlurmError& e) {
        return e.number == kNodeNotAvailable;
      })) {
    if (auto doc = ParseDocument(body, "submit"); doc && Int(*doc, "job_id", -1) > 0) {
      return std::nullopt;
    }
  }

  if (http_status == 401 || http_status == 403) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("slurmrestd refused to {} for user \"{}\" (HTTP {}: {}): the "
                             "X-SLURM-USER-NAME / X-SLURM-USER-TOKEN headers are missing or the "
                             "token is not a JWT; mint one with the cluster's jwt_key",
                             what, user, http_status, body.substr(0, 200)),
                 "token"};
  }
  if (LooksLikeRejectedToken(http_status, errors)) {
    return Error{ErrorCode::kUnavailable,
                 fmt::format("cannot {}: slurmrestd got no usable answer from slurmctld (\"{}\", "
                             "from {}). Either slurmctld is down or unreachable from slurmrestd, "
                             "or it rejected the JWT of user \"{}\" (signed with another key "
                             "than the cluster's jwt_key, expired, or minted for another user)",
                             what, ErrorText(errors.front()), errors.front().source, user),
                 {}};
  }
  // The parse failure that closes a list of submit errors says nothing of its own.
  if (errors.size() > 1) {
    errors.erase(std::remove_if(errors.begin(), errors.end(),
                                [](const SlurmError& e) { return e.number == kSlurmParseFailure; }),
                 errors.end());
  }
  std::string detail;
  for (const SlurmError& e : errors) {
    if (!detail.empty()) detail += "; ";
    detail += ErrorText(e);
  }
  if (detail.empty()) {
    detail = fmt::format("HTTP {}: {}", http_status, body.substr(0, 200));
  }
  return Error{CodeFor(http_status, errors), fmt::format("cannot {}: {}", what, detail), {}};
}

Result<int64_t> ParseSubmitResponse(std::string_view body) {
  auto doc = ParseDocument(body, "submit");
  if (!doc) return doc.error();
  const int64_t id = Int(*doc, "job_id", -1);
  if (id <= 0) return Internal("slurmrestd's submit response has no job_id");
  return id;
}

Result<std::vector<JobInfo>> ParseJobsResponse(std::string_view body) {
  auto doc = ParseDocument(body, "jobs");
  if (!doc) return doc.error();
  const Value* jobs = JsonMember(*doc, "jobs");
  if (jobs == nullptr || !jobs->IsArray()) {
    return Internal("slurmrestd's jobs response has no jobs[] array");
  }
  std::vector<JobInfo> out;
  out.reserve(jobs->Size());
  for (const Value& j : jobs->GetArray()) out.push_back(ParseJob(j));
  return out;
}

Result<std::vector<JobInfo>> ParseDbJobsResponse(std::string_view body) {
  auto doc = ParseDocument(body, "slurmdbd's jobs");
  if (!doc) return doc.error();
  const Value* jobs = JsonMember(*doc, "jobs");
  if (jobs == nullptr || !jobs->IsArray()) {
    return Internal("slurmrestd's slurmdb jobs response has no jobs[] array");
  }
  std::vector<JobInfo> out;
  for (const Value& j : jobs->GetArray()) {
    JobInfo job;
    job.id = Int(j, "job_id");
    job.name = JsonString(j, "name");
    job.user = JsonString(j, "user");
    job.partition = JsonString(j, "partition");
    if (const Value* state = JsonMember(j, "state")) {
      job.state = ParseJobState(JsonString(*state, "current"));
    }
    if (const std::string nodes = JsonString(j, "nodes");
        !nodes.empty() && nodes != "None assigned") {
      auto expanded = ExpandHostlist(nodes);
      job.nodes = expanded ? std::move(*expanded) : std::vector<std::string>{nodes};
    }
    job.node_count = static_cast<int>(job.nodes.size());
    if (const Value* time = JsonMember(j, "time")) {
      job.submit_time = Int(*time, "submission");
      job.eligible_time = Int(*time, "eligible");
      job.start_time = Int(*time, "start");
      job.end_time = Int(*time, "end");
    }
    // GPUs allocated: tres.allocated[] {type: "gres", name: "gpu", count}.
    if (const Value* tres = JsonMember(j, "tres")) {
      if (const Value* allocated = JsonMember(*tres, "allocated");
          allocated && allocated->IsArray()) {
        for (const Value& t : allocated->GetArray()) {
          if (JsonString(t, "type") == "gres" && JsonString(t, "name") == "gpu") {
            job.gpus += static_cast<int>(Int(t, "count"));
          }
        }
      }
    }
    if (const Value* exit = JsonMember(j, "exit_code")) {
      job.exit_code = static_cast<int>(Int(*exit, "return_code"));
    }
    out.push_back(std::move(job));
  }
  return out;
}

Result<std::vector<NodeInfo>> ParseNodesResponse(std::string_view body) {
  auto doc = ParseDocument(body, "nodes");
  if (!doc) return doc.error();
  const Value* nodes = JsonMember(*doc, "nodes");
  if (nodes == nullptr || !nodes->IsArray()) {
    return Internal("slurmrestd's nodes response has no nodes[] array");
  }
  std::vector<NodeInfo> out;
  out.reserve(nodes->Size());
  for (const Value& n : nodes->GetArray()) out.push_back(ParseNode(n));
  return out;
}

Result<std::string> ParsePingResponse(std::string_view body) {
  auto doc = ParseDocument(body, "ping");
  if (!doc) return doc.error();
  const Value* pings = JsonMember(*doc, "pings");
  if (pings == nullptr || !pings->IsArray() || pings->Empty()) {
    return Internal("slurmrestd's ping response has no pings[]");
  }
  for (const Value& p : pings->GetArray()) {
    const std::string state = JsonString(p, "ping");
    if (state != "UP") {
      return Error{ErrorCode::kUnavailable,
                   fmt::format("slurmctld on {} ({}) is {}", JsonString(p, "hostname"),
                               JsonString(p, "mode"), state.empty() ? "not answering" : state),
                   {}};
    }
  }
  std::string release;
  if (const Value* meta = JsonMember(*doc, "meta"); meta != nullptr) {
    if (const Value* slurm = JsonMember(*meta, "Slurm"); slurm != nullptr) {
      release = JsonString(*slurm, "release");
    }
  }
  return release.empty() ? std::string("unknown") : release;
}

Result<int64_t> ParseDiagResponse(std::string_view body) {
  auto doc = ParseDocument(body, "diag");
  if (!doc) return doc.error();
  const Value* stats = JsonMember(*doc, "statistics");
  const int64_t req_time = stats == nullptr ? 0 : Int(*stats, "req_time");
  if (req_time <= 0) return Internal("slurmrestd's diag response has no statistics.req_time");
  return req_time;
}

JobState ParseJobState(std::string_view name) {
  for (auto s = static_cast<int>(JobState::kPending); s <= static_cast<int>(JobState::kRevoked);
       ++s) {
    if (JobStateName(static_cast<JobState>(s)) == name) return static_cast<JobState>(s);
  }
  return JobState::kUnknown;
}

int CountGpusInGres(std::string_view gres) { return CountGresIn(gres, "gpu"); }

int CountGresIn(std::string_view gres, std::string_view name) {
  // A TRES string may list "gres/gpu=4" next to "gres/gpu:h100=4"; the untyped entry is the
  // total, so typed entries count only when there is none.
  int64_t untyped = 0;
  int64_t typed = 0;
  bool saw_untyped = false;
  for (std::string_view item : SplitTopLevel(gres)) {
    const GresItem g = ParseGresItem(item);
    if (g.name != name) continue;
    if (g.type.empty()) {
      untyped += g.count;
      saw_untyped = true;
    } else {
      typed += g.count;
    }
  }
  return static_cast<int>(saw_untyped ? untyped : typed);
}

std::vector<int> ParseGresIndexes(std::string_view gres_detail) {
  std::vector<int> out;
  const size_t at = gres_detail.find("IDX:");
  if (at == std::string_view::npos) return out;
  std::string_view list = gres_detail.substr(at + 4);
  list = list.substr(0, list.find(')'));
  for (std::string_view part : SplitOn(list, ',')) {
    const size_t dash = part.find('-');
    const auto lo = ToInt(part.substr(0, dash));
    const auto hi = dash == std::string_view::npos ? lo : ToInt(part.substr(dash + 1));
    if (!lo || !hi || *hi < *lo || *hi - *lo > 4096) continue;
    for (int64_t i = *lo; i <= *hi; ++i) out.push_back(static_cast<int>(i));
  }
  return out;
}

std::string ExpandFilenamePattern(std::string_view pattern, const JobInfo& job) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '%' || i + 1 >= pattern.size()) {
      out += pattern[i];
      continue;
    }
    size_t k = i + 1;
    int width = 0;
    while (k < pattern.size() && pattern[k] >= '0' && pattern[k] <= '9') {
      width = std::min(width * 10 + (pattern[k] - '0'), 10);
      ++k;
    }
    if (k >= pattern.size()) {
      out.append(pattern.substr(i));
      break;
    }
    const auto number = [&](int64_t v) { out += fmt::format("{:0{}}", v, width); };
    switch (pattern[k]) {
      case '%':
        out += '%';
        break;
      case 'j':
      case 'A':
        number(job.id);
        break;
      case 'a':  // Slurm writes NO_VAL for a job outside an array
        number(4294967294LL);
        break;
      case 'n':
      case 't':
        number(0);
        break;
      case 'u':
        out += job.user;
        break;
      case 'x':
        out += job.name;
        break;
      case 'N':
        out += !job.batch_host.empty() ? job.batch_host
                                       : (job.nodes.empty() ? std::string() : job.nodes[0]);
        break;
      default:
        out.append(pattern.substr(i, k - i + 1));
        break;
    }
    i = k;
  }
  if (!out.empty() && out[0] != '/' && !job.cwd.empty()) {
    out = job.cwd + (job.cwd.back() == '/' ? "" : "/") + out;
  }
  return out;
}

}  // namespace bmas
