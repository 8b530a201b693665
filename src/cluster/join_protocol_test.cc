#include "cluster/join_protocol.h"

#include <gtest/gtest.h>

#include <string>

namespace bmas::cluster {
namespace {

JoinRequest Sample() {
  JoinRequest r;
  r.secret = std::string("\x00\x01secret\xff", 9);
  r.host = "oss01";
  r.address = "10.200.0.11";
  r.csr_pem = "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n";
  r.replica_csr_pem = "-----BEGIN CERTIFICATE REQUEST-----\nBBBB\n-----END CERTIFICATE REQUEST-----\n";
  return r;
}

TEST(JoinProtocolTest, ARequestReadsBackAsItWasWritten) {
  auto back = ParseJoinRequest(FormatJoinRequest(Sample()));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->secret, Sample().secret);
  EXPECT_EQ(back->host, "oss01");
  EXPECT_EQ(back->address, "10.200.0.11");
  EXPECT_EQ(back->csr_pem, Sample().csr_pem);
  EXPECT_EQ(back->replica_csr_pem, Sample().replica_csr_pem);
  EXPECT_FALSE(back->bmas_version.empty());
}

TEST(JoinProtocolTest, AnotherReleaseOfTheControllerIsNamedWithTheFix) {
  EXPECT_EQ(ReleaseMismatch("0.1.0", "0.1.0"), std::nullopt);
  EXPECT_EQ(ReleaseMismatch("", "0.1.0"), std::nullopt);  // the controller sent none
  auto note = ReleaseMismatch("0.2.0", "0.1.0");
  ASSERT_TRUE(note);
  EXPECT_NE(note->find("controller runs bmas 0.2.0"), std::string::npos) << *note;
  EXPECT_NE(note->find("this node bmas 0.1.0"), std::string::npos) << *note;
  EXPECT_NE(note->find("install the same bmas"), std::string::npos) << *note;
}

TEST(JoinProtocolTest, AReleaseThatIsNotAVersionIsDroppedSoItCannotWriteALogLine) {
  const std::string body = FormatJoinRequest(Sample());
  const size_t at = body.find("\"bmas\":\"") + 8;
  const size_t end = body.find('"', at);
  ASSERT_NE(end, std::string::npos);
  std::string forged = body;
  forged.replace(at, end - at, "0.1.0\\n[info] join service: oss99 joined");
  auto back = ParseJoinRequest(forged);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->bmas_version, "");
  EXPECT_EQ(back->host, "oss01");
}

TEST(JoinProtocolTest, AReplyReadsBackAsItWasWritten) {
  JoinReply r;
  r.node_cert_pem = "cert";
  r.ca_cert_pem = "ca";
  r.replica_cert_pem = "replica cert";
  r.munge_key = std::string(1024, '\x07');
  r.bmas_toml = "[cluster]\n";
  r.prolog = "#!/bin/sh\n";
  r.epilog = "#!/bin/sh\nexit 0\n";
  r.operator_secret = "0123456789abcdef";
  auto back = ParseJoinReply(FormatJoinReply(r));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->munge_key, r.munge_key);
  EXPECT_EQ(back->bmas_toml, r.bmas_toml);
  EXPECT_EQ(back->epilog, r.epilog);
  EXPECT_EQ(back->node_cert_pem, "cert");
  EXPECT_EQ(back->replica_cert_pem, "replica cert");
  EXPECT_EQ(back->operator_secret, r.operator_secret);
  // A reply without an operator secret, or with one that is not hex, is refused.
  r.operator_secret = "";
  EXPECT_FALSE(ParseJoinReply(FormatJoinReply(r)));
  r.operator_secret = "not hex";
  EXPECT_FALSE(ParseJoinReply(FormatJoinReply(r)));
  r.operator_secret = "0123456789abcdef";
  EXPECT_TRUE(back->lxd_peers.empty());
  r.lxd_peers = {{"oss02", "pem 2"}, {"oss03", "pem 3"}};
  auto peers = ParseJoinReply(FormatJoinReply(r));
  ASSERT_TRUE(peers) << peers.error().message;
  EXPECT_EQ(peers->lxd_peers, r.lxd_peers);
  auto again = ParseLxdPeersReply(FormatLxdPeersReply(r.lxd_peers));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(*again, r.lxd_peers);
  EXPECT_EQ(*ParseLxdPeersRequest(FormatLxdPeersRequest("oss01")), "oss01");
}

TEST(JoinProtocolTest, PeersThatCannotNameAFileAreRefused) {
  for (const char* body : {R"({"lxd_peers":{"../etc/x":"pem"}})", R"({"lxd_peers":{"a/b":"pem"}})",
                           R"({"lxd_peers":{".hidden":"pem"}})", R"({"lxd_peers":{"oss02":5}})",
                           R"({"lxd_peers":"oss02"})", R"({})"}) {
    EXPECT_FALSE(ParseLxdPeersReply(body)) << body;
  }
  EXPECT_FALSE(ParseLxdPeersRequest(R"({"host":"../x"})"));
  EXPECT_TRUE(IsPeerHostName("oss01.lab-2"));
  EXPECT_FALSE(IsPeerHostName(""));
}

TEST(JoinProtocolTest, MalformedRequestsAreRefusedWithoutQuotingTheSecret) {
  const std::string ok =
      R"("protocol":"2","bmas":"0.1.0","host":"oss01","address":"a","csr":"c","replica_csr":"r")";
  struct Case {
    std::string body;
    const char* why;
  };
  for (const Case& c : {
           Case{"", "JSON object"},
           Case{"[]", "JSON object"},
           Case{R"({"secret":"abcd",)" + ok + R"(,"secret":"abcd"})", "repeats 'secret'"},
           Case{R"({"secret":"abcd",)" + ok + R"(,"extra":"x"})", "no member 'extra'"},
           Case{R"({"secret":"zz99",)" + ok + "}", "not hex"},
           Case{R"({"secret":"abc",)" + ok + "}", "not hex"},
           Case{R"({)" + ok + "}", "lacks 'secret'"},
           Case{R"({"secret":5,)" + ok + "}", "not a string"},
           Case{R"({"protocol":"2","bmas":"0.1.0","secret":"abcd","host":"","address":"a",)"
                R"("csr":"c","replica_csr":"r"})",
                "names no host"},
           Case{std::string(kMaxJoinRequestBytes + 1, ' '), "at most"},
       }) {
    auto r = ParseJoinRequest(c.body);
    ASSERT_FALSE(r) << c.body;
    EXPECT_NE(r.error().message.find(c.why), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find("abcd"), std::string::npos) << r.error().message;
  }
}

// A node or controller of another join protocol is told both versions and which side to upgrade,
// before anything about members: bmas before protocol 2 sent neither "protocol" nor
// "replica_csr", and "lacks 'replica_csr'" would not say what to do.
TEST(JoinProtocolTest, AnotherProtocolNamesBothVersionsAndWhatToUpgrade) {
  const std::string v1_request =
      R"({"secret":"abcd","host":"oss01","address":"a","csr":"c"})";
  auto old_node = ParseJoinRequest(v1_request);
  ASSERT_FALSE(old_node);
  EXPECT_EQ(old_node.error().param, "protocol");
  EXPECT_NE(old_node.error().message.find("the node runs a bmas from before join protocol 2 (join "
                                          "protocol 1) and this controller bmas "),
            std::string::npos)
      << old_node.error().message;
  EXPECT_NE(old_node.error().message.find("install the controller's bmas on the node"),
            std::string::npos);
  EXPECT_EQ(old_node.error().message.find("abcd"), std::string::npos);

  std::string newer = FormatJoinRequest(Sample());
  newer.replace(newer.find(R"("protocol":"2")"), 14, R"("protocol":"3")");
  newer.replace(newer.find(R"("bmas":")"), 8, R"("bmas":"9.9.)");
  auto new_node = ParseJoinRequest(newer);
  ASSERT_FALSE(new_node);
  EXPECT_NE(new_node.error().message.find("bmas 9.9."), std::string::npos)
      << new_node.error().message;
  EXPECT_NE(new_node.error().message.find("upgrade the controller first"), std::string::npos);

  // A reply of protocol 1, read by this node.
  const std::string v1_reply =
      R"({"node_cert":"c","ca_cert":"a","munge_key":"00","bmas_toml":"","prolog":"",)"
      R"("epilog":"","operator_secret":"00","lxd_peers":{}})";
  auto old_controller = ParseJoinReply(v1_reply);
  ASSERT_FALSE(old_controller);
  EXPECT_EQ(old_controller.error().param, "protocol");
  EXPECT_NE(old_controller.error().message.find("upgrade the controller first"), std::string::npos)
      << old_controller.error().message;
  // A release that is not a version's characters is not echoed (a peer's own log line).
  std::string forged = FormatJoinRequest(Sample());
  forged.replace(forged.find(R"("protocol":"2")"), 14, R"("protocol":"3")");
  forged.replace(forged.find(R"("bmas":")"), 8, R"("bmas":"9\nINFO joined)");
  auto quiet = ParseJoinRequest(forged);
  ASSERT_FALSE(quiet);
  EXPECT_EQ(quiet.error().message.find('\n'), std::string::npos) << quiet.error().message;
  EXPECT_EQ(quiet.error().message.find("INFO"), std::string::npos) << quiet.error().message;
  EXPECT_NE(quiet.error().message.find("an unknown bmas (join protocol 3)"), std::string::npos)
      << quiet.error().message;
  // A "protocol" that is no number is another protocol too.
  std::string odd = FormatJoinRequest(Sample());
  odd.replace(odd.find(R"("protocol":"2")"), 14, R"("protocol":[2])");
  auto refused = ParseJoinRequest(odd);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("join protocol 0"), std::string::npos);
}

TEST(JoinProtocolTest, HexDecodes) {
  EXPECT_EQ(*FromHex("00ff7A"), std::string("\x00\xff\x7a", 3));
  EXPECT_FALSE(FromHex("0"));
  EXPECT_FALSE(FromHex("0g"));
}

}  // namespace
}  // namespace bmas::cluster
