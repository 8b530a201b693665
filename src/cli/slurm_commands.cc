#include "cli/slurm_commands.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "common/config_table.h"
#include "core/cluster.h"
#include "slurm/slurm_config.h"

namespace bmas {
namespace {

// Writes `text` to `path` through a temporary file and a rename, so a daemon that reads the
// file meanwhile sees the old version or the new one, never half of one.
bool WriteAtomically(const std::filesystem::path& path, const std::string& text,
                     std::string& error) {
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) {
      error = fmt::format("cannot write {}", tmp.string());
      return false;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    error = fmt::format("cannot rename {} to {}: {}", tmp.string(), path.string(), ec.message());
    std::filesystem::remove(tmp, ec);
    return false;
  }
  return true;
}

}  // namespace

void SlurmCommands::Register(CLI::App& app, GlobalOptions& global) {
  slurm_ = app.add_subcommand("slurm", "Slurm, driven from the cluster inventory");
  slurm_->require_subcommand(1);
  config_ = slurm_->add_subcommand(
      "config", "Write slurm.conf, gres.conf, cgroup.conf and topology.conf for the inventory");
  config_->add_option("--cluster", cluster_file_,
                      "Inventory: a TOML file with a [cluster] table (see "
                      "examples/cluster-12x4.toml); default: the --config file");
  config_->add_option("--out", out_dir_, "Directory to write the files to (created if missing)")
      ->required();
  config_->callback([this, &global] { global.exit_code = RunConfig(global); });
}

int SlurmCommands::RunConfig(GlobalOptions& global) {
  constexpr int kBadInput = 2;
  std::string file = cluster_file_.empty() ? global.config_file : cluster_file_;
  if (file.empty()) {
    fmt::print(stderr, "bmas slurm config: give --cluster FILE (see examples/cluster-12x4.toml)\n");
    return kBadInput;
  }
  slurm::ConfigFiles files;
  try {
    files = slurm::RenderSlurmConfig(LoadCluster(file));
  } catch (const ConfigError& e) {
    fmt::print(stderr, "bmas slurm config: {}\n", e.what());
    return kBadInput;
  }
  std::error_code ec;
  std::filesystem::create_directories(out_dir_, ec);
  if (ec) {
    fmt::print(stderr, "bmas slurm config: cannot create {}: {}\n", out_dir_, ec.message());
    return 1;
  }
  for (const auto& [name, text] : files) {
    std::filesystem::path path = std::filesystem::path(out_dir_) / name;
    std::string error;
    if (!WriteAtomically(path, text, error)) {
      fmt::print(stderr, "bmas slurm config: {}\n", error);
      return 1;
    }
    fmt::print("wrote {}\n", path.string());
  }
  return 0;
}

}  // namespace bmas
