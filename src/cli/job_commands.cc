#include "cli/job_commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pwd.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <charconv>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <thread>

#include "agent/agent.h"
#include "cli/idle_view.h"
#include "cli/job_reason.h"
#include "cli/slurm_target.h"
#include "common/config.h"
#include "common/config_table.h"
#include "common/json_object.h"
#include "common/process.h"
#include "core/job_shape.h"
#include "core/mig.h"
#include "daemon/services.h"
#include "slurm/gpu_cap.h"
#include "slurm/jwt.h"
#include "slurm/local_cluster.h"
#include "slurm/rest_client.h"
#include "store/store.h"

namespace bmas {
namespace {

namespace fs = std::filesystem;

struct Account {
  std::string name;
  std::string home;
};

Result<Account> AccountOf(uid_t uid) {
  passwd* pw = getpwuid(uid);
  if (pw == nullptr) return Error{ErrorCode::kNotFound, fmt::format("uid {} has no account", uid)};
  return Account{pw->pw_name, pw->pw_dir};
}

Result<Account> AccountNamed(const std::string& name) {
  passwd* pw = getpwnam(name.c_str());
  if (pw == nullptr) {
    return Error{ErrorCode::kNotFound,
                 fmt::format("there is no Unix account '{}' on this host: a bmas user is the "
                             "Unix account of that name",
                             name)};
  }
  return Account{pw->pw_name, pw->pw_dir};
}

// Prints what `path` gained since `offset`; returns the new offset. A file that shrank was
// started again (a requeued job's output is truncated): it is printed from its start.
size_t PrintNew(const std::string& path, size_t offset) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return offset;
  std::error_code ec;
  if (fs::file_size(path, ec) < offset) offset = 0;
  in.seekg(static_cast<std::streamoff>(offset));
  char buf[8192];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    std::fwrite(buf, 1, static_cast<size_t>(in.gcount()), stdout);
    offset += static_cast<size_t>(in.gcount());
  }
  std::fflush(stdout);
  return offset;
}

// Whether `path` exists and was modified at or after `unix_seconds`.
bool WrittenSince(const std::string& path, int64_t unix_seconds) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && st.st_mtim.tv_sec >= unix_seconds;
}

// Ctrl-C and SIGTERM while `bmas run --wait` follows its job.
volatile std::sig_atomic_t g_interrupted = 0;
extern "C" void OnInterrupt(int) { g_interrupted = 1; }

// Streams the job's output until it finishes, or until `*interrupted` is set (nullptr: never);
// returns the job's last state (not final when interrupted).
Result<JobInfo> Follow(SlurmApi& client, int64_t id,
                       const volatile std::sig_atomic_t* interrupted = nullptr) {
  size_t offset = 0;
  // Often at first, when a short job's first line is what the user waits for (Slurm starts a
  // job within a second of its submission), then every 100 ms.
  for (int polls = 0;; ++polls) {
    auto job = client.Job(id);
    if (!job) return job.error();
    // Only once it runs, and only a file written since it started: before that the file may
    // be an old job's of the same id (Slurm truncates it when the job's first step opens it).
    if (job->start_time > 0 && !job->stdout_path.empty() &&
        WrittenSince(job->stdout_path, job->start_time)) {
      offset = PrintNew(job->stdout_path, offset);
    }
    if (IsFinal(job->state) || (interrupted != nullptr && *interrupted)) return job;
    std::this_thread::sleep_for(std::chrono::milliseconds(polls < 100 ? 20 : 100));
  }
}

// A job's GPUs for a table: "2", or for MIG slices "2x1g.10gb".
std::string GpusText(const JobInfo& j) {
  if (j.gpus == 0 && j.shards > 0) return fmt::format("{} shard{}", j.shards, j.shards == 1 ? "" : "s");
  return IsMigProfileName(j.gpu_type) ? fmt::format("{}x{}", j.gpus, j.gpu_type)
                                      : std::to_string(j.gpus);
}

// The members of job `j`'s JSON object; `idle` is its "idle" member's JSON (IdleStatusJson).
void WriteJobMembers(JsonWriter& w, const JobInfo& j, const std::string& idle) {
  Member(w, "id", j.id);
  Member(w, "name", j.name);
  Member(w, "user", j.user);
  Member(w, "partition", j.partition);
  Member(w, "state", JobStateName(j.state));
  Member(w, "reason", j.reason);
  Member(w, "reason_text", PlainJobReason(j.reason));
  StringsMember(w, "nodes", j.nodes);
  Member(w, "gpus", j.gpus);
  Member(w, "gpu_type", j.gpu_type);
  Member(w, "mig", IsMigProfileName(j.gpu_type));
  Member(w, "shards", j.shards);
  Member(w, "restart_count", j.restart_count);
  Member(w, "exit_code", j.exit_code);
  Member(w, "submit_time", j.submit_time);
  Member(w, "start_time", j.start_time);
  Member(w, "end_time", j.end_time);
  Member(w, "stdout", j.stdout_path);
  w.Key("idle");
  w.RawValue(idle.c_str(), idle.size(),
             idle == "null" ? rapidjson::kNullType : rapidjson::kObjectType);
}

// Idle-GPU policing's records of `user`'s jobs (everyone's: nullopt) made since `since`.
// The store is root's (its directory is 0700): root, or an account that can read it, reads it
// here; any other user asks the agent, which answers with the caller's own records only, as it
// does for `bmas usage`, so a student sees the warnings on their own jobs and no one else's.
// When neither works (no store yet, no agent on this node, an agent that refuses), this gives
// no records and says nothing: the warning is extra to `bmas jobs`, which works without it.
std::vector<IdleRecord> ReadIdleRecords(Services& services, const std::string& state_dir,
                                        const std::optional<std::string>& user, int64_t since) {
  const std::string path = StorePath(state_dir);
  if (access(path.c_str(), R_OK) == 0 || (geteuid() == 0 && StoreIsOnPostgres())) {
    auto store = services.OpenStore(state_dir);
    if (store) {
      auto records = (*store)->QueryIdle(user, since);
      if (records) return std::move(*records);
    }
  }
  if (geteuid() == 0) return {};
  auto reply = AgentIdle(AgentSocketPath(state_dir), since);
  if (!reply) return {};
  auto records = ParseIdleReply(*reply);
  return records ? std::move(*records) : std::vector<IdleRecord>{};
}

// What idle-GPU policing says of each of `jobs`, for `bmas jobs` and `bmas job show`.
class IdleNotes {
 public:
  IdleNotes(GlobalOptions& global, const std::vector<JobInfo>& jobs,
            const std::optional<std::string>& user) {
    const Config config = global.LoadConfigOrDefaults();
    cancel_after_s_ = static_cast<int64_t>(config.idle.cancel_after_min * 60);
    now_ = static_cast<int64_t>(global.services->env().UnixNow());
    std::tm local{};
    const std::time_t t = now_;
    localtime_r(&t, &local);
    utc_offset_s_ = local.tm_gmtoff;
    // Records of these jobs' runs: none before the earliest start. A job not started yet has
    // none.
    int64_t since = 0;
    for (const JobInfo& j : jobs) {
      if (j.start_time > 0 && (since == 0 || j.start_time < since)) since = j.start_time;
    }
    if (since > 0) {
      records_ = ReadIdleRecords(*global.services, ResolveStateDir(global.state_dir, config), user,
                                 since);
    }
  }

  std::optional<JobIdleStatus> Of(const JobInfo& j) const {
    return IdleStatusOf(records_, j.id, j.start_time, IsFinal(j.state), cancel_after_s_,
                        now_);
  }
  std::string Note(const JobInfo& j) const {
    auto status = Of(j);
    return status ? IdleNote(*status, now_, utc_offset_s_) : "";
  }
  std::string Json(const JobInfo& j) const { return IdleStatusJson(Of(j), now_, utc_offset_s_); }

 private:
  std::vector<IdleRecord> records_;
  int64_t cancel_after_s_ = 0, now_ = 0, utc_offset_s_ = 0;
};

// "PENDING: waiting for free GPUs [Resources]"; "RUNNING" when Slurm gives no reason; a
// reason PlainJobReason does not know as Slurm spells it: "PENDING (BurstBufferStageIn)".
std::string StateAndReason(const JobInfo& j) {
  const std::string plain = PlainJobReason(j.reason);
  if (plain.empty()) return std::string(JobStateName(j.state));
  if (plain == j.reason) return fmt::format("{} ({})", j.state, j.reason);
  return fmt::format("{}: {} [{}]", j.state, plain, j.reason);
}

// "500M", "16G", "1T" or plain megabytes, as Slurm's --mem takes them.
Result<int64_t> ParseMegabytes(const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [rest, ec] = std::from_chars(text.data(), end, value);
  int64_t scale = 1;
  if (rest != end && rest + 1 == end) {
    switch (*rest | 0x20) {
      case 'k':
        scale = 0;
        break;
      case 'm':
        scale = 1;
        break;
      case 'g':
        scale = 1024;
        break;
      case 't':
        scale = 1024 * 1024;
        break;
      default:
        scale = -1;
    }
  } else if (rest != end) {
    scale = -1;
  }
  if (ec != std::errc() || value <= 0 || scale < 0 || value > (int64_t{1} << 40)) {
    return InvalidArgument(
        fmt::format("--mem {}: give megabytes, or a number with M, G or T", text));
  }
  return scale == 0 ? std::max<int64_t>(1, value / 1024) : value * scale;
}

}  // namespace

void JobCommands::Register(CLI::App& app, GlobalOptions& global) {
  CLI::App* run = run_ = app.add_subcommand(
      "run", "Run a command as a Slurm job, shaped for the cluster's topology; prints the job id "
             "(with --wait: streams its output and exits with its exit code)");
  run->add_option("--user", user_, "Run as this Unix user (root only)");
  run->add_option("--gpus", gpus_,
                  "GPUs for the whole job: one node when they fit, else whole nodes; or MIG "
                  "slices on one node: 1g.10gb, 2x3g.40gb (the inventory's mig_layouts)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (!text.empty() && text[0] == '-') {
              return fmt::format("must be at least 0 (got {})", text);
            }
            ShapeRequest scratch;
            auto parsed = ParseGpusOption(text, scratch);
            return parsed ? "" : parsed.error().message;
          },
          "N|PROFILE|NxPROFILE"));
  run->add_option("--share", share_,
                  "With --gpus 1: a 1/N share of a GPU that others' jobs share too (the "
                  "inventory's shared GPUs; nothing fences its memory)")
      ->check(CLI::PositiveNumber);
  run->add_option("--nodes", nodes_, "Nodes (with --gpus-per-node)")->check(kNonNegative);
  run->add_option("--gpus-per-node", gpus_per_node_, "GPUs on each node")
      ->check(kNonNegative);
  run->add_option("--cpus-per-gpu", cpus_per_gpu_,
                  "CPU cores for each GPU (default: Slurm's, one per task)")
      ->check(kNonNegative);
  run->add_option("--mem", mem_,
                  "Memory on each node: 500M, 16G (default: Slurm's DefMemPerCPU per core); "
                  "the job's cgroup in a workspace carries it too");
  run->add_option("--partition", partition_, "Partition (default: the cluster's default, lab)");
  run->add_option("--time", time_, "Time limit in Slurm's form: 30, 2:00:00, 1-00:00:00");
  run->add_option("--name", name_, "Job name (default: the command's name)");
  run->add_option("--launcher", launcher_, "none, torchrun or mpi (srun --mpi=pmix)")
      ->check(CLI::IsMember({"none", "torchrun", "mpi"}))
      ->default_str("none");
  run->add_flag("--wait", wait_,
                "Stream the job's output; exit with its exit code. Ctrl-C cancels the job (as "
                "srun does) unless --detach");
  run->add_flag("--detach", detach_,
                "With --wait, Ctrl-C stops following and leaves the job running (without "
                "--wait, bmas run always returns once the job is submitted)");
  run->add_option("command", command_, "The command and its arguments (after --)")->required();
  run->callback([this, &global] { global.exit_code = Run(global); });

  CLI::App* jobs = app.add_subcommand("jobs", "List your jobs (--all: everyone's)");
  jobs->add_option("--user", user_, "Only this user's jobs");
  jobs->add_flag("--all", all_, "Every user's jobs");
  jobs->add_flag("--json", json_, "A JSON array, one object per job");
  jobs->callback([this, &global] { global.exit_code = Jobs(global); });

  CLI::App* job = app.add_subcommand("job", "One job");
  job->require_subcommand(1);
  CLI::App* show = job->add_subcommand("show", "A job's state, placement and times");
  show->add_option("id", id_, "Job id")->required();
  show->add_flag("--json", json_, "One JSON object");
  show->callback([this, &global] { global.exit_code = Show(global); });

  CLI::App* cancel = app.add_subcommand("cancel", "Cancel one of your jobs");
  cancel->add_option("id", id_, "Job id")->required();
  cancel->callback([this, &global] { global.exit_code = Cancel(global); });

  CLI::App* logs = app.add_subcommand("logs", "Print one of your jobs' output");
  logs->add_option("id", id_, "Job id")->required();
  logs->add_flag("-f,--follow", follow_, "Keep printing until the job ends");
  logs->callback([this, &global] { global.exit_code = Logs(global); });
}

std::string JobCommands::ForgottenDashDashHint(const CLI::ParseError& error, int argc,
                                              const char* const* argv) const {
  if (dynamic_cast<const CLI::ExtrasError*>(&error) == nullptr || run_->count() == 0) return "";
  int i = 1;
  while (i < argc && std::string_view(argv[i]) != "run") ++i;
  // Past run's own options (and their values) to the command's first word; the words CLI11
  // did not expect come after it. An option of no one's before it is another mistake.
  for (++i; i < argc; ++i) {
    const std::string_view word = argv[i];
    if (word == "--") return "";
    if (word.size() < 2 || word[0] != '-') break;
    const std::string name(word.substr(0, word.find('=')));
    const CLI::Option* option = run_->get_option_no_throw(name);
    if (option == nullptr) return "";
    if (option->get_expected_min() > 0 && name.size() == word.size()) ++i;
  }
  if (i >= argc) return "";
  std::vector<std::string> words;
  for (int j = 1; j < argc; ++j) {
    if (j == i) words.emplace_back("--");
    words.push_back(ShellQuote(argv[j]));
  }
  return fmt::format("bmas run: put `--` before the command (its options are not bmas run's): "
                     "bmas {}",
                     fmt::join(words, " "));
}

int JobCommands::Run(GlobalOptions& global) {
  auto caller = AccountOf(getuid());
  if (!caller) return ReportFailure("run", caller.error());
  if (!user_.empty() && user_ != caller->name && geteuid() != 0) {
    return ReportFailure("run", Error{ErrorCode::kPermissionDenied,
                             "only root may run jobs as another user (--user)"});
  }
  auto account = user_.empty() ? caller : AccountNamed(user_);
  if (!account) return ReportFailure("run", account.error());
  auto target = ResolveSlurm(global, account->name);
  if (!target) return ReportFailure("run", target.error());
  auto launcher = ParseLauncher(launcher_);
  if (!launcher) return ReportFailure("run", launcher.error());
  ShapeRequest request{.nodes = nodes_, .gpus_per_node = gpus_per_node_,
                       .partition = partition_, .launcher = *launcher, .share = share_};
  if (auto parsed = ParseGpusOption(gpus_, request); !parsed) {
    return ReportFailure("run", parsed.error());
  }
  auto shape = PlanJobShape(target->inventory, request);
  if (!shape) return ReportFailure("run", shape.error());

  JobSpec spec;
  spec.name = name_.empty() ? fs::path(command_[0]).filename().string() : name_;
  spec.partition = shape->partition;
  spec.nodes = shape->nodes;
  spec.tasks_per_node = shape->tasks_per_node;
  spec.gpus_per_node = shape->gpus_per_node;
  spec.gpu_type = shape->gres_type;
  if (shape->shards > 0) {
    // Shards of one GPU, not GPUs: Slurm counts them against the shared GPU's.
    spec.gpus_per_node = 0;
    spec.gres = fmt::format("shard:{}", shape->shards);
  }
  if (cpus_per_gpu_ > 0 && shape->gpus_per_node > 0) {
    const int tasks = std::max(1, shape->tasks_per_node);
    spec.cpus_per_task = (cpus_per_gpu_ * shape->gpus_per_node + tasks - 1) / tasks;
  }
  if (!mem_.empty()) {
    auto mb = ParseMegabytes(mem_);
    if (!mb) return ReportFailure("run", mb.error());
    spec.memory_per_node_mb = *mb;
  }
  if (!time_.empty()) {
    auto minutes = ParseSlurmMinutes(time_);
    if (!minutes) return ReportFailure("run", minutes.error());
    spec.time_limit_minutes = static_cast<int>(*minutes);
  }
  // The job starts where the caller is, or in the user's home when root acts for them.
  std::error_code ec;
  spec.cwd = account->name == caller->name ? fs::current_path(ec).string() : account->home;
  spec.stdout_path = spec.cwd + "/bmas-%j.out";
  // Slurm opens the output file as the user; where they cannot write, the job fails at launch
  // with only a state to show for it, so say it now.
  if (account->name == caller->name && (spec.cwd.empty() || access(spec.cwd.c_str(), W_OK) != 0)) {
    const int err = errno;
    return ReportFailure(
        "run", InvalidArgument(fmt::format(
                   "the job's output would go to {}/bmas-<job id>.out, but you cannot write {} "
                   "({}): cd to a directory of yours (your home is {}) and run it again",
                   spec.cwd.empty() ? "the current directory" : spec.cwd,
                   spec.cwd.empty() ? "the current directory" : spec.cwd,
                   spec.cwd.empty() ? ec.message() : std::strerror(err), account->home)));
  }
  spec.environment = DistributedEnvironment(target->inventory, *shape);
  spec.environment["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  if (const char* path = std::getenv("PATH"); path && account->name == caller->name) {
    spec.environment["PATH"] = path;
  }
  spec.environment["HOME"] = account->home;
  spec.environment["USER"] = account->name;
  spec.environment["LOGNAME"] = account->name;
  for (const std::string& e : target->env) {
    spec.environment[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
  }
  // With an agent on the node, what runs on each node (torchrun included) runs in the user's
  // workspace when they have one (`bmas agent exec` runs it directly otherwise).
  std::vector<std::string> wrapper;
  const std::string state_dir = ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
  if (fs::exists(AgentSocketPath(state_dir))) {
    const std::string self = fs::read_symlink("/proc/self/exe", ec).string();
    if (!self.empty()) wrapper = {self, "--state-dir", state_dir, "agent", "exec", "--"};
  }
  spec.script = BatchScript(*shape, command_, wrapper);
  // In research mode, its users' jobs go to the nodes they own.
  spec.reservation = ReservationFor(*target, account->name);

  auto slurm = global.services->Slurm(target->endpoint);
  SlurmApi& client = *slurm;
  if (auto within = CheckGpuCap(client, target->inventory, *shape, account->name); !within) {
    return ReportFailure("run", within.error());
  }
  if (wait_) {
    // Before submitting, so that a Ctrl-C at any moment reaches the job (no SA_RESTART: the
    // poll's sleep ends at once).
    struct sigaction on_interrupt {};
    on_interrupt.sa_handler = OnInterrupt;
    sigemptyset(&on_interrupt.sa_mask);
    sigaction(SIGINT, &on_interrupt, nullptr);
    sigaction(SIGTERM, &on_interrupt, nullptr);
  }
  auto id = client.Submit(spec);
  if (!id) {
    Error e = id.error();
    if (spec.reservation.empty() && e.message.find("reserved") != std::string::npos) {
      e.message += " (the cluster is in research mode: `bmas mode` shows whose nodes are reserved)";
    }
    return ReportFailure("run", e);
  }
  if (!wait_) {
    fmt::print("{}\n", *id);
    return 0;
  }
  if (shape->shards > 0) {
    fmt::print(stderr, "bmas run: job {} submitted (1/{} of a shared GPU, partition {})\n", *id,
               share_, shape->partition);
  } else if (shape->mig) {
    fmt::print(stderr, "bmas run: job {} submitted ({} MIG slice(s) {} on one node, partition {})\n",
               *id, shape->gpus_per_node, shape->gpu_type, shape->partition);
  } else {
    fmt::print(stderr, "bmas run: job {} submitted ({} node(s) x {} GPU(s), partition {})\n",
               *id, shape->nodes, shape->gpus_per_node, shape->partition);
  }
  auto done = Follow(client, *id, &g_interrupted);
  if (!done) return ReportFailure("run", done.error());
  if (!IsFinal(done->state)) {
    // Interrupted. A second Ctrl-C ends bmas run at once.
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    if (detach_) {
      fmt::print(stderr,
                 "bmas run: stopped following job {}, which runs on (--detach): `bmas logs -f "
                 "{}` follows it, `bmas cancel {}` ends it\n",
                 *id, *id, *id);
      return 130;
    }
    if (auto cancelled = client.Cancel(*id); !cancelled) {
      return ReportFailure("run", Error{cancelled.error().code,
                                        fmt::format("interrupted, but job {} could not be "
                                                    "cancelled: {} (`bmas cancel {}`)",
                                                    *id, cancelled.error().message, *id)});
    }
    fmt::print(stderr,
               "bmas run: interrupted: cancelled job {}; its GPUs are released (--detach leaves "
               "a job running)\n",
               *id);
    return 130;
  }
  if (done->state != JobState::kCompleted && done->exit_code == 0) {
    fmt::print(stderr, "bmas run: job {} ended {}\n", *id, StateAndReason(*done));
    return 1;
  }
  return done->exit_code;
}

int JobCommands::Jobs(GlobalOptions& global) {
  auto caller = AccountOf(getuid());
  if (!caller) return ReportFailure("jobs", caller.error());
  auto target = ResolveSlurm(global, caller->name);
  if (!target) return ReportFailure("jobs", target.error());
  auto jobs = global.services->Slurm(target->endpoint)->Jobs();
  if (!jobs) return ReportFailure("jobs", jobs.error());
  const std::string only = all_ ? "" : (user_.empty() ? caller->name : user_);
  std::vector<JobInfo> shown;
  for (JobInfo& j : *jobs) {
    if (only.empty() || j.user == only) shown.push_back(std::move(j));
  }
  const IdleNotes idle(global, shown,
                       only.empty() ? std::nullopt : std::optional<std::string>(only));
  if (json_) {
    fmt::print("{}\n", JsonObjectArray(shown, [&](JsonWriter& w, const JobInfo& j) {
                 WriteJobMembers(w, j, idle.Json(j));
               }));
    return 0;
  }
  constexpr std::string_view kRow = "{:<8} {:<16} {:<10} {:<10} {:<11} {:>9} {:>8}  {:<11} {}\n";
  fmt::print(kRow, "ID", "NAME", "USER", "PARTITION", "STATE", "GPUS", "RESTARTS", "NODES",
             "REASON");
  for (const JobInfo& j : shown) {
    std::string reason = PlainJobReason(j.reason);
    const std::string note = idle.Note(j);
    if (!note.empty()) reason = reason.empty() ? note : reason + "; " + note;
    fmt::print(kRow, j.id, j.name.substr(0, 16), j.user, j.partition, j.state, GpusText(j),
               j.restart_count, fmt::format("{}", fmt::join(j.nodes, ",")), reason);
  }
  return 0;
}

// A client acting as the caller, and job `id` when the caller may read it (theirs, or root).
struct OwnedJob {
  std::unique_ptr<SlurmApi> client;
  JobInfo job;
};

static Result<OwnedJob> OpenOwnJob(GlobalOptions& global, int64_t id) {
  auto caller = AccountOf(getuid());
  if (!caller) return caller.error();
  auto target = ResolveSlurm(global, caller->name);
  if (!target) return target.error();
  OwnedJob owned{global.services->Slurm(target->endpoint), {}};
  auto job = owned.client->Job(id);
  if (!job && job.error().code == ErrorCode::kNotFound) {
    return NotFound(fmt::format("there is no job {} (Slurm knows none by that id; it forgets "
                                "finished jobs after a few minutes: `bmas usage --jobs` keeps "
                                "their GPU-hours)",
                                id));
  }
  if (!job) return job.error();
  if (job->user != caller->name && geteuid() != 0) {
    return Error{ErrorCode::kPermissionDenied,
                 fmt::format("job {} belongs to {}; you may read or cancel only your own jobs",
                             id, job->user)};
  }
  owned.job = std::move(*job);
  return owned;
}

// A job's time, or "-" while it has none (not started, not ended).
static std::string When(int64_t unix_seconds) {
  return unix_seconds > 0 ? UtcTime(unix_seconds) : "-";
}

int JobCommands::Show(GlobalOptions& global) {
  auto owned = OpenOwnJob(global, id_);
  if (!owned) return ReportFailure("job show", owned.error());
  const JobInfo* job = &owned->job;
  const IdleNotes idle(global, {*job}, job->user);
  if (json_) {
    fmt::print("{}\n",
               JsonObject([&](JsonWriter& w) { WriteJobMembers(w, *job, idle.Json(*job)); }));
    return 0;
  }
  fmt::print("job {} ({}) of {} in {}: {}\n", job->id, job->name, job->user, job->partition,
             StateAndReason(*job));
  fmt::print("  nodes     {}\n  gpus      {}\n  restarts  {}\n  exit code {}\n",
             job->nodes.empty() ? "-" : fmt::format("{}", fmt::join(job->nodes, ",")),
             IsMigProfileName(job->gpu_type) ? GpusText(*job) + " (MIG slices)"
             : job->gpus == 0 && job->shards > 0 ? GpusText(*job) + " of a shared GPU"
                                                  : GpusText(*job),
             job->restart_count, job->exit_code);
  fmt::print("  submitted {}\n  started   {}\n  ended     {}\n  output    {}\n",
             When(job->submit_time), When(job->start_time), When(job->end_time), job->stdout_path);
  if (const std::string note = idle.Note(*job); !note.empty()) {
    fmt::print("  idle      {}\n", note);
  }
  return 0;
}

int JobCommands::Cancel(GlobalOptions& global) {
  auto owned = OpenOwnJob(global, id_);
  if (!owned) return ReportFailure("cancel", owned.error());
  if (IsFinal(owned->job.state)) {
    return ReportFailure("cancel", Error{ErrorCode::kInvalidArgument,
                                         fmt::format("job {} had already ended ({} at {}); "
                                                     "nothing to cancel",
                                                     id_, owned->job.state,
                                                     When(owned->job.end_time))});
  }
  if (auto done = owned->client->Cancel(id_); !done) return ReportFailure("cancel", done.error());
  fmt::print("cancelled job {}\n", id_);
  return 0;
}

int JobCommands::Logs(GlobalOptions& global) {
  auto owned = OpenOwnJob(global, id_);
  if (!owned) return ReportFailure("logs", owned.error());
  const JobInfo* job = &owned->job;
  if (follow_) {
    auto done = Follow(*owned->client, id_);
    return done ? 0 : ReportFailure("logs", done.error());
  }
  if (!fs::exists(job->stdout_path)) {
    return ReportFailure("logs", Error{ErrorCode::kNotFound,
                              fmt::format("job {} has no output yet ({}; state {})", id_,
                                          job->stdout_path, job->state)});
  }
  PrintNew(job->stdout_path, 0);
  return 0;
}

}  // namespace bmas
