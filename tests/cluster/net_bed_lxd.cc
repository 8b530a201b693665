// LXD on the test bed: each node runs an LXD of its own (its daemon, LXD_DIR, socket and storage
// pool under the node's own directory), started by `bmas lxd up` or by `bmas node join`.

#include <fmt/format.h>
#include <sys/stat.h>

#include <filesystem>

#include "net_bed.h"

namespace bmas::testbed {
namespace {

namespace fs = std::filesystem;

// The port each node's LXD serves its peers on (LXD's own default).
constexpr int kLxdPort = 8443;

}  // namespace

std::string NetBed::LxdToml(const std::string& node_dir) const {
  return fmt::format(
      "[lxd]\ndir = \"{}\"\npool_size = \"1GiB\"\nlisten = \":{}\"\n"
      "node_dir = \"{}\"\n",
      LxdDir(), kLxdPort, node_dir);
}

Result<CommandOutput> NetBed::StartLxd(const std::string& host, const std::string& bmas,
                                       const std::string& config) const {
  // An unprivileged container's root (a high host uid) must get through to LXD_DIR.
  for (const std::string& d : {dir_, dir_ + "/nodes", dir_ + "/nodes/" + host}) {
    chmod(d.c_str(), 0711);
  }
  return Run(host,
             {bmas, "--config", config, "--state-dir", dir_ + "/node/bmas-state", "lxd", "up"}, "",
             std::chrono::seconds(120));
}

std::vector<std::string> NetBed::StopLxdInstances() const {
  std::vector<std::string> left;
  for (const BedHost& h : hosts_) {
    std::error_code ec;
    if (!fs::exists(fmt::format("{}/nodes/{}/lxd/unix.socket", dir_, h.name), ec)) continue;
    // Stopped, not deleted: the bed's directory goes with them.
    auto stopped = Run(h.name, {"env", "LXD_DIR=" + LxdDir(), "lxc", "stop", "--all", "--force"},
                       "", std::chrono::seconds(60));
    if (!stopped || stopped->exit_code != 0) {
      left.push_back(fmt::format("{}'s LXD instances (lxc stop --all: {})", h.name,
                                  stopped ? stopped->err : stopped.error().message));
    }
  }
  return left;
}

}  // namespace bmas::testbed
