// `bmas slurm tls-front`: serves slurm/tls_front.h with the controller's certificate, issued
// from the cluster CA at start (kept in memory only) or read from --cert/--key.

#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/slurm_commands.h"
#include "cluster/cluster_ca.h"
#include "cluster/cluster_files.h"
#include "common/config.h"
#include "common/listen_socket.h"
#include "daemon/services.h"
#include "slurm/tls_front.h"

namespace bmas {
namespace {

Result<std::string> ReadPem(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in || text.str().empty()) {
    return InvalidArgument(fmt::format("cannot read the {} {}", what, path));
  }
  return text.str();
}

// Root is needed only to read the CA key and to bind: the front serves the network as
// `user` (setgroups, setgid, setuid, checked), with no way back.
Result<void> DropTo(const std::string& user) {
  const passwd* pw = getpwnam(user.c_str());
  if (pw == nullptr) return InvalidArgument(fmt::format("there is no user {} to serve as", user));
  const uid_t uid = pw->pw_uid;
  const gid_t gid = pw->pw_gid;
  if (setgroups(0, nullptr) != 0 || setgid(gid) != 0 || setuid(uid) != 0 || setuid(0) == 0 ||
      geteuid() != uid) {
    return Internal(fmt::format("cannot become {}: {}", user, std::strerror(errno)));
  }
  return {};
}

bool IsWildcard(const std::string& host) {
  return host == "0.0.0.0" || host == "::" || host.empty();
}

}  // namespace

int SlurmCommands::RunTlsFront(GlobalOptions& global) {
  global.SetUpLogging();
  auto fail = [](const Error& e) {
    fmt::print(stderr, "bmas slurm tls-front: {}\n", e.message);
    return e.code == ErrorCode::kInvalidArgument ? 2 : 1;
  };
  TlsFrontOptions o;
  auto listen = SplitHostPort(front_listen_);
  if (!listen) return fail(listen.error());
  o.listen_host = listen->first;
  o.listen_port = listen->second;
  auto backend = SplitHostPort(front_backend_);
  if (!backend) return fail(backend.error());
  o.backend_host = backend->first;
  o.backend_port = backend->second;

  if (!front_cert_.empty() || !front_key_.empty()) {
    if (front_cert_.empty() || front_key_.empty()) {
      return fail(InvalidArgument("give both --cert and --key, or neither"));
    }
    auto cert = ReadPem(front_cert_, "certificate");
    if (!cert) return fail(cert.error());
    auto key = ReadPem(front_key_, "key");
    if (!key) return fail(key.error());
    o.cert_pem = std::move(*cert);
    o.key_pem = std::move(*key);
  } else {
    const std::string state_dir =
        ResolveStateDir(global.state_dir, global.LoadConfigOrDefaults());
    auto ca = cluster::LoadClusterCa(state_dir);
    if (!ca) return fail(ca.error());
    cluster::NodeIdentity who;
    if (front_name_.empty()) {
      char name[256] = {};
      gethostname(name, sizeof name - 1);
      front_name_ = name;
    }
    who.host = front_name_;
    if (!IsWildcard(o.listen_host)) who.address = o.listen_host;
    auto issued = cluster::IssueNodeCertificate(
        ca->ca, who, static_cast<int64_t>(global.services->env().UnixNow()));
    if (!issued) return fail(issued.error());
    o.cert_pem = std::move(issued->cert_pem);
    o.key_pem = std::move(issued->key_pem);
  }

  // SIGINT and SIGTERM go to a thread that stops the front; blocked before it starts, so that
  // every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto front = TlsFront::Listen(std::move(o));
  if (!front) return fail(front.error());
  // Before any thread starts: setuid applies to the whole process then.
  if (geteuid() == 0) {
    if (auto dropped = DropTo(front_user_); !dropped) return fail(dropped.error());
  }
  fmt::print("bmas slurm tls-front: https://{} -> http://{} (certificate for {}), as uid {}\n",
             JoinHostPort(listen->first, (*front)->port()), front_backend_,
             front_cert_.empty() ? front_name_ : front_cert_, geteuid());
  std::fflush(stdout);
  TlsFront* serving = front->get();
  std::thread waiter([serving, stop_signals] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    serving->Stop();
  });
  serving->Run();
  // Run returns only after Stop, which the waiter called: it is done or about to be.
  waiter.join();
  spdlog::info("bmas slurm tls-front: stopped ({} connections refused at the caps)",
               serving->refused());
  return 0;
}

}  // namespace bmas
