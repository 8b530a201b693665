#include "slurm/modes.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace bmas::slurm {
namespace {

using ::testing::ElementsAre;

// What Slurm 22.05's `scontrol -o show reservation` printed for two reservations.
constexpr std::string_view kTwo =
    "ReservationName=maint StartTime=2026-11-22T00:00:00 EndTime=2026-11-22T02:00:00 "
    "Duration=02:00:00 Nodes=oss01 NodeCnt=1 CoreCnt=8 Features=(null) PartitionName=(null) "
    "Flags=MAINT,SPEC_NODES TRES=cpu=8 Users=root Groups=(null) Accounts=(null) "
    "Licenses=(null) State=INACTIVE BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n"
    "ReservationName=bmas_research StartTime=2026-11-21T12:50:01 "
    "EndTime=2027-11-21T12:50:01 Duration=365-00:00:00 Nodes=oss[02-03] NodeCnt=2 CoreCnt=16 "
    "Features=(null) PartitionName=(null) Flags=IGNORE_JOBS,SPEC_NODES TRES=cpu=16 "
    "Users=alice,bob Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE "
    "BurstBuffer=(null) Watts=n/a MaxStartDelay=(null)\n";

TEST(ModesTest, ResearchIsTheBmasReservation) {
  auto mode = ParseMode(kTwo);
  ASSERT_TRUE(mode) << mode.error().message;
  EXPECT_TRUE(mode->research);
  EXPECT_THAT(mode->users, ElementsAre("alice", "bob"));
  EXPECT_THAT(mode->nodes, ElementsAre("oss02", "oss03"));
  EXPECT_EQ(mode->start_time, "2026-11-21T12:50:01");
}

TEST(ModesTest, NoBmasReservationIsLabMode) {
  auto mode = ParseMode("No reservations in the system\n");
  ASSERT_TRUE(mode);
  EXPECT_FALSE(mode->research);
  mode = ParseMode(kTwo.substr(0, kTwo.find('\n') + 1));
  ASSERT_TRUE(mode);
  EXPECT_FALSE(mode->research);
}

TEST(ModesTest, CreateArgsNameUsersAndCompressedNodes) {
  EXPECT_THAT(CreateResearchArgs({"alice", "bob"}, {"oss02", "oss03"}),
              ElementsAre("create", "reservation", "ReservationName=bmas_research",
                          "Users=alice,bob", "Nodes=oss[02-03]", "StartTime=now",
                          "Duration=infinite", "Flags=IGNORE_JOBS"));
}

}  // namespace
}  // namespace bmas::slurm
