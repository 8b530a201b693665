#include "doctor/node_facts.h"

#include <sys/stat.h>
#include <sys/timex.h>
#include <sys/utsname.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/process.h"

namespace bmas::doctor {
namespace {

namespace fs = std::filesystem;

// `path` (absolute) under `root`.
std::string Under(const std::string& root, const std::string& path) {
  if (root.empty() || root == "/") return path;
  return (root.back() == '/' ? root.substr(0, root.size() - 1) : root) + path;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string FirstLine(const std::string& path) {
  std::string text = ReadText(path);
  text.erase(std::min(text.find('\n'), text.size()));
  return text;
}

std::vector<RdmaPort> ReadRdma(const std::string& root) {
  std::vector<RdmaPort> ports;
  std::error_code ec;
  const fs::path base = Under(root, "/sys/class/infiniband");
  std::vector<fs::path> devices;
  for (const auto& d : fs::directory_iterator(base, ec)) devices.push_back(d.path());
  std::sort(devices.begin(), devices.end());
  for (const fs::path& dev : devices) {
    std::vector<fs::path> dirs;
    for (const auto& p : fs::directory_iterator(dev / "ports", ec)) dirs.push_back(p.path());
    std::sort(dirs.begin(), dirs.end());
    for (const fs::path& dir : dirs) {
      RdmaPort p;
      p.device = dev.filename().string();
      p.port = std::atoi(dir.filename().c_str());
      p.rate = FirstLine(dir / "rate");
      p.state = FirstLine(dir / "state");
      p.link_layer = FirstLine(dir / "link_layer");
      std::vector<fs::path> types;
      for (const auto& t : fs::directory_iterator(dir / "gid_attrs" / "types", ec)) {
        types.push_back(t.path());
      }
      std::sort(types.begin(), types.end());
      for (const fs::path& t : types) {
        // An unpopulated GID's type cannot be read (EINVAL): nothing to add.
        if (std::string type = FirstLine(t); !type.empty()) p.gid_types.push_back(type);
      }
      ports.push_back(p);
    }
  }
  return ports;
}

std::string Container(const std::string& root) {
  std::error_code ec;
  if (fs::exists(Under(root, "/.dockerenv"), ec)) return "docker";
  if (fs::exists(Under(root, "/run/.containerenv"), ec)) return "podman";
  const std::string environ = ReadText(Under(root, "/proc/1/environ"));
  for (size_t at = 0; at < environ.size();) {
    const size_t end = std::min(environ.find('\0', at), environ.size());
    const std::string var = environ.substr(at, end - at);
    if (var.rfind("container=", 0) == 0) return var.substr(10);
    at = end + 1;
  }
  return "";
}

std::optional<uid_t> AccountUid(const std::string& passwd, const std::string& name) {
  std::istringstream in(passwd);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string user, password, uid;
    if (std::getline(fields, user, ':') && user == name && std::getline(fields, password, ':') &&
        std::getline(fields, uid, ':')) {
      char* end = nullptr;
      const unsigned long n = std::strtoul(uid.c_str(), &end, 10);
      if (!uid.empty() && *end == '\0') return static_cast<uid_t>(n);
    }
  }
  return std::nullopt;
}

KeyFile StatKey(const std::string& shown, const std::string& path) {
  KeyFile k;
  k.path = shown;
  struct stat st;
  if (lstat(path.c_str(), &st) == 0) {
    k.exists = true;
    k.regular = S_ISREG(st.st_mode);
    k.owner = st.st_uid;
    k.mode = st.st_mode & 07777;
  } else if (errno != ENOENT && errno != ENOTDIR) {
    k.error = std::strerror(errno);
  }
  return k;
}

bool LxcfsProcess(const std::string& root) {
  std::error_code ec;
  for (const auto& p : fs::directory_iterator(Under(root, "/proc"), ec)) {
    const std::string pid = p.path().filename().string();
    const bool number = !pid.empty() && std::all_of(pid.begin(), pid.end(), [](char ch) {
      return ch >= '0' && ch <= '9';
    });
    if (number && FirstLine((p.path() / "comm").string()) == "lxcfs") return true;
  }
  return false;
}

// Runs `args`, taking /usr/sbin/NAME when there is one: Debian puts slurmctld there, and a
// user's PATH often lacks /usr/sbin.
ToolRun RunVersion(std::vector<std::string> args) {
  ToolRun t;
  std::error_code ec;
  if (args[0].find('/') == std::string::npos && fs::exists("/usr/sbin/" + args[0], ec)) {
    args[0] = "/usr/sbin/" + args[0];
  }
  auto r = RunCommand(args, {}, std::chrono::seconds(10));
  if (!r) {
    t.error = r.error().message;
    return t;
  }
  if (r->exit_code == 127) {  // the child could not exec it
    t.error = args[0] + " not found";
    return t;
  }
  t.ran = true;
  t.exit_code = r->exit_code;
  t.output = r->out.empty() ? r->err : r->out;
  return t;
}

struct Cpuid {
  std::optional<bool> hypervisor;  // nullopt: not x86
  std::string signature;
};

Cpuid ReadCpuid() {
  Cpuid id;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d)) id.hypervisor = (c & (1u << 31)) != 0;
  if (id.hypervisor.value_or(false)) {
    // The hypervisor's range lies above the basic leaves __get_cpuid checks against.
    __cpuid(0x40000000, a, b, c, d);
    char sig[13] = {};
    std::memcpy(sig, &b, 4);
    std::memcpy(sig + 4, &c, 4);
    std::memcpy(sig + 8, &d, 4);
    id.signature.assign(sig, strnlen(sig, 12));
  }
#endif
  return id;
}

}  // namespace

NodeFacts ReadNodeFacts(const ReadOptions& o) {
  NodeFacts f;
  const std::string& root = o.root;
  std::error_code ec;
  f.rdma = ReadRdma(root);
  f.meminfo = ReadText(Under(root, "/proc/meminfo"));
  f.virt.dmi_present = fs::is_directory(Under(root, "/sys/class/dmi/id"), ec);
  f.virt.dmi_vendor = FirstLine(Under(root, "/sys/class/dmi/id/sys_vendor"));
  f.virt.dmi_product = FirstLine(Under(root, "/sys/class/dmi/id/product_name"));
  f.virt.container = Container(root);
  f.mounts = ReadText(Under(root, "/proc/self/mounts"));
  f.cgroup_controllers = FirstLine(Under(root, "/sys/fs/cgroup/cgroup.controllers"));
  f.munge_uid = AccountUid(ReadText(Under(root, "/etc/passwd")), "munge");
  f.munge_keys.push_back(StatKey("/etc/munge/munge.key", Under(root, "/etc/munge/munge.key")));
  if (!o.state_dir.empty()) {
    const std::string local = o.state_dir + "/slurm/etc/munge.key";
    f.munge_keys.push_back(StatKey(local, Under(root, local)));
  }
  struct stat st;
  f.lxcfs.meminfo_readable =
      stat(Under(root, "/var/lib/lxcfs/proc/meminfo").c_str(), &st) == 0 &&
      access(Under(root, "/var/lib/lxcfs/proc/meminfo").c_str(), R_OK) == 0;
  f.lxcfs.process_running = LxcfsProcess(root);
  f.lxcfs.installed = access(Under(root, "/usr/bin/lxcfs").c_str(), X_OK) == 0;
  f.subuid = ReadText(Under(root, "/etc/subuid"));
  f.subgid = ReadText(Under(root, "/etc/subgid"));
  if (!o.live) return f;

  const Cpuid id = ReadCpuid();
  f.virt.cpuid_hypervisor = id.hypervisor;
  f.virt.cpuid_signature = id.signature;
  utsname u;
  if (uname(&u) == 0) f.kernel_release = u.release;
  timex tx{};
  f.clock.state = adjtimex(&tx);
  f.clock.esterror_us = tx.esterror;
  f.clock.maxerror_us = tx.maxerror;
  f.lxd = RunVersion({"lxd", "--version"});
  f.slurm = RunVersion({"slurmctld", "-V"});
  f.is_root = geteuid() == 0;
  return f;
}

}  // namespace bmas::doctor
