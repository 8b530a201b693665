#include "pg_server.h"

#include <fmt/format.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "test_helpers.h"

namespace bmas::testing {
namespace fs = std::filesystem;

namespace {

Error Failed(const std::string& what, const Result<CommandOutput>& r) {
  return Internal(fmt::format(
      "{} failed: {}", what,
      r ? fmt::format("exit {}: {}{}", r->exit_code, r->out, r->err) : r.error().message));
}

}  // namespace

std::string PgServer::ServerAccount() {
  return getpwnam("postgres") != nullptr ? "postgres" : EnsureUnixUser("bmas-pgtest");
}

std::vector<std::string> PgServer::AsServerAccount(std::vector<std::string> args) const {
  std::vector<std::string> argv = wrap_;
  if (!account_.empty()) {
    argv.insert(argv.end(), {"setpriv", "--reuid=" + account_, "--regid=" + account_,
                             "--init-groups", "--"});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

Result<std::unique_ptr<PgServer>> PgServer::Start(const PgServerOptions& options) {
  auto s = std::unique_ptr<PgServer>(new PgServer());
  s->wrap_ = options.wrap;
  const char* bin = std::getenv("BMAS_PG_BIN");
  s->bin_ = bin != nullptr && *bin != '\0' ? bin : "/usr/lib/postgresql/15/bin";
  if (!fs::exists(s->bin_ + "/initdb") || !fs::exists(s->bin_ + "/pg_ctl")) {
    return Internal(
        fmt::format("no PostgreSQL server in {} (initdb, pg_ctl): install Debian's "
                    "postgresql package (scripts/install-deps.sh does), or set "
                    "BMAS_PG_BIN",
                    s->bin_));
  }
  std::string tmpl = (fs::temp_directory_path() / "bmas_pg_XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return Internal("mkdtemp failed");
  s->dir_ = tmpl;
  s->data_dir_ = s->dir_ + "/data";
  s->socket_dir_ = s->dir_ + "/sock";
  // Names the socket file only, unless options.conf listens on TCP.
  s->port_ = options.port != 0 ? options.port : FreeTcpPort();
  fs::create_directories(s->socket_dir_);
  // Clients of any account (a gateway running as bmas up's service account) reach the socket.
  chmod(s->dir_.c_str(), 0755);
  chmod(s->socket_dir_.c_str(), 0755);
  if (geteuid() == 0) {
    s->account_ = ServerAccount();
    const passwd* pw = getpwnam(s->account_.c_str());
    if (pw == nullptr) return Internal("no account to run PostgreSQL as");
    for (const std::string& d : {s->dir_, s->socket_dir_}) {
      if (chown(d.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
        return Internal(fmt::format("cannot give {} to {}", d, s->account_));
      }
    }
  }
  auto init =
      RunCommand(s->AsServerAccount({s->bin_ + "/initdb", "-D", s->data_dir_, "-A", "trust", "-U",
                                     "postgres", "--no-sync", "-E", "UTF8", "--locale=C"}),
                 {}, std::chrono::seconds(120));
  if (!init || init->exit_code != 0) return Failed("initdb", init);
  for (const auto& [file, text] : {std::pair{"postgresql.conf", &options.conf},
                                   std::pair{"pg_hba.conf", &options.hba},
                                   std::pair{"pg_ident.conf", &options.ident}}) {
    if (text->empty()) continue;
    std::ofstream out(s->data_dir_ + "/" + file, std::ios::app);
    out << '\n' << *text << '\n';
    if (!out.flush()) return Internal(fmt::format("cannot add to {}/{}", s->data_dir_, file));
  }
  const std::string server_options = fmt::format(
      "-k {} -p {} {}-c fsync=off -c synchronous_commit=off "
      "-c full_page_writes=off -c max_connections=200",
      s->socket_dir_, s->port_, options.conf.empty() ? "-c listen_addresses= " : "");
  auto start = RunCommand(
      s->AsServerAccount({s->bin_ + "/pg_ctl", "-D", s->data_dir_, "-l", s->dir_ + "/server.log",
                          "-o", server_options, "-w", "-t", "60", "start"}),
      {}, std::chrono::seconds(90));
  s->started_ = true;  // stop it even when pg_ctl gave up waiting
  if (!start || start->exit_code != 0) return Failed("pg_ctl start", start);
  return s;
}

PgServer::~PgServer() {
  if (started_) {
    (void)RunCommand(
        AsServerAccount({bin_ + "/pg_ctl", "-D", data_dir_, "-m", "immediate", "-w", "stop"}), {},
        std::chrono::seconds(60));
  }
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

std::string PgServer::Url(const std::string& db) const {
  return fmt::format("postgresql://postgres@/{}?host={}&port={}", db, socket_dir_, port_);
}

Result<CommandOutput> PgServer::Psql(const std::string& db, const std::string& sql) {
  return RunCommand({bin_ + "/psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h",
                     socket_dir_, "-p", std::to_string(port_), "-U", "postgres", "-d", db, "-c",
                     sql});
}

Result<void> PgServer::CreateDatabase(const std::string& name) {
  auto r = Psql("postgres", fmt::format("CREATE DATABASE \"{}\"", name));
  if (!r || r->exit_code != 0) return Failed("CREATE DATABASE " + name, r);
  return {};
}

}  // namespace bmas::testing
