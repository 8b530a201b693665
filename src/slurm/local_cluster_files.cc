// The local cluster's files under <state_dir>/slurm: files, keys and directories made without
// following links, and local.json, the record of what was started (SaveLocalCluster,
// ReadLocalCluster).

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include "common/json_object.h"
#include "common/traversable.h"
#include "slurm/local_cluster.h"
#include "slurm/local_cluster_internal.h"

namespace bmas::slurm {
namespace {

namespace fs = std::filesystem;

// local.json's text and number members, in the order SaveLocalCluster writes them.
constexpr std::pair<const char*, std::string LocalCluster::*> kTextFields[] = {
    {"state_dir", &LocalCluster::state_dir}, {"inventory", &LocalCluster::inventory},
    {"root", &LocalCluster::root},           {"id", &LocalCluster::id},
    {"conf", &LocalCluster::conf},           {"device_dir", &LocalCluster::device_dir},
    {"jwt_key", &LocalCluster::jwt_key}};
constexpr std::pair<const char*, int LocalCluster::*> kNumberFields[] = {
    {"slurmctld_port", &LocalCluster::slurmctld_port},
    {"rest_port", &LocalCluster::rest_port},
    {"gpus_per_node", &LocalCluster::gpus_per_node}};

}  // namespace

namespace internal {

Result<void> WriteFile(const fs::path& path, std::string_view text, mode_t mode) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return Internal(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ok = fchmod(fd, mode) == 0 && ok;
  close(fd);
  if (!ok) return Internal(fmt::format("cannot write {}: {}", path.string(), std::strerror(errno)));
  return {};
}

Result<void> MakeKey(const fs::path& path, size_t bytes, uid_t uid, gid_t gid) {
  if (!fs::exists(path)) {
    std::ifstream random("/dev/urandom", std::ios::binary);
    std::string key(bytes, '\0');
    if (!random.read(key.data(), static_cast<std::streamsize>(bytes))) {
      return Internal("cannot read /dev/urandom");
    }
    if (auto w = WriteFile(path, key, 0400); !w) return w;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  const bool ok = fd >= 0 && fchown(fd, uid, gid) == 0;
  const int e = errno;
  if (fd >= 0) close(fd);
  if (!ok) return Internal(fmt::format("cannot chown {}: {}", path.string(), std::strerror(e)));
  return {};
}

Result<void> MakeDir(const fs::path& path, mode_t mode, uid_t uid, gid_t gid) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return Internal(fmt::format("cannot create {}: {}", path.string(), ec.message()));
  // Through a descriptor: a link put in its place is refused, never followed.
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const bool ok = fd >= 0 && fchmod(fd, mode) == 0 && fchown(fd, uid, gid) == 0;
  const int e = errno;
  if (fd >= 0) close(fd);
  if (!ok) {
    return Internal(fmt::format("cannot set the owner or mode of {}: {}", path.string(),
                                std::strerror(e)));
  }
  return {};
}

Result<void> CheckTraversable(const fs::path& path) {
  if (auto p = UntraversableAncestor(path)) {
    return InvalidArgument(fmt::format(
        "{} is not traversable by other users, so munge, nobody and the jobs' users cannot "
        "reach the state dir {}: `chmod o+x {}` or use another --state-dir",
        p->string(), path.string(), p->string()));
  }
  return {};
}

Result<Account> LookUp(const char* user) {
  passwd* pw = getpwnam(user);
  if (pw == nullptr) {
    return Error{ErrorCode::kNotFound,
                 fmt::format("there is no user '{}' on this host: install munge ({})", user,
                             kInstallHint)};
  }
  return Account{pw->pw_uid, pw->pw_gid};
}

Result<void> SaveLocalCluster(const LocalCluster& c) {
  rapidjson::StringBuffer buf;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buf);
  auto str = [&](const char* key, const std::string& value) {
    if (key != nullptr) w.Key(key);
    w.String(value.c_str(), static_cast<rapidjson::SizeType>(value.size()));
  };
  w.StartObject();
  for (const auto& [key, field] : kTextFields) str(key, c.*field);
  for (const auto& [key, field] : kNumberFields) {
    w.Key(key);
    w.Int(c.*field);
  }
  Member(w, "accounting", c.accounting);
  w.Key("nodes");
  w.StartArray();
  for (const std::string& n : c.nodes) w.String(n.c_str());
  w.EndArray();
  w.Key("standby");
  w.StartArray();
  for (const std::string& n : c.standby) w.String(n.c_str());
  w.EndArray();
  w.Key("daemons");
  w.StartArray();
  for (const DaemonProcess& d : c.daemons) WriteDaemonProcess(w, d);
  w.EndArray();
  w.EndObject();
  return WriteFile(fs::path(c.root) / "local.json", std::string(buf.GetString()) + "\n", 0644);
}

}  // namespace internal

Result<LocalCluster> ReadLocalCluster(const std::string& state_dir) {
  const fs::path path = fs::absolute(state_dir) / "slurm" / "local.json";
  std::ifstream in(path);
  if (!in) {
    return Error{ErrorCode::kNotFound,
                 fmt::format("no local Slurm cluster was started in {} (`bmas slurm up` starts "
                             "one)",
                             state_dir)};
  }
  std::stringstream text;
  text << in.rdbuf();
  rapidjson::Document d;
  d.Parse(text.str().c_str());
  auto bad = [&] { return Internal(fmt::format("{} is not what bmas wrote", path.string())); };
  if (d.HasParseError() || !d.IsObject()) return bad();
  LocalCluster c;
  auto str = [&](const char* key, std::string& out) {
    if (d.HasMember(key) && d[key].IsString()) out = d[key].GetString();
  };
  auto num = [&](const char* key, int& out) {
    if (d.HasMember(key) && d[key].IsInt()) out = d[key].GetInt();
  };
  for (const auto& [key, field] : kTextFields) str(key, c.*field);
  for (const auto& [key, field] : kNumberFields) num(key, c.*field);
  c.accounting = d.HasMember("accounting") && d["accounting"].IsBool() && d["accounting"].GetBool();
  if (!d.HasMember("nodes") || !d["nodes"].IsArray() || !d.HasMember("daemons") ||
      !d["daemons"].IsArray()) {
    return bad();
  }
  for (const auto& n : d["nodes"].GetArray()) {
    if (n.IsString()) c.nodes.emplace_back(n.GetString());
  }
  if (d.HasMember("standby") && d["standby"].IsArray()) {
    for (const auto& n : d["standby"].GetArray()) {
      if (n.IsString()) c.standby.emplace_back(n.GetString());
    }
  }
  for (const auto& e : d["daemons"].GetArray()) {
    auto daemon = ReadDaemonProcess(e);
    if (!daemon) return bad();
    c.daemons.push_back(std::move(*daemon));
  }
  return c;
}

}  // namespace bmas::slurm
