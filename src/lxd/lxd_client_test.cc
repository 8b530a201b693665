#include "lxd/lxd_client.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <deque>
#include <fstream>
#include <iterator>

#include <boost/asio/local/stream_protocol.hpp>

#include "common/asio.h"

namespace bmas::lxd {
namespace {

using ::testing::HasSubstr;

// Responses captured from LXD 5.0.2 (Debian 12) with curl on its unix socket.
std::string Fixture(const std::string& name) {
  std::ifstream in(std::string(BMAS_SOURCE_DIR "/tests/fixtures/lxd/") + name, std::ios::binary);
  EXPECT_TRUE(in) << "missing fixture " << name;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Answers from a queue of canned responses and keeps the requests it was given.
class CannedTransport final : public HttpTransport {
 public:
  struct State {
    std::deque<Result<ClientResponse>> responses;
    std::vector<ClientRequest> requests;
  };
  explicit CannedTransport(State* state) : state_(state) {}

  Result<ClientResponse> RoundTrip(const ClientRequest& request) override {
    state_->requests.push_back(request);
    if (state_->responses.empty()) return Internal("no canned response left");
    Result<ClientResponse> r = std::move(state_->responses.front());
    state_->responses.pop_front();
    return r;
  }
  std::string Where() const override { return "/canned/unix.socket"; }

 private:
  State* state_;
};

class LxdClientTest : public ::testing::Test {
 protected:
  LxdClient Client() { return LxdClient(std::make_unique<CannedTransport>(&state_)); }
  void Respond(int status, std::string body, std::string etag = {}) {
    state_.responses.push_back(ClientResponse{status, std::move(body), std::move(etag)});
  }
  const ClientRequest& Request(size_t i) { return state_.requests.at(i); }

  CannedTransport::State state_;
};

TEST_F(LxdClientTest, ServerReadsVersionAndStorageDrivers) {
  Respond(200, Fixture("server.json"));
  auto info = Client().Server();
  ASSERT_TRUE(info) << info.error().message;
  EXPECT_EQ(info->version, "5.0.2");
  EXPECT_THAT(info->storage_drivers, ::testing::ElementsAre("btrfs", "dir"));
  EXPECT_EQ(Request(0).target, "/1.0");
}

TEST_F(LxdClientTest, InstancesParsesConfigDevicesAndStatus) {
  Respond(200, Fixture("instances.json"));
  auto list = Client().Instances();
  ASSERT_TRUE(list) << list.error().message;
  ASSERT_EQ(list->size(), 1u);
  const Instance& i = (*list)[0];
  EXPECT_EQ(i.name, "ws-bmastest1");
  EXPECT_EQ(i.status, InstanceStatus::kRunning);
  EXPECT_EQ(i.config.at("limits.memory"), "256MiB");
  EXPECT_EQ(i.config.at("raw.idmap"), "both 1003 1003");
  EXPECT_EQ(i.devices.at("home").at("source"), "/home/bmastest1");
  EXPECT_THAT(i.profiles, ::testing::ElementsAre("bmas"));
  EXPECT_EQ(Request(0).method, "GET");
  EXPECT_EQ(Request(0).target, "/1.0/instances?recursion=1");
}

TEST_F(LxdClientTest, NotFoundMapsToNotFoundWithLxdsMessage) {
  Respond(404, Fixture("instance_not_found.json"));
  auto i = Client().GetInstance("nope");
  ASSERT_FALSE(i);
  EXPECT_EQ(i.error().code, ErrorCode::kNotFound);
  EXPECT_THAT(i.error().message, HasSubstr("Instance not found"));
  EXPECT_EQ(Request(0).target, "/1.0/instances/nope");
}

TEST_F(LxdClientTest, CreateSendsTheSpecAndWaitsForTheOperation) {
  Respond(202, Fixture("instance_create.json"));
  Respond(200, Fixture("start_wait.json"));  // any successful operation
  InstanceSpec spec;
  spec.name = "ws-alice";
  spec.image = "bb";
  spec.profiles = {"bmas"};
  spec.config = {{"limits.cpu", "1"}, {"raw.idmap", "both 1003 1003"}};
  spec.devices = {{"home", {{"type", "disk"}, {"source", "/home/alice"}, {"path", "/home/alice"}}}};
  auto r = Client().CreateInstance(spec);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(state_.requests.size(), 2u);
  EXPECT_EQ(Request(0).method, "POST");
  EXPECT_EQ(Request(0).target, "/1.0/instances");
  EXPECT_EQ(Request(0).body,
            R"({"name":"ws-alice","type":"container","source":{"type":"image","alias":"bb"},)"
            R"("profiles":["bmas"],"config":{"limits.cpu":"1","raw.idmap":"both 1003 1003"},)"
            R"("devices":{"home":{"path":"/home/alice","source":"/home/alice","type":"disk"}}})");
  EXPECT_EQ(Request(1).method, "GET");
  EXPECT_EQ(Request(1).target,
            "/1.0/operations/ae8f3afc-98d6-4cfa-918b-c4d90cfa345d/wait?timeout=30");
}

TEST_F(LxdClientTest, CreateByFingerprintNamesTheFingerprint) {
  Respond(202, Fixture("instance_create.json"));
  Respond(200, Fixture("start_wait.json"));
  InstanceSpec spec;
  spec.name = "ws-alice";
  spec.image = "b59ad48974f6bae62a8034f5f669cb1816c0744d629023683ab1b6a62a867f6b";
  ASSERT_TRUE(Client().CreateInstance(spec));
  EXPECT_THAT(Request(0).body, HasSubstr(R"("fingerprint":"b59ad489)"));
}

TEST_F(LxdClientTest, AFailedOperationIsAnErrorWithItsReason) {
  Respond(202, Fixture("instance_create_duplicate.json"));
  Respond(200, Fixture("instance_create_duplicate_wait.json"));
  InstanceSpec spec;
  spec.name = "ws-bmastest1";
  spec.image = "bb";
  auto r = Client().CreateInstance(spec);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kAlreadyExists);
  EXPECT_THAT(r.error().message, HasSubstr("already exists"));
}

TEST_F(LxdClientTest, ChangeStatePutsTheAction) {
  Respond(202, Fixture("instance_create.json"));
  Respond(200, Fixture("start_wait.json"));
  ASSERT_TRUE(Client().ChangeState("ws-alice", "stop", /*force=*/true, 10));
  EXPECT_EQ(Request(0).method, "PUT");
  EXPECT_EQ(Request(0).target, "/1.0/instances/ws-alice/state");
  EXPECT_EQ(Request(0).body, R"({"action":"stop","timeout":10,"force":true})");
}

TEST_F(LxdClientTest, ExecRunsAsTheUserAndReadsThenDeletesTheRecordedOutput) {
  Respond(202, Fixture("exec_post.json"));
  Respond(200, Fixture("exec_wait.json"));
  Respond(200, "uid=1003 gid=1003\n");
  Respond(200, R"({"type":"sync","status":"Success","status_code":200,"metadata":{}})");
  Respond(200, "err\n");
  Respond(200, R"({"type":"sync","status":"Success","status_code":200,"metadata":{}})");
  ExecSpec spec;
  spec.command = {"sh", "-c", "id"};
  spec.environment = {{"HOME", "/home/bmastest1"}};
  spec.user = 1003;
  spec.group = 1003;
  spec.cwd = "/home/bmastest1";
  auto r = Client().Exec("ws-bmastest1", spec);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->exit_code, 7);
  EXPECT_EQ(r->out, "uid=1003 gid=1003\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(Request(0).target, "/1.0/instances/ws-bmastest1/exec");
  EXPECT_EQ(Request(0).body,
            R"({"command":["sh","-c","id"],"environment":{"HOME":"/home/bmastest1"},)"
            R"("wait-for-websocket":false,"interactive":false,"record-output":true,)"
            R"("user":1003,"group":1003,"cwd":"/home/bmastest1"})");
  EXPECT_EQ(Request(2).target,
            "/1.0/instances/ws-bmastest1/logs/exec_a36c7502-81cf-4e74-818e-0c5ac48036f7.stdout");
  EXPECT_EQ(Request(3).method, "DELETE");
  EXPECT_EQ(Request(3).target, Request(2).target);
}

// LXD's answer to a websocket exec: its operation, and in the operation's metadata a secret
// for each websocket.
std::string WebsocketExecAnswer(const std::string& fds) {
  return R"({"type":"async","status":"Operation created","status_code":100,)"
         R"("operation":"/1.0/operations/5d2f","error_code":0,"error":"","metadata":{"id":"5d2f",)"
         R"("class":"websocket","description":"Executing command","status":"Running",)"
         R"("status_code":103,"metadata":{"command":["/bin/sh","-l"],"environment":{},"fds":)" +
         fds + R"(,"interactive":false},"may_cancel":false,"err":"","location":"none"}})";
}

TEST_F(LxdClientTest, PipedExecWaitsForAWebsocketForEachStream) {
  Respond(202, WebsocketExecAnswer(R"({"0":"s0","1":"s1","2":"s2","control":"sc"})"));
  ExecSpec spec;
  spec.command = {"/bin/sh", "-l"};
  spec.user = 1003;
  spec.group = 1003;
  auto e = Client().StartPipedExec("ws-bmastest1", spec);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(e->operation, "/1.0/operations/5d2f");
  EXPECT_EQ(e->secrets, (StringMap{{"0", "s0"}, {"1", "s1"}, {"2", "s2"}, {"control", "sc"}}));
  EXPECT_EQ(Request(0).target, "/1.0/instances/ws-bmastest1/exec");
  EXPECT_EQ(Request(0).body,
            R"({"command":["/bin/sh","-l"],"environment":{},)"
            R"("wait-for-websocket":true,"interactive":false,"record-output":false,)"
            R"("user":1003,"group":1003})");
}

TEST_F(LxdClientTest, AWebsocketExecLackingASecretIsAnError) {
  Respond(202, WebsocketExecAnswer(R"({"0":"s0","1":"s1","control":"sc"})"));
  auto e = Client().StartPipedExec("ws-bmastest1", ExecSpec{});
  ASSERT_FALSE(e);
  EXPECT_THAT(e.error().message, HasSubstr("lacks websocket 2's secret"));
}

TEST_F(LxdClientTest, RemoveDevicePutsTheConfigWithoutItUnderIfMatch) {
  Respond(200, Fixture("instance_get.json"), "\"etag1\"");
  Respond(200, R"({"type":"sync","status":"Success","status_code":200,"metadata":{}})");
  ASSERT_TRUE(Client().RemoveDevice("ws-bmastest1", "home"));
  ASSERT_EQ(state_.requests.size(), 2u);
  EXPECT_EQ(Request(1).method, "PUT");
  EXPECT_EQ(Request(1).target, "/1.0/instances/ws-bmastest1");
  ASSERT_EQ(Request(1).headers.size(), 1u);
  EXPECT_EQ(Request(1).headers[0].first, "If-Match");
  EXPECT_EQ(Request(1).headers[0].second, "\"etag1\"");
  EXPECT_THAT(Request(1).body, HasSubstr(R"("devices":{},)"));
  EXPECT_THAT(Request(1).body, HasSubstr("\"limits.memory\":\"256MiB\""));
}

TEST_F(LxdClientTest, RemovingAMissingDeviceIsNotFoundAndSendsNothing) {
  Respond(200, Fixture("instance_get.json"), "\"etag1\"");
  auto r = Client().RemoveDevice("ws-bmastest1", "gpu0");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kNotFound);
  EXPECT_EQ(state_.requests.size(), 1u);
}

TEST_F(LxdClientTest, AddDevicePatchesOneDevice) {
  Respond(200, R"({"type":"sync","status":"Success","status_code":200,"metadata":{}})");
  ASSERT_TRUE(Client().AddDevice("c1", "gpu0", {{"type", "unix-char"}, {"path", "/dev/nvidia0"}}));
  EXPECT_EQ(Request(0).method, "PATCH");
  EXPECT_EQ(Request(0).body,
            R"({"devices":{"gpu0":{"path":"/dev/nvidia0","type":"unix-char"}}})");
}

TEST_F(LxdClientTest, ImagesParsesAliasesAndProperties) {
  Respond(200, Fixture("images.json"));
  auto images = Client().Images();
  ASSERT_TRUE(images) << images.error().message;
  ASSERT_EQ(images->size(), 1u);
  EXPECT_EQ((*images)[0].fingerprint.substr(0, 8), "b59ad489");
  EXPECT_THAT((*images)[0].aliases, ::testing::ElementsAre("bb"));
  EXPECT_EQ((*images)[0].properties.at("os"), "busybox");
  EXPECT_EQ((*images)[0].size, 1036178);
}

TEST_F(LxdClientTest, ImportUploadsTheTarballAndCreatesTheAlias) {
  Respond(202, Fixture("instance_create.json"));
  Respond(200, Fixture("image_import_wait.json"));
  Respond(404, R"({"type":"error","error_code":404,"error":"not found","metadata":null})");
  Respond(200, R"({"type":"sync","status":"Success","status_code":200,"metadata":null})");
  auto fp = Client().ImportImage("tarball-bytes", "bmas-busybox");
  ASSERT_TRUE(fp) << fp.error().message;
  EXPECT_EQ(*fp, "b59ad48974f6bae62a8034f5f669cb1816c0744d629023683ab1b6a62a867f6b");
  EXPECT_EQ(Request(0).content_type, "application/octet-stream");
  EXPECT_EQ(Request(0).body, "tarball-bytes");
  EXPECT_EQ(Request(2).target, "/1.0/images/aliases/bmas-busybox");
  EXPECT_EQ(Request(3).method, "POST");
  EXPECT_THAT(Request(3).body, HasSubstr(R"("name":"bmas-busybox","target":"b59ad489)"));
}

TEST_F(LxdClientTest, StoragePoolsParsesDriverAndSource) {
  Respond(200, Fixture("storage_pools.json"));
  auto pools = Client().StoragePools();
  ASSERT_TRUE(pools) << pools.error().message;
  ASSERT_EQ(pools->size(), 1u);
  EXPECT_EQ((*pools)[0].driver, "btrfs");
  EXPECT_THAT((*pools)[0].config.at("source"), HasSubstr("bmas.img"));
}

TEST_F(LxdClientTest, AnUnreachableSocketSaysHowToStartLxd) {
  state_.responses.push_back(Error{ErrorCode::kUnavailable, "connect to LXD failed", {}});
  auto r = Client().Instances();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message, HasSubstr("bmas lxd up"));
}

TEST_F(LxdClientTest, RealUnixTransportReportsAMissingSocket) {
  LxdClient client("/nonexistent/bmas/unix.socket", std::chrono::seconds(1));
  auto r = client.Server();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message, HasSubstr("/nonexistent/bmas/unix.socket"));
}

TEST_F(LxdClientTest, RealUnixTransportGivesUpOnASilentLxd) {
  // Listens, so the connect and the write succeed, but never answers.
  const std::string path = ::testing::TempDir() + "/bmas-silent-lxd.socket";
  ::unlink(path.c_str());
  net::io_context io;
  net::local::stream_protocol::acceptor silent(io, net::local::stream_protocol::endpoint(path));
  LxdClient client(path, std::chrono::milliseconds(200));
  auto r = client.Server();
  ::unlink(path.c_str());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUnavailable);
  EXPECT_THAT(r.error().message, HasSubstr("no answer within 200 ms"));
}

TEST(InstanceName, FollowsHostNameRules) {
  EXPECT_TRUE(IsValidInstanceName("ws-alice"));
  EXPECT_FALSE(IsValidInstanceName("ws_alice"));
  EXPECT_FALSE(IsValidInstanceName("1ws"));
  EXPECT_FALSE(IsValidInstanceName("ws-"));
  EXPECT_FALSE(IsValidInstanceName(""));
  EXPECT_FALSE(IsValidInstanceName(std::string(64, 'a')));
}

}  // namespace
}  // namespace bmas::lxd
