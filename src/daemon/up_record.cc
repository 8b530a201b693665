#include "daemon/up_record.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <rapidjson/document.h>

#include "common/json_object.h"
#include "common/json_read.h"
#include "common/process.h"
#include "daemon/up_children.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

fs::path RecordPath(const std::string& state_dir) {
  return fs::path(state_dir) / "run" / "up.json";
}

long long Int(const rapidjson::Value& v, const char* key) {
  const rapidjson::Value* m = JsonMember(v, key);
  return m != nullptr && m->IsInt64() ? m->GetInt64() : 0;
}

// A process as the record names it, the record's own and each part's: its pid and its start
// time in clock ticks, which tells it from a later process given the same pid.
void WriteProcess(JsonWriter& w, pid_t pid, unsigned long long start_ticks) {
  Member(w, "pid", pid);
  Member(w, "start_ticks", start_ticks);
}
void ReadProcess(const rapidjson::Value& v, pid_t& pid, unsigned long long& start_ticks) {
  pid = static_cast<pid_t>(Int(v, "pid"));
  const rapidjson::Value* ticks = JsonMember(v, "start_ticks");
  start_ticks = ticks != nullptr && ticks->IsUint64() ? ticks->GetUint64() : 0;
}

bool Bool(const rapidjson::Value& v, const char* key) {
  const rapidjson::Value* m = JsonMember(v, key);
  return m != nullptr && m->IsBool() && m->GetBool();
}

void WriteRecord(JsonWriter& w, const UpRecord& r, bool running) {
  Member(w, "running", running);
  WriteProcess(w, r.pid, r.start_ticks);
  Member(w, "since", r.since);
  Member(w, "state_dir", r.state_dir);
  Member(w, "owns_slurm", r.owns_slurm);
  Member(w, "owns_lxd", r.owns_lxd);
  ObjectsMember(w, "parts", r.parts, [&](const UpRecord::Part& p) {
    Member(w, "name", p.name);
    WriteProcess(w, p.pid, p.start_ticks);
    Member(w, "url", p.url);
    Member(w, "log", p.log);
    Member(w, "state", p.state);
    Member(w, "restart_at", p.restart_at);
    Member(w, "restarts", p.restarts);
    Member(w, "last_exit", p.last_exit);
  });
}

std::string LocalTime(long long unix_seconds) {
  return fmt::format("{:%Y-%m-%d %H:%M:%S}", fmt::localtime(static_cast<std::time_t>(unix_seconds)));
}

// The parts of `r` still running.
std::vector<UpRecord::Part> Alive(const UpRecord& r) {
  std::vector<UpRecord::Part> alive;
  for (const UpRecord::Part& p : r.parts) {
    if (StillRuns(p.pid, p.start_ticks)) alive.push_back(p);
  }
  return alive;
}

}  // namespace

Result<void> WriteUpRecord(const std::string& state_dir, const UpRecord& record) {
  const fs::path path = RecordPath(state_dir);
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << JsonObject([&](JsonWriter& w) { WriteRecord(w, record, true); }) << "\n";
    if (!out) return Internal(fmt::format("cannot write {}", tmp.string()));
  }
  std::error_code ec;
  fs::permissions(tmp, fs::perms(0640), ec);  // operator data: pids, ports, logs' paths
  fs::rename(tmp, path, ec);
  if (ec) return Internal(fmt::format("cannot write {}: {}", path.string(), ec.message()));
  return {};
}

Result<UpRecord> ReadUpRecord(const std::string& state_dir) {
  const fs::path path = RecordPath(state_dir);
  std::ifstream in(path);
  if (!in) return NotFound(fmt::format("no {}", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  rapidjson::Document d;
  d.Parse(text.str().c_str());
  if (d.HasParseError() || !d.IsObject()) {
    return Internal(fmt::format("{} is not a bmas up record", path.string()));
  }
  UpRecord r;
  ReadProcess(d, r.pid, r.start_ticks);
  r.since = Int(d, "since");
  r.state_dir = JsonString(d, "state_dir");
  r.owns_slurm = Bool(d, "owns_slurm");
  r.owns_lxd = Bool(d, "owns_lxd");
  const rapidjson::Value* parts = JsonMember(d, "parts");
  if (parts != nullptr && parts->IsArray()) {
    for (const rapidjson::Value& v : parts->GetArray()) {
      UpRecord::Part p;
      p.name = JsonString(v, "name");
      ReadProcess(v, p.pid, p.start_ticks);
      p.url = JsonString(v, "url");
      p.log = JsonString(v, "log");
      p.state = JsonString(v, "state");
      p.restart_at = Int(v, "restart_at");
      p.restarts = static_cast<int>(Int(v, "restarts"));
      p.last_exit = JsonString(v, "last_exit");
      r.parts.push_back(std::move(p));
    }
  }
  return r;
}

void RemoveUpRecord(const std::string& state_dir) {
  std::error_code ec;
  fs::remove(RecordPath(state_dir), ec);
}

bool StillRuns(pid_t pid, unsigned long long start_ticks) {
  return start_ticks != 0 && ProcessRunning(pid) && ProcessStartTicks(pid) == start_ticks;
}

std::optional<UpRecord> RunningUp(const std::string& state_dir) {
  auto record = ReadUpRecord(state_dir);
  if (!record || !StillRuns(record->pid, record->start_ticks)) return std::nullopt;
  return *record;
}

std::string RefuseWhatUpOwns(const std::string& state_dir, std::string_view part,
                             std::string_view command) {
  auto up = RunningUp(state_dir);
  if (!up || !(part == "slurm" ? up->owns_slurm : up->owns_lxd)) return "";
  return fmt::format(
      "{}: the local {} belongs to the bmas up running with state dir {} (pid {}); it would "
      "keep saying \"running\" and stop it again later. Stop that bmas up instead (Ctrl-C in "
      "its terminal, or kill -INT {}): it stops {} with everything else",
      command, part == "slurm" ? "Slurm" : "LXD", state_dir, up->pid, up->pid,
      part == "slurm" ? "Slurm" : "LXD");
}

std::optional<std::pair<UpRecord, std::string>> StopStaleRun(const std::string& state_dir) {
  auto record = ReadUpRecord(state_dir);
  if (!record || StillRuns(record->pid, record->start_ticks)) return std::nullopt;
  std::string said;
  const std::vector<UpRecord::Part> alive = Alive(*record);
  for (const UpRecord::Part& p : alive) kill(p.pid, SIGTERM);
  // Not our children (PID 1 has them now), so no waitpid: watch them go.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (const UpRecord::Part& p : alive) {
    while (StillRuns(p.pid, p.start_ticks) && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (StillRuns(p.pid, p.start_ticks)) kill(p.pid, SIGKILL);
    said += fmt::format("bmas up: stopped {} (pid {}), left running by the last bmas up (pid {}), "
                        "which ended without stopping it\n",
                        p.name, p.pid, record->pid);
  }
  RemoveUpRecord(state_dir);
  if (said.empty() && !record->owns_slurm && !record->owns_lxd) return std::nullopt;
  return std::make_pair(*record, said);
}

int PrintUpStatus(const std::string& state_dir, bool json) {
  auto record = ReadUpRecord(state_dir);
  const bool running = record && StillRuns(record->pid, record->start_ticks);
  if (json) {
    if (!record) {
      fmt::print("{}\n", JsonObject([&](JsonWriter& w) {
                   Member(w, "running", false);
                   Member(w, "state_dir", state_dir);
                 }));
    } else {
      fmt::print("{}\n", JsonObject([&](JsonWriter& w) { WriteRecord(w, *record, running); }));
    }
    return running ? 0 : 1;
  }
  if (!record) {
    if (record.error().code != ErrorCode::kNotFound) {
      fmt::print(stderr, "bmas up --status: {}\n", record.error().message);
    } else {
      fmt::print("bmas up: not running with state dir {} (start it with `bmas up`)\n", state_dir);
    }
    return 1;
  }
  if (!running) {
    const std::vector<UpRecord::Part> alive = Alive(*record);
    fmt::print("bmas up: not running with state dir {}: the last one (pid {}) ended without "
               "stopping what it started.\n",
               state_dir, record->pid);
    for (const UpRecord::Part& p : alive) {
      fmt::print("  {:<10} pid {:<8} still running: the next `bmas up` stops it\n", p.name, p.pid);
    }
    if (alive.empty()) fmt::print("  none of its processes runs any more\n");
    return 1;
  }
  fmt::print("bmas up (pid {}) running since {}, state dir {}\n", record->pid,
             LocalTime(record->since), state_dir);
  fmt::print("  {:<10} {:<8} {:<18} {:<9} {:<28} {}\n", "PART", "PID", "STATE", "RESTARTS", "URL",
             "LAST EXIT");
  const long long now = std::time(nullptr);
  for (const UpRecord::Part& p : record->parts) {
    std::string state = p.state;
    if (p.state == "restarting") {
      state = fmt::format("restarting in {} s", std::max(0LL, p.restart_at - now));
    } else if (p.state == "running" && !StillRuns(p.pid, p.start_ticks)) {
      state = "exited";  // up has not noticed yet (it looks every second)
    }
    fmt::print("  {:<10} {:<8} {:<18} {:<9} {:<28} {}\n", p.name,
               p.state == "running" ? std::to_string(p.pid) : "-", state, p.restarts,
               p.url.empty() ? "-" : p.url, p.last_exit.empty() ? "-" : p.last_exit);
  }
  if (record->owns_slurm) {
    fmt::print("  {:<10} started by this bmas up, which stops it (`bmas slurm down` refuses)\n",
               "slurm");
  }
  if (record->owns_lxd) {
    fmt::print("  {:<10} started by this bmas up, which stops it (`bmas lxd down` refuses)\n",
               "lxd");
  }
  return 0;
}

}  // namespace bmas
