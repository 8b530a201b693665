#include "autoscale/replica_job.h"

#include "autoscale/controller.h"

#include <gtest/gtest.h>

namespace bmas::autoscale {
namespace {

TEST(ReplicaJobTest, DeploymentsAreCheckedWithTheFieldAndTheFix) {
  EXPECT_TRUE(ValidateDeployment(Deployment{.model = "meta-llama/Llama-3.1-8B-Instruct",
                                            .min_replicas = 0, .max_replicas = 2}));
  auto bad_range = ValidateDeployment(Deployment{.model = "m", .min_replicas = 3, .max_replicas = 2});
  ASSERT_FALSE(bad_range);
  EXPECT_EQ(bad_range.error().param, "min");
  EXPECT_NE(bad_range.error().message.find("raise --max"), std::string::npos);
  EXPECT_FALSE(ValidateDeployment(Deployment{.model = "a b"}));
  EXPECT_FALSE(ValidateDeployment(Deployment{.model = ""}));
  EXPECT_FALSE(ValidateDeployment(Deployment{.model = "m", .gpus_per_replica = 0}));
  auto unknown = ValidateDeployment(Deployment{.model = "m", .command = "vllm serve {modle}"});
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("{modle}"), std::string::npos);
  EXPECT_FALSE(ValidateDeployment(Deployment{.model = "m", .command = "vllm serve {model"}));
}

TEST(ReplicaJobTest, TheCommandIsExpandedQuotedAndExecedOnOneNode) {
  Deployment d{.model = "it's/m", .min_replicas = 1, .max_replicas = 2, .gpus_per_replica = 2,
               .command = "vllm serve {model} --port {port} --tensor-parallel-size {gpus}"};
  ReplicaJobContext c{.bmas = "/usr/bin/bmas", .host = "127.0.0.1", .port = 18100,
                      .partition = "inference", .cwd = "/var/lib/bmas/replicas",
                      .environment = {{"VLLM_API_KEY", "k"}}};
  auto spec = ReplicaJobSpec(d, c);
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->name, "bmas-replica:18100:it's/m");
  auto parsed = ParseReplicaJobName(spec->name);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->model, "it's/m");
  EXPECT_EQ(parsed->port, 18100);
  EXPECT_FALSE(ParseReplicaJobName("train"));
  EXPECT_FALSE(ParseReplicaJobName("bmas-replica:x:m"));
  EXPECT_FALSE(ParseReplicaJobName("bmas-replica:80:"));
  EXPECT_EQ(spec->partition, "inference");
  EXPECT_EQ(spec->nodes, 1);
  EXPECT_EQ(spec->gpus_per_node, 2);
  EXPECT_EQ(spec->requeue, true);
  EXPECT_EQ(spec->environment.at("VLLM_API_KEY"), "k");
  EXPECT_NE(spec->script.find("exec vllm serve 'it'\\''s/m' --port '18100' --tensor-parallel-size '2'"),
            std::string::npos)
      << spec->script;
  auto engine = ReplicaJobSpec(Deployment{.model = "m"}, c);
  ASSERT_TRUE(engine);
  EXPECT_NE(engine->script.find("exec '/usr/bin/bmas' engine --host '127.0.0.1' --port '18100'"),
            std::string::npos)
      << engine->script;
  // Sleep mode's endpoints: dev mode for `bmas engine` only, never for a real vLLM.
  EXPECT_EQ(engine->environment.at("VLLM_SERVER_DEV_MODE"), "1");
  EXPECT_FALSE(spec->environment.contains("VLLM_SERVER_DEV_MODE"));
  EXPECT_TRUE(UsesSleepMode(Deployment{.command = "{bmas} engine --port {port} --model {model}"}));
  EXPECT_FALSE(UsesSleepMode(d));
}

// Issue 26: replicas on MIG slices. The job asks for slices of the profile on one node, and
// the engine gets its profile scaled to the slice.
TEST(ReplicaJobTest, AReplicaOnMigSlicesAsksForThemAndScalesItsEngine) {
  ReplicaJobContext c{.bmas = "/usr/bin/bmas", .host = "127.0.0.1", .port = 18100,
                      .partition = "inference", .cwd = "/var/lib/bmas/replicas"};
  Deployment d{.model = "m", .gpus_per_replica = 1, .profile = "llama-3.1-8b-h100",
               .gpu_slice = "3g.40gb"};
  ASSERT_TRUE(ValidateDeployment(d));
  auto spec = ReplicaJobSpec(d, c);
  ASSERT_TRUE(spec) << spec.error().message;
  EXPECT_EQ(spec->gpu_type, "3g.40gb");
  EXPECT_EQ(spec->gpus_per_node, 1);
  EXPECT_NE(spec->script.find("--profile 'llama-3.1-8b-h100@3g.40gb'"), std::string::npos)
      << spec->script;
  d.gpu_slice = "h100";
  auto bad = ValidateDeployment(d);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().param, "gpu_slice");
}

}  // namespace
}  // namespace bmas::autoscale
