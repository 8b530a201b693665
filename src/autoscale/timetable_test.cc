#include "autoscale/timetable.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <toml++/toml.h>

#include "common/config_table.h"

namespace bmas::autoscale {
namespace {

using ::testing::HasSubstr;

constexpr double kMonday = 1795996800;  // Mon 2026-11-30 00:00 UTC
constexpr double kHour = 3600;
constexpr double kDay = 86400;
const Duration kLead{120};

TimetableFloor Floor(std::string_view text) {
  auto f = ParseTimetableFloor(text);
  EXPECT_TRUE(f) << text << ": " << f.error().message;
  return f ? *f : TimetableFloor{};
}

int At(const std::vector<TimetableFloor>& t, double unix, Duration lead = kLead,
       const TimeZone& zone = TimeZone()) {
  return TimetableFloorAt(t, zone, TimePoint(unix), lead);
}

TEST(TimetableTest, ParsesTheTextFormAndWritesItBack) {
  const TimetableFloor f = Floor("Mon-Fri 09:00-12:00 min=3");
  EXPECT_EQ(f.days, 0x1fu);
  EXPECT_EQ(f.from_minute, 9 * 60);
  EXPECT_EQ(f.to_minute, 12 * 60);
  EXPECT_EQ(f.min, 3);
  EXPECT_EQ(FormatTimetableFloor(f), "Mon-Fri 09:00-12:00 min=3");
  EXPECT_EQ(Floor("  sat,SUN   8:30-24:00  min=1 ").days, 0x60u);
  EXPECT_EQ(FormatTimetableFloor(Floor("sat,SUN 8:30-24:00 min=1")), "Sat,Sun 08:30-24:00 min=1");
  // A range wraps over the weekend.
  EXPECT_EQ(Floor("Fri-Mon 10:00-11:00 min=2").days, 0x71u);
  EXPECT_EQ(FormatDays(0x71), "Mon,Fri-Sun");
  EXPECT_EQ(FormatDays(0x7f), "Mon-Sun");
  EXPECT_EQ(FormatDays(0x15), "Mon,Wed,Fri");
  for (const char* text : {"Mon-Fri 09:00-12:00 min=3", "Mon,Fri-Sun 10:00-11:00 min=2",
                           "Wed 00:00-24:00 min=7"}) {
    EXPECT_EQ(FormatTimetableFloor(Floor(text)), text);
  }
}

TEST(TimetableTest, RejectsWhatIsNotAFloorNamingTheProblem) {
  auto err = [](std::string_view text) {
    auto f = ParseTimetableFloor(text);
    EXPECT_FALSE(f) << text;
    return f ? std::string() : f.error().message;
  };
  EXPECT_THAT(err("Mnday 09:00-12:00 min=3"), HasSubstr("'Mnday' in days \"Mnday\" is not a day"));
  EXPECT_THAT(err("Mon-Fry 09:00-12:00 min=3"), HasSubstr("'Mon-Fry'"));
  EXPECT_THAT(err("Mon 12:00-09:00 min=3"), HasSubstr("ends before it starts"));
  EXPECT_THAT(err("Mon 09:00-09:00 min=3"), HasSubstr("ends before it starts"));
  EXPECT_THAT(err("Mon 09:00-25:00 min=3"), HasSubstr("to \"25:00\" is not a time of day"));
  EXPECT_THAT(err("Mon 24:00-24:00 min=3"), HasSubstr("from \"24:00\""));
  EXPECT_THAT(err("Mon 09:60-10:00 min=3"), HasSubstr("from \"09:60\""));
  EXPECT_THAT(err("Mon 9-10 min=3"), HasSubstr("is not a time of day"));
  EXPECT_THAT(err("Mon 09:00-10:00 min=0"), HasSubstr("give 1 or more"));
  EXPECT_THAT(err("Mon 09:00-10:00"), HasSubstr("e.g. \"Mon-Fri 09:00-12:00 min=3\""));
  EXPECT_THAT(err("Mon 09:00-10:00 min=x"), HasSubstr("DAYS HH:MM-HH:MM min=N"));
  EXPECT_THAT(err(""), HasSubstr("DAYS HH:MM-HH:MM min=N"));
}

TEST(TimetableTest, ValidatesAgainstMaxReplicas) {
  const std::vector<TimetableFloor> t = {Floor("Mon-Fri 09:00-12:00 min=3")};
  EXPECT_TRUE(ValidateTimetable(t, 3));
  auto over = ValidateTimetable(t, 2);
  ASSERT_FALSE(over);
  EXPECT_THAT(over.error().message,
              HasSubstr("Mon-Fri 09:00-12:00 min=3 is above --max 2: raise --max"));
  EXPECT_FALSE(ValidateTimetable({{0, 0, 60, 1}}, 3));        // no days
  EXPECT_FALSE(ValidateTimetable({{0x80, 0, 60, 1}}, 3));     // not a day
  EXPECT_FALSE(ValidateTimetable({{1, 60, 60, 1}}, 3));       // empty
  EXPECT_FALSE(ValidateTimetable({{1, 0, 24 * 60 + 1, 1}}, 3));
}

TEST(TimetableTest, StartsLeadEarlyAndEndsOnTime) {
  const std::vector<TimetableFloor> t = {Floor("Mon-Fri 09:00-12:00 min=3")};
  const double nine = kMonday + 9 * kHour;
  EXPECT_EQ(At(t, nine - 121), 0);
  EXPECT_EQ(At(t, nine - 120), 3);  // the lead
  EXPECT_EQ(At(t, nine), 3);
  EXPECT_EQ(At(t, nine + 3 * kHour - 1), 3);
  EXPECT_EQ(At(t, nine + 3 * kHour), 0);  // ends on time, not lead early
  // With no lead: the floor in force now; the one `lead` from now.
  EXPECT_EQ(At(t, nine - 1, Duration(0)), 0);
  EXPECT_EQ(At(t, nine - 60 + 120, Duration(0)), 3);
  // Friday yes, Saturday and Sunday no.
  EXPECT_EQ(At(t, nine + 4 * kDay), 3);
  EXPECT_EQ(At(t, nine + 5 * kDay), 0);
  EXPECT_EQ(At(t, nine + 6 * kDay), 0);
  EXPECT_EQ(At(t, nine + 7 * kDay), 3);  // and the next week
  EXPECT_EQ(At({}, nine), 0);
}

TEST(TimetableTest, DayBoundariesAndTheWeekWrap) {
  const std::vector<TimetableFloor> t = {Floor("Mon 00:00-01:00 min=2"),
                                         Floor("Sun 22:00-24:00 min=1")};
  const double sunday_midnight = kMonday + 7 * kDay;  // Sun 24:00 = the next Mon 00:00
  EXPECT_EQ(At(t, sunday_midnight - 2 * kHour - 121), 0);
  EXPECT_EQ(At(t, sunday_midnight - 2 * kHour - 120), 1);
  EXPECT_EQ(At(t, sunday_midnight - 121), 1);
  // Sunday's floor runs to midnight; Monday's starts its lead on Sunday, across the week's end.
  EXPECT_EQ(At(t, sunday_midnight - 120), 2);
  EXPECT_EQ(At(t, sunday_midnight - 1, Duration(0)), 1);
  EXPECT_EQ(At(t, sunday_midnight, Duration(0)), 2);
  EXPECT_EQ(At(t, sunday_midnight + kHour), 0);
  // The first Monday of the range too (the day before it is a Sunday of the previous week).
  EXPECT_EQ(At(t, kMonday - 60), 2);
  // A lead of a whole day reaches the previous day's same hour.
  EXPECT_EQ(At(t, kMonday - kDay + 1, Duration(kDay)), 2);
}

TEST(TimetableTest, OverlappingFloorsTheHighestHolds) {
  const std::vector<TimetableFloor> t = {Floor("Mon-Fri 08:00-18:00 min=1"),
                                         Floor("Tue 09:00-11:00 min=4")};
  const double tuesday = kMonday + kDay;
  EXPECT_EQ(At(t, tuesday + 8.5 * kHour), 1);
  EXPECT_EQ(At(t, tuesday + 10 * kHour), 4);
  EXPECT_EQ(At(t, tuesday + 11 * kHour), 1);
  EXPECT_EQ(At(t, tuesday + 18 * kHour), 0);
}

TEST(TimetableTest, FollowsLocalTimeAcrossDaylightSavingChanges) {
  auto berlin = TimeZone::Named("Europe/Berlin");
  ASSERT_TRUE(berlin) << berlin.error().message;
  EXPECT_EQ(berlin->name(), "Europe/Berlin");
  const std::vector<TimetableFloor> t = {Floor("Mon-Fri 09:00-12:00 min=3")};
  // Friday 2026-03-27, CET (UTC+1): 09:00 local is 08:00 UTC.
  const double friday = 1774569600;
  EXPECT_EQ(At(t, friday + 8 * kHour - 1, Duration(0), *berlin), 0);
  EXPECT_EQ(At(t, friday + 8 * kHour, Duration(0), *berlin), 3);
  EXPECT_EQ(At(t, friday + 11 * kHour, Duration(0), *berlin), 0);
  // Monday 2026-03-30, CEST (UTC+2) since Sunday: 09:00 local is 07:00 UTC.
  const double monday = 1774828800;
  EXPECT_EQ(At(t, monday + 7 * kHour - 121, kLead, *berlin), 0);
  EXPECT_EQ(At(t, monday + 7 * kHour - 120, kLead, *berlin), 3);
  EXPECT_EQ(At(t, monday + 10 * kHour, kLead, *berlin), 0);
  // Sunday 2026-03-29 skips 02:00-03:00: a floor from 02:30 starts at the change (01:00 UTC).
  const double sunday = 1774742400;
  const std::vector<TimetableFloor> night = {Floor("Sun 02:30-03:30 min=1")};
  EXPECT_EQ(At(night, sunday + 0.5 * kHour, Duration(0), *berlin), 0);
  EXPECT_EQ(At(night, sunday + 1 * kHour, Duration(0), *berlin), 1);
  EXPECT_EQ(At(night, sunday + 1.5 * kHour, Duration(0), *berlin), 0);  // 03:30 CEST
  // Sunday 2026-10-25 has 25 hours: 23:00 local is 22:00 UTC.
  const std::vector<TimetableFloor> late = {Floor("Sun 23:00-24:00 min=2")};
  EXPECT_EQ(At(late, 1792886400 + 22 * kHour - 1, Duration(0), *berlin), 0);
  EXPECT_EQ(At(late, 1792886400 + 22 * kHour, Duration(0), *berlin), 2);
  EXPECT_EQ(berlin->ToLocal(1792886400 + 22 * kHour), 1792886400 + 23 * 3600);
}

TEST(TimetableTest, AnUnknownZoneIsAnErrorThatSaysWhatToGive) {
  auto bad = TimeZone::Named("Europe/Atlantis");
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("unknown time zone 'Europe/Atlantis'"));
  EXPECT_THAT(bad.error().message, HasSubstr("such as Europe/Berlin"));
  EXPECT_EQ(TimeZone().name(), "UTC");
}

TEST(TimetableTest, EffectiveMinIsTheDeploymentsMinRaisedAndCappedAtMax) {
  Deployment d{.model = "m", .min_replicas = 1, .max_replicas = 4};
  d.timetable = {Floor("Mon 09:00-12:00 min=3")};
  const TimeZone utc;
  EXPECT_EQ(EffectiveMinReplicas(d, utc, TimePoint(kMonday + 8 * kHour), kLead), 1);
  EXPECT_EQ(EffectiveMinReplicas(d, utc, TimePoint(kMonday + 10 * kHour), kLead), 3);
  d.min_replicas = 4;
  EXPECT_EQ(EffectiveMinReplicas(d, utc, TimePoint(kMonday + 10 * kHour), kLead), 4);
  d.min_replicas = 0;
  d.max_replicas = 2;  // a stored floor above max (max lowered since) is capped
  EXPECT_EQ(EffectiveMinReplicas(d, utc, TimePoint(kMonday + 10 * kHour), kLead), 2);
}

TEST(TimetableTest, ReadsTheTomlFormWithFileLineAndKeyInErrors) {
  const toml::table doc = toml::parse(R"(
[[deployment.timetable]]
days = "Mon-Fri"
from = "09:00"
to = "12:00"
min = 3
[[deployment.timetable]]
days = "Sat"
from = "10:00"
to = "11:00"
min = 1
)");
  ConfigTable root(doc, "d.toml", "");
  auto deployment = root.Table("deployment");
  ASSERT_TRUE(deployment);
  const std::vector<TimetableFloor> t = ReadTimetable(*deployment, "timetable");
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(FormatTimetableFloor(t[0]), "Mon-Fri 09:00-12:00 min=3");
  EXPECT_EQ(FormatTimetableFloor(t[1]), "Sat 10:00-11:00 min=1");

  auto error_of = [](const char* text) {
    const toml::table bad = toml::parse(text);
    ConfigTable r(bad, "d.toml", "");
    try {
      auto deployment = r.Table("deployment");
      ReadTimetable(*deployment, "timetable");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(error_of("[[deployment.timetable]]\ndays = \"Mon\"\nfrom = \"12:00\"\n"
                       "to = \"09:00\"\nmin = 1\n"),
              HasSubstr("d.toml:4: deployment.timetable[0].to: "));
  EXPECT_THAT(error_of("[[deployment.timetable]]\ndays = \"Mon\"\nfrom = \"09:00\"\nmin = 1\n"),
              HasSubstr("deployment.timetable[0].to: is missing"));
  EXPECT_THAT(error_of("[[deployment.timetable]]\ndays = \"Mon\"\nfrom = \"09:00\"\n"
                       "to = \"10:00\"\nmin = 1\nmax = 2\n"),
              HasSubstr("max"));
}

}  // namespace
}  // namespace bmas::autoscale
