#pragma once

// Timetable floors: a deployment's weekly floors above its min_replicas, e.g. "Mon-Fri
// 09:00-12:00 min=3" for a lab that opens its notebooks at nine. Pure: the time and the time
// zone are arguments; only TimeZone::Named reads the tz database.
//
// Written as text ("Mon-Fri 09:00-12:00 min=3": `bmas inference deploy --timetable`) or as TOML
// (`[[deployment.timetable]] days = "Mon-Fri", from = "09:00", to = "12:00", min = 3`, and the
// same under [[policies.timetable]] in a `bmas plan` scenario). Days: Mon Tue Wed Thu Fri Sat
// Sun (any case), a range (Mon-Fri; Fri-Mon wraps over the weekend) or a list (Mon,Wed,Fri).
// Times are the site's local time, HH:MM, from < to; "24:00" ends a floor at midnight. A floor
// that crosses midnight is written as two. Where floors overlap, the highest holds (as a
// cohort's activity windows do in the planner).
//
// A floor is in force from `lead` before its start until its end: the controller starts (or
// wakes) its replicas ahead, so that they have finished their cold start when the lab begins,
// and lets them go on time.

#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/result.h"
#include "store/store.h"

namespace date {
class time_zone;
}

namespace bmas {
class ConfigTable;
}

namespace bmas::autoscale {

// Covers a cold start of vLLM (15-60 s) with Slurm's launch on top.
inline constexpr Duration kDefaultTimetableLead{120};
inline constexpr Duration kMaxTimetableLead{86400};

// A zone of the tz database (Europe/Berlin), so that a floor at 09:00 stays at 09:00 local time
// across daylight saving changes.
class TimeZone {
 public:
  TimeZone() = default;  // UTC
  // `name` from the tz database; "" = the machine's own zone ($TZ, else /etc/localtime, else
  // UTC).
  static Result<TimeZone> Named(const std::string& name);
  const std::string& name() const { return name_; }

  // Local wall-clock seconds (since 1970-01-01 00:00 local) of a unix time, and back. A local
  // time that does not exist (skipped by a spring-forward change) maps to the change itself; one
  // that occurs twice, to its first occurrence.
  int64_t ToLocal(int64_t unix_seconds) const;
  int64_t ToUnix(int64_t local_seconds) const;

 private:
  const date::time_zone* zone_ = nullptr;  // nullptr: UTC
  std::string name_ = "UTC";
};

// "Mon-Fri 09:00-12:00 min=3".
Result<TimetableFloor> ParseTimetableFloor(std::string_view text);
// The parts of one floor, as the TOML form names them.
Result<TimetableFloor> MakeTimetableFloor(std::string_view days, std::string_view from,
                                          std::string_view to, int64_t min);
// The floors of the array of tables `key` under `parent` ([[deployment.timetable]] or
// [[policies.timetable]]); throws ConfigError naming the file, line and key.
std::vector<TimetableFloor> ReadTimetable(ConfigTable& parent, std::string_view key);

// Each floor's min is 1 to `max_replicas`, its days and times valid.
Result<void> ValidateTimetable(const std::vector<TimetableFloor>& timetable, int max_replicas);

// "Mon-Fri 09:00-12:00 min=3", as ParseTimetableFloor reads it back.
std::string FormatTimetableFloor(const TimetableFloor& floor);
// "Mon-Fri", "Mon,Wed,Fri", "Sat-Sun".
std::string FormatDays(unsigned days);
// "HH:MM".
std::string FormatMinute(int minute);

// The highest floor in force at `now` (unix seconds), each floor counted from `lead` before
// its start until its end; 0 when none is. With lead 0 it is the floor in force now; the floor
// in force `lead` from now is TimetableFloorAt(t, zone, now + lead, 0).
int TimetableFloorAt(const std::vector<TimetableFloor>& timetable, const TimeZone& zone,
                     TimePoint now, Duration lead);

// What the controller keeps at `now`: the deployment's min_replicas, raised by its timetable
// (started `lead` early), at most max_replicas.
int EffectiveMinReplicas(const Deployment& d, const TimeZone& zone, TimePoint now, Duration lead);

}  // namespace bmas::autoscale
