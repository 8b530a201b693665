#include "common/daemon_process.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include <rapidjson/document.h>

namespace bmas {
namespace {

// The record reads back as written, command line included; an older bmas's record (no start
// time, no command line) still reads; one with no pid does not.
TEST(DaemonProcessTest, TheRecordReadsBackAsWritten) {
  const DaemonProcess d{"slurmd oss01", "slurmd", 4242, 987654321ULL, "/var/log/slurmd.out",
                        {"/usr/sbin/slurmd", "-D", "-N", "oss01"}, {"SLURM_CONF=/etc/s.conf"}};
  const std::string json = JsonObject([&](JsonWriter& w) {
    w.Key("d");
    WriteDaemonProcess(w, d);
  });
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  auto back = ReadDaemonProcess(doc["d"]);
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->name, d.name);
  EXPECT_EQ(back->comm, d.comm);
  EXPECT_EQ(back->pid, d.pid);
  EXPECT_EQ(back->start_ticks, d.start_ticks);
  EXPECT_EQ(back->log, d.log);
  EXPECT_EQ(back->args, d.args);
  EXPECT_EQ(back->env, d.env);

  doc.Parse(R"({"name": "lxd", "comm": "lxd", "pid": 17, "log": "/l"})");
  auto old = ReadDaemonProcess(doc);
  ASSERT_TRUE(old);
  EXPECT_EQ(old->pid, 17);
  EXPECT_EQ(old->start_ticks, 0u);
  EXPECT_TRUE(old->args.empty());

  doc.Parse(R"({"name": "lxd", "pid": "17"})");
  EXPECT_FALSE(ReadDaemonProcess(doc));
}

// Started detached, it runs and is recognised; stopped, it does not; started again from its
// record, it is a new process that runs.
TEST(DaemonProcessTest, StartsIsRecognisedStopsAndStartsAgain) {
  const std::string log = ::testing::TempDir() + "/daemon_process_test.log";
  auto d = StartDaemonProcess("sleeper", "sleep", {"sleep", "30"}, {}, log);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_TRUE(d->Runs());
  EXPECT_TRUE(StopDaemonProcess(*d, std::chrono::seconds(5)));
  EXPECT_FALSE(d->Runs());
  const pid_t first = d->pid;
  ASSERT_TRUE(RestartDaemonProcess(*d));
  EXPECT_NE(d->pid, first);
  EXPECT_TRUE(d->Runs());
  DaemonProcess impostor = *d;
  impostor.start_ticks += 1;  // the same pid and name, another start: not ours
  EXPECT_FALSE(impostor.Runs());
  (void)StopDaemonProcess(impostor, std::chrono::milliseconds(100));
  EXPECT_TRUE(d->Runs());  // the impostor's stop touched nothing
  EXPECT_TRUE(StopDaemonProcess(*d, std::chrono::seconds(5)));
  std::filesystem::remove(log);
}

}  // namespace
}  // namespace bmas
