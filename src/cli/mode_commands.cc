#include "cli/mode_commands.h"

#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "cli/slurm_target.h"
#include "common/json_object.h"
#include "common/process.h"
#include "core/hostlist.h"
#include "daemon/services.h"
#include "slurm/mode_switch.h"
#include "slurm/modes.h"

namespace bmas {
namespace {

// `scontrol ARGS...` against the target's Slurm; its stderr becomes the error.
slurm::Scontrol ScontrolOf(const SlurmTarget& t) {
  return [env = t.env](std::vector<std::string> args) -> Result<std::string> {
    args.insert(args.begin(), "scontrol");
    auto r = RunCommand(args, env, std::chrono::seconds(15));
    if (!r) return r.error();
    if (r->exit_code != 0) {
      std::string err = r->err.empty() ? r->out : r->err;
      while (!err.empty() && err.back() == '\n') err.pop_back();
      return Error{ErrorCode::kUnavailable, fmt::format("scontrol {}: {}", args[1], err)};
    }
    return r->out;
  };
}

double Since(const Clock& clock, TimePoint start) { return (clock.Now() - start).count(); }

}  // namespace

Result<slurm::Mode> CurrentMode(const SlurmTarget& t) { return slurm::CurrentMode(ScontrolOf(t)); }

// Exposed for `bmas run`: research users' jobs go into their reservation.
std::string ReservationFor(const SlurmTarget& target, const std::string& user) {
  auto mode = CurrentMode(target);
  if (!mode || !mode->research) return "";
  const auto& users = mode->users;
  return std::find(users.begin(), users.end(), user) != users.end()
             ? std::string(slurm::kResearchReservation)
             : "";
}

void ModeCommands::Register(CLI::App& app, GlobalOptions& global) {
  mode_ = app.add_subcommand("mode", "Show the cluster's mode: lab (shared) or research (a few "
                                     "users own whole nodes)");
  mode_->add_flag("--json", json_, "One JSON object");
  mode_->require_subcommand(0, 1);
  CLI::App* research = mode_->add_subcommand(
      "research", "Give USERS whole nodes through a Slurm reservation (root only)");
  research->add_option("--users", users_, "Users who own the nodes (comma-separated)")
      ->delimiter(',')
      ->required();
  research->add_option("--nodes", nodes_, "Nodes, as a host list: oss[01-03]");
  research->add_option("--count", count_, "Or this many nodes, idle ones first")
      ->check(kPositive);
  research->add_flag("--add", add_,
                     "Keep the research users and nodes already reserved and add these (without "
                     "it, a new research reservation replaces the one in force)");
  research->add_flag("--force", force_,
                     "Requeue other users' jobs running on those nodes (default: they finish)");
  research->callback([this, &global] { global.exit_code = Research(global); });
  CLI::App* lab = mode_->add_subcommand("lab", "Return every node to sharing (root only)");
  lab->callback([this, &global] { global.exit_code = Lab(global); });
  mode_->callback([this, &global] {
    if (mode_->get_subcommands().empty()) global.exit_code = Show(global);
  });
}

int ModeCommands::Show(GlobalOptions& global) {
  passwd* me = getpwuid(getuid());
  auto target = ResolveSlurm(global, me != nullptr ? me->pw_name : "root");
  if (!target) return ReportFailure("mode", target.error());
  auto mode = CurrentMode(*target);
  if (!mode) return ReportFailure("mode", mode.error());
  if (json_) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartObject();
    Member(w, "mode", mode->research ? "research" : "lab");
    if (mode->research) {
      Member(w, "reservation", std::string(slurm::kResearchReservation));
      for (const auto& [key, list] : {std::pair{"users", &mode->users}, {"nodes", &mode->nodes}}) {
        w.Key(key);
        w.StartArray();
        for (const std::string& v : *list) w.String(v.c_str());
        w.EndArray();
      }
      Member(w, "since", mode->start_time);
    }
    w.EndObject();
    fmt::print("{}\n", buf.GetString());
  } else if (mode->research) {
    fmt::print("research: {} own {} (reservation {}, since {})\n", fmt::join(mode->users, ","),
               CompressHostlist(mode->nodes), slurm::kResearchReservation, mode->start_time);
  } else {
    fmt::print("lab: every node is shared\n");
  }
  return 0;
}

int ModeCommands::Research(GlobalOptions& global) {
  const Env& env = global.services->env();
  const TimePoint start = env.Now();
  if (geteuid() != 0) {
    return ReportFailure("mode research", Error{ErrorCode::kPermissionDenied, "only root switches modes"});
  }
  for (const std::string& u : users_) {
    if (getpwnam(u.c_str()) == nullptr) {
      return ReportFailure("mode research", InvalidArgument(fmt::format(
                                       "there is no Unix account '{}' on this host", u)));
    }
  }
  if (nodes_.empty() == (count_ == 0)) {
    return ReportFailure("mode research", InvalidArgument("give --nodes LIST or --count N"));
  }
  auto target = ResolveSlurm(global, "root");
  if (!target) return ReportFailure("mode research", target.error());
  slurm::ResearchRequest request;
  request.users = users_;
  request.count = count_;
  request.add = add_;
  request.force = force_;
  if (!nodes_.empty()) {
    auto expanded = ExpandHostlist(nodes_);
    if (!expanded) return ReportFailure("mode research", expanded.error());
    request.nodes = *expanded;
  }
  auto done = slurm::SwitchToResearch(*global.services->Slurm(target->endpoint),
                                      ScontrolOf(*target), target->inventory, std::move(request));
  if (!done) return ReportFailure("mode research", done.error());
  const std::string replaced =
      done->replaced.research
          ? fmt::format("; this replaces {} on {} (--add keeps them)",
                        fmt::join(done->replaced.users, ","),
                        CompressHostlist(done->replaced.nodes))
          : "";
  fmt::print("research: {} own {} (reservation {}); {}switched in {:.2f} s{}\n",
             fmt::join(done->users, ","), CompressHostlist(done->nodes),
             slurm::kResearchReservation,
             force_ ? fmt::format("{} job(s) of others requeued; ", done->requeued) : "",
             Since(env, start), replaced);
  return 0;
}

int ModeCommands::Lab(GlobalOptions& global) {
  const Env& env = global.services->env();
  const TimePoint start = env.Now();
  if (geteuid() != 0) {
    return ReportFailure("mode lab", Error{ErrorCode::kPermissionDenied, "only root switches modes"});
  }
  auto target = ResolveSlurm(global, "root");
  if (!target) return ReportFailure("mode lab", target.error());
  auto mode = slurm::SwitchToLab(ScontrolOf(*target));
  if (!mode) return ReportFailure("mode lab", mode.error());
  if (!mode->research) {
    fmt::print("lab: already; every node is shared\n");
    return 0;
  }
  fmt::print("lab: {} shared again; switched in {:.2f} s\n", CompressHostlist(mode->nodes),
             Since(env, start));
  return 0;
}

}  // namespace bmas
