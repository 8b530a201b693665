#include "cli/backend_list.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>

#include "common/json_object.h"

namespace bmas {
namespace {

// The label value of `series{backend="..."} value` after `prefix` (`series{backend="`),
// unescaped, and the sample's value; false when the line is not that shape.
bool ReadBackendSample(std::string_view line, std::string_view prefix, std::string& url,
                       double& value) {
  if (!line.starts_with(prefix)) return false;
  url.clear();
  size_t i = prefix.size();
  for (; i < line.size() && line[i] != '"'; ++i) {
    if (line[i] == '\\' && i + 1 < line.size()) {
      ++i;
      url += line[i] == 'n' ? '\n' : line[i];
    } else {
      url += line[i];
    }
  }
  if (line.substr(i).substr(0, 3) != "\"} ") return false;
  const std::string number(line.substr(i + 3));
  try {
    value = std::stod(number);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}

}  // namespace

std::vector<RunningBackend> ParseRunningBackends(std::string_view metrics) {
  std::vector<RunningBackend> out;
  auto entry = [&out](const std::string& url) -> RunningBackend& {
    auto it =
        std::find_if(out.begin(), out.end(), [&](const RunningBackend& b) { return b.url == url; });
    return it != out.end() ? *it : out.emplace_back(RunningBackend{url});
  };
  std::string url;
  double value = 0;
  while (!metrics.empty()) {
    const size_t end = metrics.find('\n');
    const std::string_view line = metrics.substr(0, end);
    metrics.remove_prefix(end == std::string_view::npos ? metrics.size() : end + 1);
    for (auto [prefix, field] :
         {std::pair{"bmas_gateway_backend_healthy{backend=\"", &RunningBackend::healthy},
          {"bmas_gateway_backend_added{backend=\"", &RunningBackend::added},
          {"bmas_gateway_backend_draining{backend=\"", &RunningBackend::draining}}) {
      if (ReadBackendSample(line, prefix, url, value)) entry(url).*field = value == 1;
    }
  }
  return out;
}

std::vector<BackendRow> MergeBackends(const std::vector<std::string>& config,
                                      const std::vector<std::string>& added,
                                      const std::optional<std::vector<RunningBackend>>& running) {
  std::vector<BackendRow> rows;
  auto add = [&rows](const std::string& url, const char* origin) {
    auto it =
        std::find_if(rows.begin(), rows.end(), [&](const BackendRow& r) { return r.url == url; });
    if (it == rows.end()) it = rows.insert(rows.end(), BackendRow{url, {}, "", std::nullopt});
    if (std::find(it->origins.begin(), it->origins.end(), origin) == it->origins.end()) {
      it->origins.emplace_back(origin);
    }
  };
  for (const std::string& url : config) add(url, "config");
  for (const std::string& url : added) add(url, "added");
  if (!running) return rows;
  auto stored = [&added](const std::string& url) {
    return std::find(added.begin(), added.end(), url) != added.end();
  };
  // Neither in the config nor in the store: given on the gateway's command line (as `bmas up`
  // gives it its engines), or removed from the store (the gateway drains it within a second).
  for (const RunningBackend& b : *running) {
    const bool known =
        std::any_of(rows.begin(), rows.end(), [&](const BackendRow& r) { return r.url == b.url; });
    if (!known) add(b.url, b.added ? "removed" : "command line");
  }
  for (BackendRow& row : rows) {
    auto it = std::find_if(running->begin(), running->end(),
                           [&](const RunningBackend& b) { return b.url == row.url; });
    if (it == running->end()) {
      row.health = stored(row.url) ? "not in the gateway yet (it reads the store every second)"
                                   : "not used by the running gateway (it started without it)";
      continue;
    }
    const bool draining = it->draining || (it->added && !stored(row.url));
    row.healthy = it->healthy && !draining;
    row.health = draining      ? "draining (removed; its requests in flight finish)"
                 : it->healthy ? "healthy"
                               : "down (failing the gateway's health checks)";
  }
  return rows;
}

std::string FormatBackends(const std::vector<BackendRow>& rows, bool json) {
  if (json) {
    rapidjson::StringBuffer buf;
    rapidjson::Writer<rapidjson::StringBuffer> w(buf);
    w.StartArray();
    for (const BackendRow& r : rows) {
      w.StartObject();
      Member(w, "url", r.url);
      w.Key("origins");
      w.StartArray();
      for (const std::string& o : r.origins) w.String(o.c_str());
      w.EndArray();
      Member(w, "health", r.health);
      w.Key("healthy");
      if (r.healthy)
        w.Bool(*r.healthy);
      else
        w.Null();
      w.EndObject();
    }
    w.EndArray();
    return std::string(buf.GetString()) + "\n";
  }
  size_t width = 3;
  for (const BackendRow& r : rows) width = std::max(width, r.url.size());
  std::string out = fmt::format("{:<{}}  {:<14} {}\n", "URL", width, "ORIGIN", "HEALTH");
  for (const BackendRow& r : rows) {
    out += fmt::format("{:<{}}  {:<14} {}\n", r.url, width,
                       fmt::format("{}", fmt::join(r.origins, ",")), r.health);
  }
  return out;
}

}  // namespace bmas
