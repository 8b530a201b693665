#include "daemon/inference_controller.h"

#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "common/backend_identity.h"
#include "slurm/fake_slurm_api.h"
#include "store/mem_store.h"

namespace bmas {
namespace {

class InferenceControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/bmas-ctl-XXXXXX";
    dir_ = mkdtemp(tmpl);
    store_ = NewMemStore();
    options_.user = "bmas";
    options_.bmas = "/usr/bin/bmas";
    options_.replica_dir = dir_;
    options_.backend_secret = "secret";
    fake_ = new FakeSlurmApi;
    fake_->nodes = {NodeInfo{.name = "oss01", .address = "127.0.0.1"}};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  InferenceController Make() {
    auto connect = [this]() -> Result<std::unique_ptr<SlurmApi>> {
      if (connected_++ > 0) return Error{ErrorCode::kUnavailable, "one fake only"};
      return std::unique_ptr<SlurmApi>(fake_);
    };
    return InferenceController(options_, connect, *store_,
                               [this] { return std::vector<Result<std::string>>{load_}; },
                               [this] { return now_; });
  }

  std::string dir_;
  StorePtr store_;
  InferenceControllerOptions options_;
  FakeSlurmApi* fake_ = nullptr;  // owned by the controller once connected
  int connected_ = 0;
  std::string load_ = R"({"queued":{},"backends":[]})";
  double now_ = 1000;
};

TEST_F(InferenceControllerTest, AFloorReplicaIsSubmittedRecordedAndRemovedWithItsDeployment) {
  ASSERT_TRUE(store_->PutDeployment(Deployment{.model = "m", .min_replicas = 1, .max_replicas = 2}));
  InferenceController c = Make();
  ASSERT_TRUE(c.RunOnce());
  ASSERT_EQ(fake_->specs.size(), 1u);
  const JobSpec& spec = fake_->specs.begin()->second;
  EXPECT_EQ(spec.partition, "inference_floor");
  EXPECT_EQ(spec.name, "bmas-replica:18100:m");
  // Its own key, derived for its port; never the secret the gateway holds.
  EXPECT_EQ(spec.environment.at("VLLM_API_KEY"), DeriveBackendKey("secret", 18100));
  EXPECT_NE(spec.script.find("--port '18100'"), std::string::npos) << spec.script;
  // Listed from the next pass on, pending, and counted: no second job.
  now_ += 2;
  ASSERT_TRUE(c.RunOnce());
  EXPECT_EQ(fake_->specs.size(), 1u);
  auto replicas = store_->ListReplicas();
  ASSERT_EQ(replicas->size(), 1u);
  EXPECT_EQ((*replicas)[0].state, ReplicaState::kPending);

  fake_->Run(100, "oss01");
  load_ = R"({"queued":{},"backends":[{"url":"http://127.0.0.1:18100","models":["m"],"healthy":true,"draining":false,"in_flight":0,"capacity":64,"kv_usage":0}]})";
  now_ += 2;
  ASSERT_TRUE(c.RunOnce());
  replicas = store_->ListReplicas();
  ASSERT_EQ(replicas->size(), 1u);
  EXPECT_EQ((*replicas)[0].state, ReplicaState::kReady);
  EXPECT_EQ((*replicas)[0].url, "http://127.0.0.1:18100");
  EXPECT_TRUE((*replicas)[0].floor);
  EXPECT_EQ(fake_->specs.size(), 1u);

  ASSERT_TRUE(store_->RemoveDeployment("m"));
  now_ += 2;
  ASSERT_TRUE(c.RunOnce());
  EXPECT_EQ(fake_->cancelled, std::vector<int64_t>{100});
  EXPECT_TRUE(store_->ListReplicas()->empty());
}

TEST_F(InferenceControllerTest, ReplicasOnOtherNodesServeTlsWithTheirNodesReplicaCertificate) {
  options_.replica_tls_cert = "/etc/bmas/replica.crt";
  options_.replica_tls_key = "/etc/bmas/replica.key";
  fake_->nodes = {NodeInfo{.name = "oss01", .address = "10.0.0.11"}};
  ASSERT_TRUE(store_->PutDeployment(Deployment{.model = "m", .min_replicas = 1, .max_replicas = 1}));
  InferenceController c = Make();
  ASSERT_TRUE(c.RunOnce());
  ASSERT_EQ(fake_->specs.size(), 1u);
  const JobSpec& spec = fake_->specs.begin()->second;
  EXPECT_NE(spec.script.find(" --ssl-certfile '/etc/bmas/replica.crt' --ssl-keyfile "
                             "'/etc/bmas/replica.key'\n"),
            std::string::npos)
      << spec.script;
  fake_->Run(100, "oss01");
  load_ = R"({"queued":{},"backends":[{"url":"https://10.0.0.11:18100","models":["m"],"healthy":true,"draining":false,"in_flight":0,"capacity":64,"kv_usage":0}]})";
  now_ += 2;
  ASSERT_TRUE(c.RunOnce());
  auto replicas = store_->ListReplicas();
  ASSERT_EQ(replicas->size(), 1u);
  // The gateways dial the node's address over TLS; the replica counts as ready by that URL.
  EXPECT_EQ((*replicas)[0].url, "https://10.0.0.11:18100");
  EXPECT_EQ((*replicas)[0].state, ReplicaState::kReady);
}

TEST_F(InferenceControllerTest, OtherUsersJobsAndOtherJobsAreNeverTouched) {
  ASSERT_TRUE(store_->PutDeployment(Deployment{.model = "m", .min_replicas = 0, .max_replicas = 1}));
  fake_->jobs[5] = JobInfo{.id = 5, .name = "bmas-replica:18100:m", .user = "mallory", .state = JobState::kRunning};
  fake_->jobs[6] = JobInfo{.id = 6, .name = "train", .user = "bmas", .state = JobState::kRunning};
  InferenceController c = Make();
  ASSERT_TRUE(c.RunOnce());
  c.CancelAll();
  EXPECT_TRUE(fake_->cancelled.empty());
  EXPECT_TRUE(store_->ListReplicas()->empty());
}

}  // namespace
}  // namespace bmas
