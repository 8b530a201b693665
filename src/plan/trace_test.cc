#include "plan/trace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "common/config_table.h"

namespace bmas::plan {
namespace {

using ::testing::HasSubstr;

const std::string kAlibabaPods =
    std::string(BMAS_SOURCE_DIR) + "/tests/data/alibaba-v2023-openb-pods.csv";

// The ConfigError that parsing `text` throws, or "" when it parses.
std::string ErrorOf(const std::string& text, TraceFormat format) {
  try {
    ParseTrace(text, format, "jobs.csv");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(TraceFormatTest, NamesReadBack) {
  for (TraceFormat f : {TraceFormat::kCsv, TraceFormat::kAlibabaV2023}) {
    EXPECT_EQ(ParseTraceFormat(TraceFormatName(f)), f);
  }
  EXPECT_EQ(TraceFormatName(TraceFormat::kAlibabaV2023), "alibaba-v2023");
  EXPECT_FALSE(ParseTraceFormat("swf").has_value());
}

TEST(CsvTraceTest, ReadsJobsInSubmitOrder) {
  Trace t = ParseTrace(
      "submit_s,user,gpus,duration_s\n"
      "10,alice,1,3600\n"
      "\n"
      "2.5,bob,8,60.5\r\n"
      "10,carol,4,0\n",
      TraceFormat::kCsv, "jobs.csv");
  EXPECT_EQ(t.rows, 3);
  ASSERT_EQ(t.jobs.size(), 3u);
  EXPECT_EQ(t.jobs[0].user, "bob");
  EXPECT_EQ(t.jobs[0].submit_s, 2.5);
  EXPECT_EQ(t.jobs[0].gpus, 8);
  EXPECT_EQ(t.jobs[0].duration_s, 60.5);
  EXPECT_EQ(t.jobs[0].partition, "");
  EXPECT_EQ(t.jobs[1].user, "alice");  // submitted at once: file order
  EXPECT_EQ(t.jobs[2].user, "carol");
  EXPECT_EQ(t.jobs[2].duration_s, 0);
  EXPECT_EQ(t.never_ran + t.cpu_only + t.rounded_up, 0);
}

TEST(CsvTraceTest, ReadsPartitions) {
  Trace t = ParseTrace(
      "submit_s,user,gpus,duration_s,partition\n"
      "0,alice,1,60,lab\n"
      "1,bob,2,60,\n",
      TraceFormat::kCsv, "jobs.csv");
  ASSERT_EQ(t.jobs.size(), 2u);
  EXPECT_EQ(t.jobs[0].partition, "lab");
  EXPECT_EQ(t.jobs[1].partition, "");  // the cluster's default
}

TEST(CsvTraceTest, ReadsTimeLimits) {
  Trace t = ParseTrace(
      "submit_s,user,gpus,duration_s,partition,time_limit_s\n"
      "0,alice,1,30,lab,60\n"
      "1,bob,2,30,lab,0\n",
      TraceFormat::kCsv, "jobs.csv");
  ASSERT_EQ(t.jobs.size(), 2u);
  EXPECT_EQ(t.jobs[0].time_limit_s, 60);
  EXPECT_EQ(t.jobs[1].time_limit_s, 0);  // not known: the model plans with its duration
  EXPECT_THAT(ErrorOf("submit_s,user,gpus,duration_s,partition,time_limit_s\n0,a,1,3,lab,x\n",
                      TraceFormat::kCsv),
              HasSubstr("jobs.csv:2:"));
}

struct BadLine {
  const char* text;
  const char* expected;  // a substring of the error
};

class BadCsvTraceTest : public ::testing::TestWithParam<BadLine> {};

TEST_P(BadCsvTraceTest, ErrorNamesFileAndLine) {
  std::string error = ErrorOf(GetParam().text, TraceFormat::kCsv);
  ASSERT_FALSE(error.empty()) << "no error for: " << GetParam().text;
  EXPECT_THAT(error, HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Lines, BadCsvTraceTest,
    ::testing::Values(
        BadLine{"", "jobs.csv:1: no header: the first line is submit_s,user,gpus,duration_s"},
        BadLine{"0,alice,1,60\n",
                "jobs.csv:1: the header is \"0,alice,1,60\"; a csv trace starts with "
                "submit_s,user,gpus,duration_s[,partition[,time_limit_s]]"},
        BadLine{"submit_s,user,gpus\n", "the header is \"submit_s,user,gpus\""},
        BadLine{"submit_s,user,gpus,duration_s\n0,alice,1\n",
                "jobs.csv:2: 3 fields where the header has 4 (submit_s,user,gpus,duration_s)"},
        BadLine{"submit_s,user,gpus,duration_s\n0,alice,1,60,lab\n",
                "jobs.csv:2: 5 fields where the header has 4"},
        BadLine{"submit_s,user,gpus,duration_s\n0,a,1,60\n\n0,b,0,60\n",
                "jobs.csv:4: gpus \"0\" is not a whole number in 1..65536"},
        BadLine{"submit_s,user,gpus,duration_s\n0,a,1.5,60\n",
                "gpus \"1.5\" is not a whole number"},
        BadLine{"submit_s,user,gpus,duration_s\n-1,a,1,60\n",
                "jobs.csv:2: submit_s \"-1\" is not a number of seconds >= 0"},
        BadLine{"submit_s,user,gpus,duration_s\n0,a,1,1h\n",
                "duration_s \"1h\" is not a number of seconds"},
        BadLine{"submit_s,user,gpus,duration_s\n0,a,1,nan\n",
                "duration_s \"nan\" is not a number of seconds"},
        BadLine{"submit_s,user,gpus,duration_s\n 0,a,1,60\n", "submit_s \" 0\" is not a number"},
        BadLine{"submit_s,user,gpus,duration_s\n0,,1,60\n",
                "jobs.csv:2: user is empty: every job needs one"},
        BadLine{"submit_s,user,gpus,duration_s\n0,\"a,b\",1,60\n",
                "jobs.csv:2: quoted fields are not supported"}));

TEST(AlibabaTraceTest, GpuPodsThatRanBecomeJobs) {
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n";
  Trace t = ParseTrace(header +
                           "p0,4000,1024,0,0,,LS,Running,5,100,6\n"    // no GPU
                           "p1,4000,1024,1,1000,,BE,Pending,7,50,\n"   // never ran
                           "p2,4000,1024,1,250,,BE,Failed,20,90,30\n"  // a quarter GPU
                           "p3,4000,1024,2,1000,,Burstable,Succeeded,10,400,12\n",
                       TraceFormat::kAlibabaV2023, "pods.csv");
  EXPECT_EQ(t.rows, 4);
  EXPECT_EQ(t.cpu_only, 1);
  EXPECT_EQ(t.never_ran, 1);
  EXPECT_EQ(t.rounded_up, 1);
  ASSERT_EQ(t.jobs.size(), 2u);
  EXPECT_EQ(t.jobs[0].user, "Burstable");  // created first
  EXPECT_EQ(t.jobs[0].submit_s, 10);
  EXPECT_EQ(t.jobs[0].duration_s, 388);  // scheduled to deletion
  EXPECT_EQ(t.jobs[0].gpus, 2);
  EXPECT_EQ(t.jobs[1].user, "BE");
  EXPECT_EQ(t.jobs[1].gpus, 1);  // 250 milli-GPUs: a whole one
  EXPECT_EQ(t.jobs[1].duration_s, 60);
  EXPECT_EQ(t.jobs[1].partition, "");
}

class BadAlibabaTraceTest : public ::testing::TestWithParam<BadLine> {};

TEST_P(BadAlibabaTraceTest, ErrorNamesFileAndLine) {
  const std::string header =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
      "deletion_time,scheduled_time\n";
  std::string error = ErrorOf(header + GetParam().text, TraceFormat::kAlibabaV2023);
  ASSERT_FALSE(error.empty()) << "no error for: " << GetParam().text;
  EXPECT_THAT(error, HasSubstr(GetParam().expected));
}

INSTANTIATE_TEST_SUITE_P(
    Lines, BadAlibabaTraceTest,
    ::testing::Values(
        BadLine{"p,1,1,1,1000,,LS,Running,10,5,10\n",
                "jobs.csv:2: deletion_time 5 is before scheduled_time 10"},
        BadLine{"p,1,1,1,1000,,LS,Running,10,50,9\n",
                "jobs.csv:2: scheduled_time 9 is before creation_time 10"},
        BadLine{"p,1,1,1,0,,LS,Running,10,50,10\n",
                "gpu_milli \"0\" is no share of a GPU: give 1..1000"},
        BadLine{"p,1,1,1,1500,,LS,Running,10,50,10\n",
                "gpu_milli \"1500\" is not a whole number in 0..1000"},
        BadLine{"p,1,1,one,1000,,LS,Running,10,50,10\n", "num_gpu \"one\" is not a whole number"},
        BadLine{"p,1,1,1,1000,,,Running,10,50,10\n", "jobs.csv:2: qos is empty"},
        BadLine{"p,1,1,1,1000,,LS,Running,10,50\n", "10 fields where the header has 11"},
        BadLine{"p,1,1,1,1000,,LS,Running,10,,10\n",
                "deletion_time \"\" is not a whole number of seconds >= 0"}));

TEST(AlibabaTraceTest, AnotherFileIsNotAPodList) {
  EXPECT_THAT(ErrorOf("submit_s,user,gpus,duration_s\n0,a,1,1\n", TraceFormat::kAlibabaV2023),
              HasSubstr("jobs.csv:1: no column num_gpu: an alibaba-v2023 pod list has name,"));
}

// The public trace in tests/data (its README gives these counts).
TEST(AlibabaTraceTest, ReadsThePublicPodList) {
  Trace t = ReadTrace(kAlibabaPods, TraceFormat::kAlibabaV2023);
  EXPECT_EQ(t.rows, 8152);
  EXPECT_EQ(t.cpu_only, 8152 - 7064);
  EXPECT_EQ(t.never_ran, 861);  // the GPU pods left Pending
  ASSERT_EQ(t.jobs.size(), 7064u - 861u);
  EXPECT_EQ(t.rounded_up, 2573);  // of the 3,078 GPU tasks asking for part of a GPU, those that ran
  EXPECT_EQ(
      std::count_if(t.jobs.begin(), t.jobs.end(), [](const TraceJob& j) { return j.gpus == 8; }),
      44);
  EXPECT_EQ(std::accumulate(t.jobs.begin(), t.jobs.end(), 0,
                            [](int sum, const TraceJob& j) { return sum + j.gpus; }),
            6571);
  EXPECT_TRUE(
      std::is_sorted(t.jobs.begin(), t.jobs.end(),
                     [](const TraceJob& a, const TraceJob& b) { return a.submit_s < b.submit_s; }));

  // openb-pod-0000: one whole GPU from 0 to 12537496.
  EXPECT_EQ(t.jobs[0].submit_s, 0);
  EXPECT_EQ(t.jobs[0].user, "LS");
  EXPECT_EQ(t.jobs[0].gpus, 1);
  EXPECT_EQ(t.jobs[0].duration_s, 12537496);
  // openb-pod-0001: 460 milli-GPUs, created and scheduled at 427061: one GPU.
  EXPECT_EQ(t.jobs[1].submit_s, 427061);
  EXPECT_EQ(t.jobs[1].gpus, 1);
  EXPECT_EQ(t.jobs[1].duration_s, 12902960 - 427061);
  // openb-pod-0017: 8 GPUs, Burstable, scheduled at once.
  auto pod17 = std::find_if(t.jobs.begin(), t.jobs.end(),
                            [](const TraceJob& j) { return j.submit_s == 9437497 && j.gpus == 8; });
  ASSERT_NE(pod17, t.jobs.end());
  EXPECT_EQ(pod17->user, "Burstable");
  EXPECT_EQ(pod17->duration_s, 10769854 - 9437497);
  // openb-pod-0061 never ran (Pending, created at 10001278): no job.
  EXPECT_EQ(std::count_if(t.jobs.begin(), t.jobs.end(),
                          [](const TraceJob& j) { return j.submit_s == 10001278; }),
            0);
  // openb-pod-8151, the last: 590 milli-GPUs, scheduled 12901762, deleted 12901792.
  EXPECT_EQ(t.jobs.back().submit_s, 12901761);
  EXPECT_EQ(t.jobs.back().user, "BE");
  EXPECT_EQ(t.jobs.back().gpus, 1);
  EXPECT_EQ(t.jobs.back().duration_s, 30);
}

TEST(TraceTest, AMissingFileIsAnError) {
  try {
    ReadTrace("/nonexistent/jobs.csv", TraceFormat::kCsv);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/jobs.csv: cannot read the trace file: "));
  }
}

}  // namespace
}  // namespace bmas::plan
