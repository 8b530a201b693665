#include "autoscale/timetable.h"

#include <date/tz.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include "common/config_table.h"

namespace bmas::autoscale {
namespace {

constexpr std::array<std::string_view, 7> kDayNames = {"Mon", "Tue", "Wed", "Thu",
                                                       "Fri", "Sat", "Sun"};
constexpr unsigned kAllDays = 0x7f;
constexpr int kMinutesPerDay = 24 * 60;
constexpr int64_t kSecondsPerDay = 86400;
constexpr size_t kMaxFloors = 64;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// 0 = Monday; -1 for a name that is not a day.
int DayIndex(std::string_view name) {
  name = Trim(name);
  for (size_t i = 0; i < kDayNames.size(); ++i) {
    const std::string_view day = kDayNames[i];
    if (name.size() == day.size() &&
        std::equal(name.begin(), name.end(), day.begin(), [](char a, char b) {
          return std::tolower(static_cast<unsigned char>(a)) ==
                 std::tolower(static_cast<unsigned char>(b));
        })) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

Result<unsigned> ParseDays(std::string_view text) {
  const auto bad = [&](std::string_view part) {
    return InvalidArgument(
        fmt::format("'{}' in days \"{}\" is not a day: give Mon, Tue, Wed, Thu, Fri, Sat or Sun, a "
                    "range such as Mon-Fri, or a list such as Mon,Wed,Fri",
                    part, text),
        "days");
  };
  if (Trim(text).empty()) return bad(text);
  unsigned days = 0;
  std::string_view rest = text;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view part = rest.substr(0, comma);
    const size_t dash = part.find('-');
    const int first = DayIndex(part.substr(0, dash));
    const int last = dash == std::string_view::npos ? first : DayIndex(part.substr(dash + 1));
    if (first < 0 || last < 0) return bad(Trim(part));
    // A range runs forward through the week: Fri-Mon is Fri, Sat, Sun and Mon.
    for (int d = first;; d = (d + 1) % 7) {
      days |= 1u << d;
      if (d == last) break;
    }
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return days;
}

// "HH:MM" as minutes after midnight; "24:00" only where `end`.
Result<int> ParseMinute(std::string_view text, bool end, const char* param) {
  const std::string_view t = Trim(text);
  const auto bad = [&] {
    return InvalidArgument(fmt::format("{} \"{}\" is not a time of day: give HH:MM, from 00:00 to "
                                       "{}",
                                       param, text, end ? "24:00" : "23:59"),
                           param);
  };
  const size_t colon = t.find(':');
  if (colon == std::string_view::npos || colon == 0 || colon > 2 || t.size() != colon + 3) {
    return bad();
  }
  int h = 0, m = 0;
  auto [he, hec] = std::from_chars(t.data(), t.data() + colon, h);
  auto [me, mec] = std::from_chars(t.data() + colon + 1, t.data() + t.size(), m);
  if (hec != std::errc() || he != t.data() + colon || mec != std::errc() ||
      me != t.data() + t.size() || m > 59 || h > 24 || (h == 24 && (m != 0 || !end))) {
    return bad();
  }
  return h * 60 + m;
}

}  // namespace

Result<TimeZone> TimeZone::Named(const std::string& name) {
  std::string wanted = name;
  if (wanted.empty()) {
    if (const char* tz = std::getenv("TZ"); tz != nullptr && *tz != '\0') {
      wanted = tz[0] == ':' ? tz + 1 : tz;
    }
  }
  TimeZone zone;
  try {
    zone.zone_ = wanted.empty() ? date::current_zone() : date::locate_zone(wanted);
  } catch (const std::exception& e) {
    if (name.empty()) return zone;  // the machine names no zone: UTC
    return InvalidArgument(fmt::format("unknown time zone '{}' ({}): give a name of the tz "
                                       "database such as Europe/Berlin (see /usr/share/zoneinfo; "
                                       "Debian's tzdata package)",
                                       name, e.what()),
                           "timezone");
  }
  zone.name_ = std::string(zone.zone_->name());
  return zone;
}

int64_t TimeZone::ToLocal(int64_t unix_seconds) const {
  if (zone_ == nullptr) return unix_seconds;
  const date::sys_seconds t{std::chrono::seconds(unix_seconds)};
  return zone_->to_local(t).time_since_epoch().count();
}

int64_t TimeZone::ToUnix(int64_t local_seconds) const {
  if (zone_ == nullptr) return local_seconds;
  const date::local_seconds t{std::chrono::seconds(local_seconds)};
  return zone_->to_sys(t, date::choose::earliest).time_since_epoch().count();
}

Result<TimetableFloor> MakeTimetableFloor(std::string_view days, std::string_view from,
                                          std::string_view to, int64_t min) {
  TimetableFloor f;
  auto d = ParseDays(days);
  if (!d) return d.error();
  auto a = ParseMinute(from, false, "from");
  if (!a) return a.error();
  auto b = ParseMinute(to, true, "to");
  if (!b) return b.error();
  if (*a >= *b) {
    return InvalidArgument(fmt::format("the floor {} {}-{} ends before it starts: `to` must be "
                                       "after `from` on the same day (write a floor that crosses "
                                       "midnight as two, the first to 24:00)",
                                       days, from, to),
                           "to");
  }
  if (min < 1 || min > 4096) {
    return InvalidArgument(fmt::format("min = {} for {} {}-{}: give 1 or more replicas", min, days,
                                       from, to),
                           "min");
  }
  f.days = *d;
  f.from_minute = *a;
  f.to_minute = *b;
  f.min = static_cast<int>(min);
  return f;
}

Result<TimetableFloor> ParseTimetableFloor(std::string_view text) {
  const auto bad = [&] {
    return InvalidArgument(fmt::format("timetable floor \"{}\": write DAYS HH:MM-HH:MM min=N, e.g. "
                                       "\"Mon-Fri 09:00-12:00 min=3\"",
                                       text),
                           "timetable");
  };
  std::vector<std::string_view> words;
  for (std::string_view rest = Trim(text); !rest.empty(); rest = Trim(rest)) {
    size_t end = 0;
    while (end < rest.size() && !std::isspace(static_cast<unsigned char>(rest[end]))) ++end;
    words.push_back(rest.substr(0, end));
    rest.remove_prefix(end);
  }
  if (words.size() != 3 || !words[2].starts_with("min=")) return bad();
  const std::string_view times = words[1];
  const size_t dash = times.find('-');
  if (dash == std::string_view::npos) return bad();
  const std::string_view n = words[2].substr(4);
  int64_t min = 0;
  auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), min);
  if (ec != std::errc() || end != n.data() + n.size()) return bad();
  return MakeTimetableFloor(words[0], times.substr(0, dash), times.substr(dash + 1), min);
}

std::vector<TimetableFloor> ReadTimetable(ConfigTable& parent, std::string_view key) {
  std::vector<TimetableFloor> out;
  for (ConfigTable& t : parent.TableArray(key)) {
    for (const char* required : {"days", "from", "to", "min"}) {
      if (!t.Has(required)) {
        t.Invalid(required, "is missing: a floor is days = \"Mon-Fri\", from = \"09:00\", to = "
                            "\"12:00\", min = 3");
      }
    }
    const std::string days = t.String("days", "");
    const std::string from = t.String("from", "");
    const std::string to = t.String("to", "");
    const int64_t min = t.Int("min", 1, 1, 4096);
    t.RejectUnknownKeys();
    auto floor = MakeTimetableFloor(days, from, to, min);
    if (!floor) t.Invalid(floor.error().param, floor.error().message);
    out.push_back(*floor);
  }
  if (out.size() > kMaxFloors) {
    parent.Invalid(key, fmt::format("has {} floors; at most {}", out.size(), kMaxFloors));
  }
  return out;
}

Result<void> ValidateTimetable(const std::vector<TimetableFloor>& timetable, int max_replicas) {
  if (timetable.size() > kMaxFloors) {
    return InvalidArgument(
        fmt::format("{} timetable floors; at most {}", timetable.size(), kMaxFloors), "timetable");
  }
  for (const TimetableFloor& f : timetable) {
    if (f.days == 0 || (f.days & ~kAllDays) != 0 || f.from_minute < 0 ||
        f.to_minute > kMinutesPerDay || f.from_minute >= f.to_minute || f.min < 1) {
      return InvalidArgument(fmt::format("the timetable floor {} is not valid",
                                         FormatTimetableFloor(f)),
                             "timetable");
    }
    if (f.min > max_replicas) {
      return InvalidArgument(fmt::format("the timetable floor {} is above --max {}: raise --max "
                                         "or lower the floor's min",
                                         FormatTimetableFloor(f), max_replicas),
                             "timetable");
    }
  }
  return {};
}

std::string FormatDays(unsigned days) {
  if ((days & kAllDays) == kAllDays) return "Mon-Sun";
  std::string out;
  for (int d = 0; d < 7;) {
    if ((days & (1u << d)) == 0) {
      ++d;
      continue;
    }
    int last = d;
    while (last + 1 < 7 && (days & (1u << (last + 1))) != 0) ++last;
    if (!out.empty()) out += ',';
    out += kDayNames[d];
    if (last > d) out += fmt::format("{}{}", last == d + 1 ? "," : "-", kDayNames[last]);
    d = last + 1;
  }
  return out;
}

std::string FormatMinute(int minute) {
  return fmt::format("{:02}:{:02}", minute / 60, minute % 60);
}

std::string FormatTimetableFloor(const TimetableFloor& f) {
  return fmt::format("{} {}-{} min={}", FormatDays(f.days), FormatMinute(f.from_minute),
                     FormatMinute(f.to_minute), f.min);
}

int TimetableFloorAt(const std::vector<TimetableFloor>& timetable, const TimeZone& zone,
                     TimePoint now, Duration lead) {
  if (timetable.empty()) return 0;
  const double t = now.count();
  const double ahead = std::clamp(lead, Duration(0), kMaxTimetableLead).count();
  const int64_t local = zone.ToLocal(static_cast<int64_t>(std::floor(t)));
  const int64_t today = local >= 0 ? local / kSecondsPerDay : (local + 1) / kSecondsPerDay - 1;
  int best = 0;
  // Yesterday to two days on: a lead of up to a day, with a daylight saving change in it.
  for (int64_t day = today - 1; day <= today + 2; ++day) {
    // 1970-01-01 was a Thursday (index 3, Monday = 0).
    const int weekday = static_cast<int>(((day % 7) + 7 + 3) % 7);
    const int64_t midnight = day * kSecondsPerDay;
    for (const TimetableFloor& f : timetable) {
      if ((f.days & (1u << weekday)) == 0 || f.min <= best) continue;
      const double start = static_cast<double>(zone.ToUnix(midnight + 60 * f.from_minute));
      const double end = static_cast<double>(zone.ToUnix(midnight + 60 * f.to_minute));
      if (start - ahead <= t && t < end) best = f.min;
    }
  }
  return best;
}

int EffectiveMinReplicas(const Deployment& d, const TimeZone& zone, TimePoint now, Duration lead) {
  const int floor = TimetableFloorAt(d.timetable, zone, now, lead);
  return std::max(d.min_replicas, std::min(floor, d.max_replicas));
}

}  // namespace bmas::autoscale
