#include "test_helpers.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <iterator>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <sstream>

namespace bmas::testing {
namespace {

// Tests do not read the machine's /etc/bmas/bmas.toml (which `make run` may have written):
// every bmas they start sees BMAS_CONFIG set, empty unless the caller set it.
[[maybe_unused]] const bool kNoSystemConfig = setenv("BMAS_CONFIG", "", 0) == 0;

}  // namespace

std::string Quote(std::string_view s) {
  rapidjson::StringBuffer buf;
  rapidjson::Writer<rapidjson::StringBuffer> w(buf);
  w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  return std::string(buf.GetString(), buf.GetSize());
}

rapidjson::Document ParseJson(const std::string& text) {
  rapidjson::Document doc;
  doc.Parse(text.c_str(), text.size());
  EXPECT_FALSE(doc.HasParseError()) << "not JSON: " << text;
  if (doc.HasParseError()) doc.SetObject();
  return doc;
}

const rapidjson::Value& At(const rapidjson::Value& v, const char* key) {
  static const rapidjson::Value kNull;
  if (!v.IsObject()) return kNull;
  auto it = v.FindMember(key);
  return it == v.MemberEnd() ? kNull : it->value;
}

const rapidjson::Value& At(const rapidjson::Value& v, int index) {
  static const rapidjson::Value kNull;
  if (!v.IsArray() || index < 0 || static_cast<rapidjson::SizeType>(index) >= v.Size()) {
    return kNull;
  }
  return v[static_cast<rapidjson::SizeType>(index)];
}

std::string Str(const rapidjson::Value& v) {
  return v.IsString() ? v.GetString() : "<not a string>";
}

int64_t Int(const rapidjson::Value& v) { return v.IsInt64() ? v.GetInt64() : -1; }

void ExpectError(const HttpResponse& r, int status, std::optional<std::string> param) {
  EXPECT_EQ(r.status, status) << r.body;
  EXPECT_THAT(r.content_type, ::testing::StartsWith("application/json"));
  auto doc = ParseJson(r.body);
  const auto& e = At(doc, "error");
  ASSERT_TRUE(e.IsObject()) << r.body;
  EXPECT_TRUE(At(e, "message").IsString() && At(e, "message").GetStringLength() > 0) << r.body;
  EXPECT_TRUE(At(e, "type").IsString()) << r.body;
  EXPECT_EQ(Int(At(e, "code")), status) << r.body;
  if (param) {
    EXPECT_EQ(Str(At(e, "param")), *param) << r.body;
  } else {
    EXPECT_TRUE(At(e, "param").IsNull()) << r.body;
  }
}

std::string PromptOfTokens(int n, int first) {
  std::string p;
  for (int i = first; i < first + n; ++i) p += fmt::format(" t{}", i % 1000);
  return p;
}

std::optional<double> MetricValue(const std::string& text, std::string_view series) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    if (line.size() > series.size() && line.starts_with(series) && line[series.size()] == ' ') {
      return std::stod(std::string(line.substr(series.size() + 1)));
    }
    pos = end + 1;
  }
  return std::nullopt;
}

int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

std::vector<std::string> MountsUnder(const std::string& root) {
  std::ifstream mounts("/proc/self/mounts");
  std::vector<std::string> under;
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream words(line);
    std::string device, point;
    words >> device >> point;
    if (point.rfind(root + "/", 0) == 0) under.push_back(point);
  }
  return under;
}

std::string EnsureUnixUser(const std::string& name) {
  if (getpwnam(name.c_str()) == nullptr) {
    auto r = RunCommand({"useradd", "--create-home", name});
    EXPECT_TRUE(r && r->exit_code == 0) << (r ? r->err : r.error().message);
  }
  return name;
}

std::string OperatorSecretOf(const std::string& state_dir) {
  std::ifstream in(state_dir + "/run/operator.secret");
  std::string secret;
  std::getline(in, secret);
  return secret;
}

HttpResponse GetAsUser(const std::string& user, uint16_t port, const std::string& target,
                       const std::string& authorization) {
  std::vector<std::string> argv = {"setpriv", "--reuid=" + user, "--regid=" + user,
                                   "--init-groups", "curl", "-sS", "-m", "10",
                                   "-w", "\n%{http_code}"};
  if (!authorization.empty()) argv.insert(argv.end(), {"-H", "Authorization: " + authorization});
  argv.push_back(fmt::format("http://127.0.0.1:{}{}", port, target));
  auto r = RunCommand(argv);
  HttpResponse response;
  if (!r || r->exit_code != 0) return response;
  const size_t eol = r->out.rfind('\n');
  response.body = r->out.substr(0, eol);
  response.status = std::atoi(r->out.c_str() + eol + 1);
  return response;
}

bool UserCanRead(const std::string& user, const std::string& path) {
  auto r = RunCommand({"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups", "cat",
                       path});
  return r && r->exit_code == 0;
}

std::string SharedBinaryIn(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string copy = dir + "/bmas";
  if (!fs::exists(copy)) {
    fs::copy_file(std::getenv("BMAS_BINARY"), copy);
    fs::permissions(copy, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
  }
  return copy;
}

Result<CommandOutput> RunBmasIn(const std::string& dir, const std::string& state,
                                const std::vector<std::string>& args, const std::string& user,
                                std::chrono::seconds timeout) {
  std::vector<std::string> argv;
  if (!user.empty()) argv = {"setpriv", "--reuid=" + user, "--regid=" + user, "--init-groups"};
  argv.insert(argv.end(), {"sh", "-c", "cd \"$0\" && exec \"$@\"", dir});
  argv.push_back(user.empty() ? std::string(std::getenv("BMAS_BINARY")) : SharedBinaryIn(dir));
  argv.insert(argv.end(), {"--state-dir", state});
  argv.insert(argv.end(), args.begin(), args.end());
  return RunCommand(argv, {}, timeout);
}

std::vector<pid_t> HostProcesses(const std::string& needle) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    // A process may exit between the listing and the read: libstdc++'s read of its cmdline
    // then throws (ESRCH, "No such process"), and it is simply not there any more.
    std::string cmdline;
    try {
      std::ifstream in(e.path() / "cmdline");
      cmdline.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } catch (const std::ios_base::failure&) {
      continue;
    }
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.starts_with(needle)) out.push_back(std::stoi(name));
  }
  return out;
}

}  // namespace bmas::testing
