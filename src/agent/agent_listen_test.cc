#include "agent/agent_listen.h"

#include <functional>
#include <map>

#include <gtest/gtest.h>

namespace bmas {
namespace {

// Files as a map; a path not in it is NotFound, as the real reader says.
struct Files {
  std::map<std::string, std::string> files;
  std::vector<std::string> read;
  Result<std::string> operator()(const std::string& path) {
    read.push_back(path);
    auto it = files.find(path);
    if (it == files.end()) return Error{ErrorCode::kNotFound, path + ": No such file or directory"};
    return it->second;
  }
};

Result<AgentListener> Resolve(const std::string& listen, Files& files, std::string cert = {},
                              std::string key = {}, int port_flag = 0) {
  AgentSettings s;
  s.listen = listen;
  s.tls_cert = std::move(cert);
  s.tls_key = std::move(key);
  return ResolveAgentListener(s, port_flag, std::ref(files));
}

TEST(AgentListenTest, LoopbackStaysPlainHttpAndReadsNoFile) {
  for (const char* listen : {"127.0.0.1:0", "127.0.0.1:9400", "[::1]:9400"}) {
    Files files;
    auto l = Resolve(listen, files);
    ASSERT_TRUE(l) << listen << ": " << l.error().message;
    EXPECT_FALSE(l->tls) << listen;
    EXPECT_TRUE(files.read.empty()) << listen;
  }
  Files files;
  auto l = Resolve("127.0.0.1:9400", files, {}, {}, 9500);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->port, 9500);
  EXPECT_EQ(AgentListenerUrl(*l, l->port), "http://127.0.0.1:9500");
}

TEST(AgentListenTest, OffLoopbackServesTlsWithTheNodesCertificateByDefault) {
  Files files{{{kNodeCertPath, "CERT"}, {kNodeKeyPath, "KEY"}}, {}};
  for (const char* listen : {"10.0.0.11:9400", "0.0.0.0:9400", "[::]:9400"}) {
    auto l = Resolve(listen, files);
    ASSERT_TRUE(l) << listen << ": " << l.error().message;
    EXPECT_TRUE(l->tls) << listen;
    EXPECT_EQ(l->cert_pem, "CERT");
    EXPECT_EQ(l->key_pem, "KEY");
    EXPECT_EQ(l->cert_file, kNodeCertPath);
  }
  auto l = Resolve("10.0.0.11:9400", files);
  ASSERT_TRUE(l);
  EXPECT_EQ(AgentListenerUrl(*l, 9400), "https://10.0.0.11:9400");
}

TEST(AgentListenTest, GivenCertificateIsUsedOnLoopbackToo) {
  Files files{{{"/x/a.crt", "A"}, {"/x/a.key", "K"}}, {}};
  auto l = Resolve("127.0.0.1:0", files, "/x/a.crt", "/x/a.key");
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_TRUE(l->tls);
  EXPECT_EQ(l->cert_pem, "A");
  EXPECT_EQ(l->key_pem, "K");
}

// Off loopback without a certificate to serve, the agent refuses to start, and says what to set.
TEST(AgentListenTest, OffLoopbackWithoutACertificateIsRefused) {
  struct Case {
    std::map<std::string, std::string> files;
    std::string missing;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{}, kNodeCertPath, "tls_cert"},
      {{{kNodeCertPath, "CERT"}}, kNodeKeyPath, "tls_key"},
      {{{kNodeCertPath, ""}, {kNodeKeyPath, "KEY"}}, kNodeCertPath, "tls_cert"},
  };
  for (const Case& c : cases) {
    Files files{c.files, {}};
    auto l = Resolve("10.0.0.11:9400", files);
    ASSERT_FALSE(l) << c.missing;
    EXPECT_EQ(l.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(l.error().param, c.param);
    const std::string& m = l.error().message;
    EXPECT_NE(m.find(c.missing), std::string::npos) << m;
    EXPECT_NE(m.find("10.0.0.11:9400 serves TLS only off loopback"), std::string::npos) << m;
    EXPECT_NE(m.find("set [agent] tls_cert and tls_key"), std::string::npos) << m;
    EXPECT_NE(m.find("bmas node join"), std::string::npos) << m;
  }
}

TEST(AgentListenTest, AListenAddressMustBeNumeric) {
  Files files;
  for (const char* listen : {"oss01:9400", "10.0.0.11", ":9400"}) {
    auto l = Resolve(listen, files);
    ASSERT_FALSE(l) << listen;
    EXPECT_EQ(l.error().param, "listen") << listen;
    EXPECT_NE(l.error().message.find("[agent] listen"), std::string::npos);
  }
}

}  // namespace
}  // namespace bmas
