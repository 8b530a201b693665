#include "cli/job_reason.h"

#include <gtest/gtest.h>

namespace bmas {
namespace {

TEST(JobReasonTest, SlurmsReasonsInPlainWords) {
  struct Case {
    const char* slurm;
    const char* plain;
  };
  const Case cases[] = {
      {"None", ""},
      {"", ""},
      {"Resources", "waiting for free GPUs"},
      {"Priority", "other jobs are ahead of it"},
      {"Dependency", "waiting for the jobs it depends on"},
      {"BeginTime", "waiting for its start time"},
      {"JobHeldUser", "held by its owner"},
      {"ReqNodeNotAvail", "a node it needs is down, drained or reserved"},
      {"NonZeroExitCode", "it exited with an error"},
      {"TimeLimit", "it ran out of time (--time)"},
      {"QOSMaxGRESPerUser", "you are at your limit of GPUs: it starts when one of your jobs ends"},
      {"QOSMaxJobsPerUserLimit",
       "you are at your limit of running jobs: it starts when one of your jobs ends"},
      {"QOSMaxCpuPerUserLimit",
       "you are at your limit of CPUs: it starts when one of your jobs ends"},
      {"QOSMaxMemoryPerUser",
       "you are at your limit of memory: it starts when one of your jobs ends"},
      {"AssocMaxJobsLimit",
       "you are at your limit of running jobs: it starts when one of your jobs ends"},
      {"QOSMaxGRESPerJob",
       "it asks for more GPUs than one job may have: cancel it and ask for less"},
      {"QOSMaxWallDurationPerJobLimit",
       "it asks for more run time than one job may have: cancel it and ask for less"},
      {"QOSGrpGRES", "a shared limit of GPUs is reached: it starts when other jobs end"},
      // Unknown reasons, and limits this does not name, pass through as Slurm spells them.
      {"BurstBufferStageIn", "BurstBufferStageIn"},
      {"QOSGrpCPUMinutesLimit", "QOSGrpCPUMinutesLimit"},
      {"QOSUsageThreshold", "QOSUsageThreshold"},
      {"resources", "resources"},
  };
  for (const Case& c : cases) EXPECT_EQ(PlainJobReason(c.slurm), c.plain) << c.slurm;
}

}  // namespace
}  // namespace bmas
