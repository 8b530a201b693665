#include "cli/user_commands.h"

#include "common/json_object.h"
#include "daemon/services.h"

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "agent/agent.h"
#include "cli/lxd_commands.h"
#include "cli/own_keys.h"
#include "cli/usage_view.h"
#include "gateway/upstream.h"
#include "store/store.h"

namespace bmas {
namespace {

std::string Limit(const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "-"; }

std::string UsersJson(const std::vector<User>& users) {
  return JsonObjectArray(users, [](JsonWriter& w, const User& u) {
    Member(w, "name", u.name);
    w.Key("weight");
    w.Double(u.limits.weight);
    Member(w, "rpm", u.limits.rpm);
    Member(w, "tpm", u.limits.tpm);
    Member(w, "tokens_per_day", u.limits.tokens_per_day);
    Member(w, "max_concurrent", u.limits.max_concurrent);
    ObjectMember(w, "workspace", [&] {
      Member(w, "cpus", u.limits.workspace.cpus);
      Member(w, "memory", u.limits.workspace.memory);
      Member(w, "processes", u.limits.workspace.processes);
      Member(w, "disk", u.limits.workspace.disk);
    });
    Member(w, "created_at", UtcTime(u.created_at));
    Member(w, "admin", u.admin);
  });
}

std::string KeysJson(const std::vector<KeyInfo>& keys) {
  return JsonObjectArray(keys, [](JsonWriter& w, const KeyInfo& k) {
    Member(w, "id", k.id);
    Member(w, "user", k.user);
    Member(w, "created_at", UtcTime(k.created_at));
    w.Key("revoked_at");
    if (k.revoked_at) w.String(UtcTime(*k.revoked_at).c_str()); else w.Null();
  });
}

void AddLimitOptions(CLI::App* c, std::optional<double>& weight, std::optional<int64_t>& rpm,
                     std::optional<int64_t>& tpm, std::optional<int64_t>& per_day,
                     std::optional<int64_t>& concurrent, WorkspaceLimits& ws) {
  // CLI11 2.1 fills std::optional through a plain variable; the callbacks keep "not given".
  c->add_option_function<double>("--weight", [&weight](double v) { weight = v; },
                                 "Share of the inference fast path under contention (default 1)")
      ->check(kPositive);
  c->add_option_function<int64_t>("--rpm", [&rpm](int64_t v) { rpm = v; }, "Requests per minute")
      ->check(kNonNegative);
  c->add_option_function<int64_t>("--tpm", [&tpm](int64_t v) { tpm = v; }, "Tokens per minute")
      ->check(kNonNegative);
  c->add_option_function<int64_t>("--tokens-per-day", [&per_day](int64_t v) { per_day = v; },
                                  "Tokens per day")
      ->check(kNonNegative);
  c->add_option_function<int64_t>("--max-concurrent", [&concurrent](int64_t v) { concurrent = v; },
                                  "Requests in flight at once")
      ->check(kNonNegative);
  // The user's workspace (an unset one: the config's [workspace]).
  c->add_option_function<int64_t>("--cpus", [&ws](int64_t v) { ws.cpus = v; },
                                  "Workspace: CPUs")
      ->check(kPositive);
  c->add_option_function<std::string>("--memory", [&ws](const std::string& v) { ws.memory = v; },
                                      "Workspace: memory, e.g. 4GiB");
  c->add_option_function<int64_t>("--processes", [&ws](int64_t v) { ws.processes = v; },
                                  "Workspace: most processes")
      ->check(kPositive);
  c->add_option_function<std::string>("--disk", [&ws](const std::string& v) { ws.disk = v; },
                                      "Workspace: root disk, e.g. 20GiB (btrfs pools only)");
}

// "CPUS/MEMORY/PROCESSES/DISK", "-" for each one unset.
std::string WorkspaceColumn(const WorkspaceLimits& l) {
  auto n = [](const std::optional<int64_t>& v) { return v ? std::to_string(*v) : "-"; };
  return fmt::format("{}/{}/{}/{}", n(l.cpus), l.memory.value_or("-"), n(l.processes),
                     l.disk.value_or("-"));
}

}  // namespace

void UserCommands::Register(CLI::App& app, GlobalOptions& global) {
  CLI::App* user = app.add_subcommand("user", "Manage users: their share and limits (unset = unlimited)");
  user->require_subcommand(1);
  user_add_ = user->add_subcommand("add", "Add a user (a Unix account name)");
  user_add_->add_option("name", name_, "User name")->required();
  AddLimitOptions(user_add_, weight_, rpm_, tpm_, tokens_per_day_, max_concurrent_, workspace_);
  user_add_->add_flag("--admin", admin_flag_, "An admin: sees every user's details on the dashboard");
  user_list_ = user->add_subcommand("list", "List users and their limits");
  user_list_->add_flag("--json", json_, "Print a JSON array");
  user_set_ = user->add_subcommand("set", "Change a user's share or limits");
  user_set_->add_option("name", name_, "User name")->required();
  AddLimitOptions(user_set_, weight_, rpm_, tpm_, tokens_per_day_, max_concurrent_, workspace_);
  user_set_->add_flag_function("--admin,!--no-admin", [this](int64_t n) { admin_ = n > 0; },
                      "Make the user an admin of the dashboard (sees every user), or not");
  user_set_
      ->add_option("--unset", unset_,
                   "Make a limit unlimited again (rpm, tpm, tokens_per_day, max_concurrent), or "
                   "a workspace limit the config's default (cpus, memory, processes, disk)")
      ->check(CLI::IsMember({"rpm", "tpm", "tokens_per_day", "max_concurrent", "cpus", "memory",
                             "processes", "disk"}));
  user_remove_ = user->add_subcommand("remove", "Remove a user and revoke their keys (their usage stays)");
  user_remove_->add_option("name", name_, "User name")->required();

  CLI::App* key = app.add_subcommand("key", "Manage API keys");
  key->require_subcommand(1);
  key_create_ = key->add_subcommand(
      "create", "Create a key for a user (you, without a name) and print it, once (only a hash "
                "is kept)");
  key_create_->add_option("name", name_, "User name (default: you)");
  key_revoke_ = key->add_subcommand("revoke", "Revoke a key by its id");
  key_revoke_->add_option("id", key_id_, "Key id (from `bmas key list`)")->required();
  key_list_ = key->add_subcommand(
      "list", "List a user's keys (yours, without a name): ids and dates, never the keys");
  key_list_->add_option("name", name_, "User name (default: you)");
  key_list_->add_flag("--json", json_, "Print a JSON array");

  usage_ = app.add_subcommand("usage", "Metered tokens per (user, model, backend), then GPU-hours "
                                       "of finished Slurm jobs, GPU-hours left idle, and tokens "
                                       "per user");
  usage_->add_option_function<std::string>("--user", [this](const std::string& u) { usage_user_ = u; },
                                           "Only this user");
  usage_->add_option("--since", since_,
                     "From this time: unix seconds, 2026-11-21, 2026-11-21T10:00:00Z, or an age "
                     "such as 30m, 12h, 7d (default: all)");
  usage_->add_flag("--json", json_, "Print a JSON array, one object per (user, model, backend)");
  usage_->add_flag("--jobs", usage_jobs_,
                   "Per user only: finished Slurm jobs, their GPU-hours, the GPU-hours idle-GPU "
                   "policing saw wasted, and tokens (with --json, one object per user)");

  for (CLI::App* c : {user_add_, user_list_, user_set_, user_remove_, key_create_, key_revoke_, key_list_, usage_}) {
    c->callback([this, &global, c] { global.exit_code = Run(global, c); });
  }
}

bool StoreIsOthers(const std::string& state_dir) {
  // A user's own state dir (given with --state-dir or BMAS_STATE_DIR) gets its own store; the
  // cluster's is root's.
  // The service account, to which `bmas up` hands the store's directory, may make the file.
  // In PostgreSQL, the cluster's store is root's as its file would be.
  if (StoreIsOnPostgres()) return geteuid() != 0;
  const std::string store = StorePath(state_dir);
  const std::string store_dir = std::filesystem::path(store).parent_path().string();
  return access(store.c_str(), R_OK) != 0 &&
         (access(store.c_str(), F_OK) == 0 ||
          (access(state_dir.c_str(), W_OK) != 0 && access(store_dir.c_str(), W_OK) != 0));
}

Error StoreNeedsRoot(const std::string& state_dir) {
  return Error{ErrorCode::kPermissionDenied,
               fmt::format("needs root: the cluster's store in {} is root's. Ask your admin to "
                           "run it for you; your own usage is `bmas usage`",
                           state_dir)};
}

Result<int64_t> UserCommands::UsageSince(const Env& env) const {
  if (since_.empty()) return int64_t{0};
  return ParseSince(since_, static_cast<int64_t>(env.UnixNow()));
}

// `bmas usage` for a user who cannot read the store (it is root's): their own usage, from the
// agent, which knows who asks from the socket's credentials.
int UserCommands::OwnUsageThroughAgent(const std::string& state_dir, const Env& env) {
  const passwd* me = getpwuid(geteuid());
  const std::string name = me != nullptr ? me->pw_name : std::to_string(geteuid());
  if (usage_user_ && *usage_user_ != name) {
    fmt::print(stderr,
               "bmas usage: only root reads other users' usage (the store is root's); yours is "
               "`bmas usage`\n");
    return 1;
  }
  auto since = UsageSince(env);
  if (!since) {
    fmt::print(stderr, "bmas: {}\n", since.error().message);
    return 1;
  }
  const std::string socket = AgentSocketPath(state_dir);
  auto reply = AgentUsage(socket, *since);
  if (!reply) {
    fmt::print(stderr, "bmas usage: {}: {}\n", StorePath(state_dir),
               reply.error().code == ErrorCode::kNotFound
                   ? fmt::format("only root reads the store, and no agent answers at {} to give "
                                 "you your own usage (the admin starts it with `bmas up`)",
                                 socket)
                   : reply.error().message);
    return 1;
  }
  auto view = ParseUsageReply(*reply);
  if (!view) {
    fmt::print(stderr, "bmas usage: {}\n", view.error().message);
    return 1;
  }
  fmt::print("{}", FormatUsage(*view, json_, usage_jobs_));
  return 0;
}

// `bmas key list|create|revoke` for a user who cannot open the store (it is root's): their own
// keys, through the agent, which knows who asks from the socket's credentials.
int UserCommands::OwnKeysThroughAgent(const std::string& state_dir, CLI::App* which) {
  const std::string verb = which->get_name();
  const passwd* me = getpwuid(geteuid());
  const std::string self = me != nullptr ? me->pw_name : std::to_string(geteuid());
  if (which != key_revoke_ && name_ != self) {
    fmt::print(stderr,
               "bmas key {}: only root manages other users' keys (the store is root's); yours: "
               "`bmas key {}`\n",
               verb, verb);
    return 2;
  }
  const std::string socket = AgentSocketPath(state_dir);
  auto reply = AgentOwnKeys(socket, verb, key_id_);
  if (!reply) {
    fmt::print(stderr, "bmas key {}: {}\n", verb,
               reply.error().code == ErrorCode::kNotFound
                   ? fmt::format("only root opens the store in {}, and no agent answers at {} to "
                                 "do it for you (the admin starts it with `bmas up`)",
                                 state_dir, socket)
                   : reply.error().message);
    return 1;
  }
  if (which == key_list_) {
    auto keys = ParseOwnKeys(*reply);
    if (!keys) {
      fmt::print(stderr, "bmas key list: {}\n", keys.error().message);
      return 1;
    }
    for (KeyInfo& k : *keys) k.user = self;
    PrintKeys(*keys, json_);
    return 0;
  }
  rapidjson::Document d;
  d.Parse(reply->c_str(), reply->size());
  if (which == key_create_ && d.IsObject() && d.HasMember("key") && d["key"].IsString()) {
    fmt::print("{}\n", d["key"].GetString());
  } else {
    fmt::print("revoked key {}\n", key_id_);
  }
  return 0;
}

void UserCommands::PrintKeys(const std::vector<KeyInfo>& keys, bool json) {
  if (json) {
    fmt::print("{}\n", KeysJson(keys));
    return;
  }
  fmt::print("{:<14} {:<22} {}\n", "ID", "CREATED", "REVOKED");
  for (const KeyInfo& k : keys) {
    fmt::print("{:<14} {:<22} {}\n", k.id, UtcTime(k.created_at),
               k.revoked_at ? UtcTime(*k.revoked_at) : "-");
  }
}

int UserCommands::Run(GlobalOptions& global, CLI::App* which) {
  Config config = global.LoadConfigOrDefaults();
  std::string state_dir = ResolveStateDir(global.state_dir, config);
  if ((which == key_create_ || which == key_list_) && name_.empty()) {
    const passwd* me = getpwuid(geteuid());
    name_ = me != nullptr ? me->pw_name : std::to_string(geteuid());
  }
  if (geteuid() != 0 && StoreIsOthers(state_dir)) {
    if (which == usage_) return OwnUsageThroughAgent(state_dir, global.services->env());
    if (which == key_create_ || which == key_list_ || which == key_revoke_) {
      return OwnKeysThroughAgent(state_dir, which);
    }
    const CLI::App* parent = which->get_parent();
    const std::string command = parent != nullptr && parent->get_parent() != nullptr
                                    ? parent->get_name() + " " + which->get_name()
                                    : which->get_name();
    fmt::print(stderr, "bmas {}: {}\n", command, StoreNeedsRoot(state_dir).message);
    return 2;
  }
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  auto opened = global.services->OpenStore(state_dir);
  if (!opened) {
    fmt::print(stderr, "bmas: {}\n", opened.error().message);
    return 1;
  }
  Store& store = **opened;
  auto fail = [](const Error& e) {
    fmt::print(stderr, "bmas: {}\n", e.message);
    return 1;
  };
  // The limits `user add` and `user set` take alike, into a new user's limits or a change.
  auto limits_given = [&](auto& limits) {
    limits.rpm = rpm_;
    limits.tpm = tpm_;
    limits.tokens_per_day = tokens_per_day_;
    limits.max_concurrent = max_concurrent_;
    limits.workspace = workspace_;
  };

  if (which == user_add_) {
    UserLimits limits;
    limits.weight = weight_.value_or(1.0);
    limits_given(limits);
    if (auto r = store.AddUser(name_, limits); !r) return fail(r.error());
    if (admin_flag_) {
      UserChange change;
      change.admin = true;
      if (auto r = store.ChangeUser(name_, change); !r) return fail(r.error());
    }
    fmt::print("added {}user {}\n", admin_flag_ ? "admin " : "", name_);
  } else if (which == user_list_) {
    auto users = store.ListUsers();
    if (!users) return fail(users.error());
    if (json_) {
      fmt::print("{}\n", UsersJson(*users));
    } else {
      fmt::print("{:<20} {:>7} {:>10} {:>12} {:>15} {:>10}  {:<27} {}\n", "NAME", "WEIGHT", "RPM",
                 "TPM", "TOKENS/DAY", "CONCURRENT", "WORKSPACE CPU/MEM/PROC/DISK", "CREATED");
      for (const User& u : *users) {
        fmt::print("{:<20} {:>7} {:>10} {:>12} {:>15} {:>10}  {:<27} {}\n",
                   u.admin ? u.name + " (admin)" : u.name,
                   u.limits.weight, Limit(u.limits.rpm), Limit(u.limits.tpm),
                   Limit(u.limits.tokens_per_day), Limit(u.limits.max_concurrent),
                   WorkspaceColumn(u.limits.workspace), UtcTime(u.created_at));
      }
    }
  } else if (which == user_set_) {
    UserChange change;
    change.weight = weight_;
    limits_given(change);
    change.clear = unset_;
    change.admin = admin_;
    if (auto r = store.ChangeUser(name_, change); !r) return fail(r.error());
    fmt::print("changed user {}\n", name_);
    const WorkspaceLimits& w = workspace_;
    const bool workspace_changed =
        w.cpus || w.memory || w.processes || w.disk ||
        std::any_of(unset_.begin(), unset_.end(), [](const std::string& f) {
          return f == "cpus" || f == "memory" || f == "processes" || f == "disk";
        });
    if (workspace_changed) fmt::print("{}\n", ApplyWorkspaceLimits(global, store, name_));
  } else if (which == user_remove_) {
    if (auto r = store.RemoveUser(name_); !r) return fail(r.error());
    fmt::print("removed user {} (their keys are revoked)\n", name_);
  } else if (which == key_create_) {
    auto key = store.CreateKey(name_);
    if (!key) return fail(key.error());
    fmt::print("{}\n", *key);
  } else if (which == key_revoke_) {
    if (auto r = store.RevokeKey(key_id_); !r) return fail(r.error());
    fmt::print("revoked key {}\n", key_id_);
  } else if (which == usage_) {
    auto since = UsageSince(global.services->env());
    if (!since) return fail(since.error());
    auto view = ReadUsageView(store, usage_user_, *since);
    if (!view) return fail(view.error());
    fmt::print("{}", FormatUsage(*view, json_, usage_jobs_));
  } else if (which == key_list_) {
    auto keys = store.ListKeys(name_);
    if (!keys) return fail(keys.error());
    PrintKeys(*keys, json_);
  }
  return 0;
}

}  // namespace bmas

namespace bmas {

Result<int64_t> ParseSince(const std::string& text, int64_t now) {
  auto bad = [&] {
    return InvalidArgument(fmt::format("--since '{}': give unix seconds, 2026-11-21, "
                                       "2026-11-21T10:00:00Z, or an age such as 30m, 12h, 7d",
                                       text),
                           "since");
  };
  if (text.empty()) return bad();
  char unit = text.back();
  std::string digits = text;
  int64_t scale = 0;
  if (unit == 's' || unit == 'm' || unit == 'h' || unit == 'd') {
    scale = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : 86400;
    digits.pop_back();
  }
  if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string::npos) {
    int64_t v = std::stoll(digits);
    return scale == 0 ? v : now - v * scale;
  }
  std::tm tm{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm);
  if (end == nullptr || *end != '\0') {
    tm = {};
    end = strptime(text.c_str(), "%Y-%m-%d", &tm);
    if (end == nullptr || *end != '\0') return bad();
  }
  return static_cast<int64_t>(timegm(&tm));
}

Result<StorePtr> OpenStateStore(GlobalOptions& global) {
  Config config = global.LoadConfigOrDefaults();
  std::string state_dir = ResolveStateDir(global.state_dir, config);
  // The store is never made in its place: the cluster's is root's.
  if (geteuid() != 0 && StoreIsOthers(state_dir)) return StoreNeedsRoot(state_dir);
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  return global.services->OpenStore(state_dir);
}

int GatewayCommand::RunBackendCommand(GlobalOptions& global, const std::string& verb) {
  auto store = OpenStateStore(global);
  if (!store) {
    fmt::print(stderr, "bmas gateway backend {}: {}\n", verb, store.error().message);
    return store.error().code == ErrorCode::kPermissionDenied ? 2 : 1;
  }
  if (verb == "list") return ListBackends(global, **store);
  auto parsed = gateway::ParseBackendUrl(backend_url_);
  if (!parsed) {
    fmt::print(stderr, "bmas: {}\n", parsed.error().message);
    return 1;
  }
  Result<void> r = verb == "add" ? (*store)->AddBackend(parsed->url)
                                 : (*store)->RemoveBackend(parsed->url);
  if (!r) {
    fmt::print(stderr, "bmas: {}\n", r.error().message);
    return 1;
  }
  fmt::print("{} backend {}\n", verb == "add" ? "added" : "removed (draining)", parsed->url);
  return 0;
}

}  // namespace bmas
