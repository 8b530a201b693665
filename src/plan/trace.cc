#include "plan/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "common/config_table.h"
#include "plan/text_file.h"

namespace bmas::plan {

namespace {

constexpr std::string_view kCsvHeader = "submit_s,user,gpus,duration_s";
constexpr int64_t kMaxGpus = 65536;

// One non-empty line of a trace, split on ','.
struct Row {
  int line = 0;
  std::vector<std::string_view> fields;
};

[[noreturn]] void Malformed(const std::string& source, int line, const std::string& what) {
  throw ConfigError(fmt::format("{}:{}: {}", source, line, what));
}

std::vector<std::string_view> SplitFields(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    fields.push_back(line.substr(start, comma - start));
    if (comma == std::string_view::npos) return fields;
    start = comma + 1;
  }
}

// The lines of `text` that hold anything, split, numbered from 1 as in the file. A trailing
// '\r' (a file written on Windows) is dropped.
std::vector<Row> SplitRows(std::string_view text, const std::string& source) {
  std::vector<Row> rows;
  int number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (line.find('"') != std::string_view::npos) {
      Malformed(source, number, "quoted fields are not supported: write names without '\"' or ','");
    }
    rows.push_back(Row{number, SplitFields(line)});
  }
  return rows;
}

std::optional<double> ToDouble(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

std::optional<int64_t> ToInt(std::string_view s) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Typed access to the fields of one row, by column; errors name the line and the column.
class Fields {
 public:
  Fields(const std::string& source, const Row& row, const std::vector<std::string_view>& header)
      : source_(source), row_(row), header_(header) {
    if (row.fields.size() != header.size()) {
      Fail(fmt::format("{} fields where the header has {} ({})", row.fields.size(), header.size(),
                       fmt::join(header, ",")));
    }
  }

  std::string_view Text(size_t column) const { return row_.fields[column]; }

  double Seconds(size_t column) const {
    std::optional<double> v = ToDouble(Text(column));
    if (!v || *v < 0) Fail(Column(column, "is not a number of seconds >= 0"));
    return *v;
  }

  // Whole seconds from the trace's start.
  int64_t Time(size_t column) const {
    std::optional<int64_t> v = ToInt(Text(column));
    if (!v || *v < 0) Fail(Column(column, "is not a whole number of seconds >= 0"));
    return *v;
  }

  int64_t Int(size_t column, int64_t min, int64_t max) const {
    std::optional<int64_t> v = ToInt(Text(column));
    if (!v || *v < min || *v > max) {
      Fail(Column(column, fmt::format("is not a whole number in {}..{}", min, max)));
    }
    return *v;
  }

  std::string NonEmpty(size_t column) const {
    if (Text(column).empty())
      Fail(fmt::format("{} is empty: every job needs one", header_[column]));
    return std::string(Text(column));
  }

  [[noreturn]] void Fail(const std::string& what) const { Malformed(source_, row_.line, what); }

  std::string Column(size_t column, std::string_view what) const {
    return fmt::format("{} \"{}\" {}", header_[column], Text(column), what);
  }

 private:
  const std::string& source_;
  const Row& row_;
  const std::vector<std::string_view>& header_;
};

Trace ParseCsv(const std::vector<Row>& rows, const std::string& source) {
  Trace trace;
  if (rows.empty()) {
    Malformed(source, 1, fmt::format("no header: the first line is {}[,partition[,time_limit_s]]",
                                     kCsvHeader));
  }
  const std::vector<std::string_view>& header = rows[0].fields;
  std::string joined = fmt::format("{}", fmt::join(header, ","));
  if (joined != kCsvHeader && joined != fmt::format("{},partition", kCsvHeader) &&
      joined != fmt::format("{},partition,time_limit_s", kCsvHeader)) {
    Malformed(source, rows[0].line,
              fmt::format("the header is \"{}\"; a csv trace starts with "
                          "{}[,partition[,time_limit_s]]",
                          joined, kCsvHeader));
  }
  for (size_t i = 1; i < rows.size(); ++i) {
    Fields f(source, rows[i], header);
    TraceJob job;
    job.submit_s = f.Seconds(0);
    job.user = f.NonEmpty(1);
    job.gpus = static_cast<int>(f.Int(2, 1, kMaxGpus));
    job.duration_s = f.Seconds(3);
    if (header.size() > 4) job.partition = std::string(f.Text(4));
    if (header.size() > 5) job.time_limit_s = f.Seconds(5);
    trace.jobs.push_back(std::move(job));
    ++trace.rows;
  }
  return trace;
}

// Columns of the alibaba-v2023 pod list this reader uses.
struct AlibabaColumns {
  size_t num_gpu, gpu_milli, qos, creation, deletion, scheduled;
};

AlibabaColumns FindAlibabaColumns(const Row& header, const std::string& source) {
  auto find = [&](std::string_view name) {
    auto it = std::find(header.fields.begin(), header.fields.end(), name);
    if (it == header.fields.end()) {
      Malformed(source, header.line,
                fmt::format("no column {}: an alibaba-v2023 pod list has name, cpu_milli, "
                            "memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, "
                            "creation_time, deletion_time, scheduled_time",
                            name));
    }
    return static_cast<size_t>(it - header.fields.begin());
  };
  return AlibabaColumns{find("num_gpu"),       find("gpu_milli"),     find("qos"),
                        find("creation_time"), find("deletion_time"), find("scheduled_time")};
}

Trace ParseAlibaba(const std::vector<Row>& rows, const std::string& source) {
  Trace trace;
  if (rows.empty()) Malformed(source, 1, "empty: an alibaba-v2023 pod list starts with a header");
  const AlibabaColumns c = FindAlibabaColumns(rows[0], source);
  const std::vector<std::string_view>& header = rows[0].fields;
  for (size_t i = 1; i < rows.size(); ++i) {
    Fields f(source, rows[i], header);
    ++trace.rows;
    const int64_t gpus = f.Int(c.num_gpu, 0, kMaxGpus);
    const int64_t milli = f.Int(c.gpu_milli, 0, 1000);
    const int64_t created = f.Time(c.creation);
    const int64_t deleted = f.Time(c.deletion);
    if (gpus == 0) {
      ++trace.cpu_only;
      continue;
    }
    if (f.Text(c.scheduled).empty()) {
      ++trace.never_ran;
      continue;
    }
    const int64_t scheduled = f.Time(c.scheduled);
    if (scheduled < created) {
      f.Fail(fmt::format("scheduled_time {} is before creation_time {}", scheduled, created));
    }
    if (deleted < scheduled) {
      f.Fail(fmt::format("deletion_time {} is before scheduled_time {}", deleted, scheduled));
    }
    if (milli == 0) f.Fail(f.Column(c.gpu_milli, "is no share of a GPU: give 1..1000"));
    if (milli < 1000) ++trace.rounded_up;
    trace.jobs.push_back(TraceJob{.submit_s = static_cast<double>(created),
                                  .user = f.NonEmpty(c.qos),
                                  .gpus = static_cast<int>(gpus),
                                  .duration_s = static_cast<double>(deleted - scheduled)});
  }
  return trace;
}

}  // namespace

std::optional<TraceFormat> ParseTraceFormat(std::string_view name) {
  if (name == "csv") return TraceFormat::kCsv;
  if (name == "alibaba-v2023") return TraceFormat::kAlibabaV2023;
  return std::nullopt;
}

std::string_view TraceFormatName(TraceFormat format) {
  return format == TraceFormat::kCsv ? "csv" : "alibaba-v2023";
}

Trace ParseTrace(std::string_view text, TraceFormat format, const std::string& source) {
  std::vector<Row> rows = SplitRows(text, source);
  Trace trace = format == TraceFormat::kCsv ? ParseCsv(rows, source) : ParseAlibaba(rows, source);
  std::stable_sort(trace.jobs.begin(), trace.jobs.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit_s < b.submit_s; });
  return trace;
}

Trace ReadTrace(const std::string& path, TraceFormat format) {
  return ParseTrace(ReadTextFile(path, "trace file"), format, path);
}

}  // namespace bmas::plan
