#include "cluster/controller_files.h"

#include <fmt/format.h>
#include <pwd.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <tuple>

#include "cluster/node_files.h"
#include "slurm/slurm_config.h"

namespace bmas::cluster {
namespace {

namespace fs = std::filesystem;

std::string RandomKey(Env& env, size_t bytes) {
  std::string key(bytes, '\0');
  env.RandomBytes({reinterpret_cast<uint8_t*>(key.data()), key.size()});
  return key;
}

struct Ids {
  uid_t uid = 0;
  gid_t gid = 0;
};

// Copied out at once: getpwnam's record is overwritten by the next call.
Result<Ids> Account(const std::string& name, const char* package) {
  const passwd* pw = getpwnam(name.c_str());
  if (pw == nullptr) {
    return NotFound(fmt::format("there is no `{}` account: install {} first", name, package));
  }
  return Ids{pw->pw_uid, pw->pw_gid};
}

// A single-quoted shell word.
std::string Quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

std::string ConfiglessSlurmConf(const Cluster& inventory, bool dynamic_nodes) {
  std::string conf = slurm::RenderSlurmConfig(inventory)["slurm.conf"];
  if (dynamic_nodes) {
    std::istringstream lines(conf);
    std::string kept;
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with("NodeName=")) continue;
      if (line.starts_with("PartitionName=")) {
        line = std::regex_replace(line, std::regex(" Nodes=[^ ]+"), " Nodes=ALL");
      }
      kept += line + "\n";
    }
    conf = kept + fmt::format(
                      "\n# Nodes register themselves (slurmd -Z, `bmas node join --dynamic`).\n"
                      "MaxNodeCount={}\n",
                      inventory.nodes.size());
  }
  conf +=
      "\n# Nodes fetch this configuration from slurmctld (`slurmd --conf-server`, bmas node "
      "join).\nSlurmctldParameters=enable_configless\n";
  return conf;
}

std::string HookScript(const std::string& bmas_binary, const std::string& phase) {
  return fmt::format(
      "#!/bin/sh\n# bmas workspace hook (written by `bmas node join`): a job's GPUs in its "
      "user's workspace.\n{} slurm hook {} >>/var/log/bmas-slurm-hooks.log 2>&1\nexit 0\n",
      Quoted(bmas_binary), phase);
}

Result<std::vector<ControllerFile>> WriteControllerFiles(const Cluster& inventory,
                                                         const ControllerPaths& paths, Env& env) {
  std::vector<ControllerFile> out;
  auto munge = Account("munge", "munge");
  if (!munge) return munge.error();
  auto slurm_user = Account(inventory.slurm.slurm_user, "slurm-wlm");
  if (!slurm_user) return slurm_user.error();

  std::error_code ec;
  fs::create_directories(paths.slurm_dir, ec);
  if (ec) return Internal(fmt::format("cannot create {}: {}", paths.slurm_dir, ec.message()));
  slurm::ConfigFiles files = slurm::RenderSlurmConfig(inventory);
  files["slurm.conf"] = ConfiglessSlurmConf(inventory, paths.dynamic_nodes);
  for (const auto& [name, text] : files) {
    NodeFile f{(fs::path(paths.slurm_dir) / name).string(), text, 0644, 0, 0};
    auto made = CreateIfAbsent(f);
    if (!made) return made.error();
    ControllerFile record{f.path, *made, {}};
    if (!*made) {
      auto now = ReadNodeFile(f.path);
      if (now && *now && (*now)->contents != text) {
        record.note =
            "kept: it differs from what the inventory gives; remove it to have it "
            "written again";
      }
    }
    out.push_back(std::move(record));
  }

  const std::string jwt = !paths.jwt_key.empty() ? paths.jwt_key
                          : !inventory.slurm.jwt_key.empty()
                              ? inventory.slurm.jwt_key
                              : (fs::path(paths.slurm_dir) / "jwt_hs256.key").string();
  for (const auto& [path, bytes, ids] : {std::tuple{paths.munge_key, kMungeKeyBytes, *munge},
                                         std::tuple{jwt, kJwtKeyBytes, *slurm_user}}) {
    fs::create_directories(fs::path(path).parent_path(), ec);
    NodeFile f{path, RandomKey(env, bytes), 0400, ids.uid, ids.gid};
    auto made = CreateIfAbsent(f);
    if (!made) return made.error();
    out.push_back(
        {path, *made, *made ? std::string() : "kept: a key that exists is never replaced"});
  }
  return out;
}

}  // namespace bmas::cluster
