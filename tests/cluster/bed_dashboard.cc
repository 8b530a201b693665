#include "bed_dashboard.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <regex>

namespace bmas::testbed {

Result<std::string> BedDashboard::KeyFor(const std::string& user) const {
  std::string printed;
  for (std::vector<std::string> args : {std::vector<std::string>{"user", "add", user},
                                        std::vector<std::string>{"key", "create", user}}) {
    const std::string what = fmt::format("bmas {}", fmt::join(args, " "));
    args.insert(args.begin(), {"--config", cluster_.inventory()});
    auto r = cluster_.Bmas(NetBed::kController, args);
    if (!r) return r.error();
    if (r->exit_code != 0) {
      return Internal(fmt::format("`{}` in mgs1 failed ({}): {}{}", what, r->exit_code, r->err,
                                  r->out));
    }
    printed = r->out;
  }
  std::smatch key;
  if (!std::regex_search(printed, key, std::regex(R"(sk-bmas-\S+)"))) {
    return Internal("`bmas key create " + user + "` in mgs1 printed no sk-bmas- key: " + printed);
  }
  return key.str();
}

Result<DaemonProcess> BedDashboard::Start(const std::vector<std::string>& nodes) {
  std::vector<std::string> args = {bmas_,       "--config",  cluster_.inventory(),
                                   "--state-dir", cluster_.node_dir() + "/bmas-state",
                                   "dashboard", "--listen",  kListen,
                                   "--refresh", "0.5"};
  for (const std::string& node : nodes) {
    args.insert(args.end(), {"--agent", fmt::format("https://{}:9400", node)});
  }
  return bed_.StartDaemon(NetBed::kController, "dashboard", "bmas", args);
}

rapidjson::Document BedDashboard::Map(const std::string& user, const std::string& key,
                                      std::string& raw) const {
  auto r = bed_.Run(NetBed::kController,
                    {"curl", "-sS", "-m", "5", "-H", "Authorization: Bearer " + key,
                     fmt::format("http://{}/api/cluster", kListen)},
                    user);
  raw = !r ? r.error().message : r->exit_code != 0 ? "curl: " + r->err : r->out;
  rapidjson::Document d;
  if (d.Parse(raw.c_str()).HasParseError() || !d.IsObject()) d.SetObject();
  return d;
}

const rapidjson::Value& MapNode(const rapidjson::Value& map, const std::string& name) {
  static const rapidjson::Value kNull;
  if (!map.IsObject() || !map.HasMember("nodes") || !map["nodes"].IsArray()) return kNull;
  for (const rapidjson::Value& n : map["nodes"].GetArray()) {
    if (n.IsObject() && n.HasMember("name") && n["name"].IsString() && n["name"].GetString() == name) {
      return n;
    }
  }
  return kNull;
}

}  // namespace bmas::testbed
