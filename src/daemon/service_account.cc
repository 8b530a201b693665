#include "daemon/service_account.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "common/process.h"

namespace bmas {

std::vector<std::string> ServiceAccount::Prefix() const {
  if (name.empty()) return {};
  return {"/usr/bin/setpriv", fmt::format("--reuid={}", uid), fmt::format("--regid={}", gid),
          "--clear-groups", "--no-new-privs", "--"};
}

bool OthersCanReach(const std::string& path, mode_t mode) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path full = fs::absolute(path, ec);
  if (ec) return false;
  struct stat st;
  if (stat(full.c_str(), &st) != 0 || (st.st_mode & mode) != mode) return false;
  for (fs::path p = full.parent_path(); !p.empty(); p = p.parent_path()) {
    if (stat(p.c_str(), &st) != 0 || (st.st_mode & S_IXOTH) == 0) return false;
    if (p == p.root_path()) break;
  }
  return true;
}

ServiceAccount PrepareServiceAccount(const std::string& binary, const std::string& state_dir,
                                     const std::string& config_file) {
  ServiceAccount a;
  a.uid = geteuid();
  a.gid = getegid();
  if (a.uid != 0) {
    a.why_not = "bmas up is not root: everything runs as you";
    return a;
  }
  if (access("/usr/bin/setpriv", X_OK) != 0) {
    a.why_not = "/usr/bin/setpriv (util-linux) is missing";
    return a;
  }
  std::string unreachable;
  if (!OthersCanReach(binary, S_IXOTH)) unreachable = binary;
  else if (!OthersCanReach(state_dir, S_IXOTH)) unreachable = state_dir;
  else if (!config_file.empty() && !OthersCanReach(config_file, S_IROTH)) unreachable = config_file;
  if (!unreachable.empty()) {
    a.why_not = fmt::format("the {} account could not reach {} (a private directory above it): "
                            "put the binary where others may run it (e.g. /usr/local/bin) and keep "
                            "the state dir and config where others may pass",
                            kServiceAccount, unreachable);
    return a;
  }
  if (getpwnam(kServiceAccount) == nullptr) {
    auto made = RunCommand({"useradd", "--system", "--user-group", "--no-create-home",
                            "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                            kServiceAccount});
    if (!made || made->exit_code != 0) {
      a.why_not = fmt::format("cannot create the {} account: {}", kServiceAccount,
                              made ? made->err : made.error().message);
      return a;
    }
  }
  passwd* pw = getpwnam(kServiceAccount);
  if (pw == nullptr) {
    a.why_not = fmt::format("the {} account vanished", kServiceAccount);
    return a;
  }
  a.uid = pw->pw_uid;
  a.gid = pw->pw_gid;
  a.name = kServiceAccount;
  return a;
}

}  // namespace bmas
