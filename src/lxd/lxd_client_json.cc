// LxdClient's JSON: reading LXD's answers into lxd_types.h's structs, and writing request bodies.

#include <fmt/format.h>

#include <cctype>
#include <exception>

#include "common/json_object.h"
#include "common/json_read.h"
#include "lxd/lxd_client_internal.h"

namespace bmas::lxd::internal {

using rapidjson::Value;

// ---- JSON reading -------------------------------------------------------------------------

int64_t Int(const Value& v, const char* key, int64_t fallback) {
  const Value* m = JsonMember(v, key);
  if (m == nullptr) return fallback;
  if (m->IsInt64()) return m->GetInt64();
  if (m->IsString()) {
    try {
      return std::stoll(m->GetString());
    } catch (const std::exception&) {
      return fallback;
    }
  }
  return fallback;
}

StringMap Strings(const Value& v, const char* key) {
  StringMap out;
  const Value* m = JsonMember(v, key);
  if (m == nullptr || !m->IsObject()) return out;
  for (const auto& e : m->GetObject()) {
    if (e.value.IsString()) out[e.name.GetString()] = e.value.GetString();
  }
  return out;
}

std::map<std::string, StringMap> Devices(const Value& v) {
  std::map<std::string, StringMap> out;
  const Value* m = JsonMember(v, "devices");
  if (m == nullptr || !m->IsObject()) return out;
  for (const auto& e : m->GetObject()) {
    StringMap d;
    if (e.value.IsObject()) {
      for (const auto& kv : e.value.GetObject()) {
        if (kv.value.IsString()) d[kv.name.GetString()] = kv.value.GetString();
      }
    }
    out[e.name.GetString()] = std::move(d);
  }
  return out;
}

Result<rapidjson::Document> Parse(const std::string& text, const std::string& what) {
  rapidjson::Document d;
  d.Parse(text.c_str(), text.size());
  if (d.HasParseError() || !d.IsObject()) {
    return Internal(fmt::format("cannot {}: LXD answered with something that is not a JSON "
                                "object: {}",
                                what, text.substr(0, 200)));
  }
  return d;
}

std::string Serialize(const Value& v) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  v.Accept(w);
  return buf.GetString();
}

Instance ParseInstance(const Value& v) {
  Instance i;
  i.name = JsonString(v, "name");
  i.status = ParseInstanceStatus(JsonString(v, "status"));
  i.type = JsonString(v, "type");
  i.architecture = JsonString(v, "architecture");
  i.config = Strings(v, "config");
  i.devices = Devices(v);
  i.profiles = JsonStringList(v, "profiles");
  i.created_at = JsonString(v, "created_at");
  return i;
}

// ---- JSON writing -------------------------------------------------------------------------

void WriteString(Writer& w, const std::string& s) {
  w.String(s.c_str(), static_cast<rapidjson::SizeType>(s.size()));
}

void WriteMap(Writer& w, const StringMap& m) {
  w.StartObject();
  for (const auto& [k, v] : m) {
    WriteString(w, k);
    WriteString(w, v);
  }
  w.EndObject();
}

void WriteDevices(Writer& w, const std::map<std::string, StringMap>& devices) {
  w.StartObject();
  for (const auto& [name, spec] : devices) {
    WriteString(w, name);
    WriteMap(w, spec);
  }
  w.EndObject();
}

void WriteStrings(Writer& w, const std::vector<std::string>& list) {
  w.StartArray();
  for (const auto& s : list) WriteString(w, s);
  w.EndArray();
}

void WriteConfigAndDevices(Writer& w, const StringMap& config,
                           const std::map<std::string, StringMap>& devices) {
  w.Key("config");
  WriteMap(w, config);
  w.Key("devices");
  WriteDevices(w, devices);
}

std::string CreateBody(const InstanceSpec& spec, const std::string& architecture,
                       const std::function<void(Writer&)>& write_source) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("name");
  WriteString(w, spec.name);
  Member(w, "type", "container");
  if (!architecture.empty()) {
    w.Key("architecture");
    WriteString(w, architecture);
  }
  ObjectMember(w, "source", [&] { write_source(w); });
  w.Key("profiles");
  WriteStrings(w, spec.profiles);
  WriteConfigAndDevices(w, spec.config, spec.devices);
  w.EndObject();
  return buf.GetString();
}

std::string Segment(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.') {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

}  // namespace bmas::lxd::internal

namespace bmas::lxd {

std::string_view InstanceStatusName(InstanceStatus status) {
  switch (status) {
    case InstanceStatus::kRunning: return "Running";
    case InstanceStatus::kStopped: return "Stopped";
    case InstanceStatus::kFrozen: return "Frozen";
    case InstanceStatus::kError: return "Error";
    case InstanceStatus::kUnknown: break;
  }
  return "Unknown";
}

InstanceStatus ParseInstanceStatus(std::string_view name) {
  for (InstanceStatus s : {InstanceStatus::kRunning, InstanceStatus::kStopped,
                           InstanceStatus::kFrozen, InstanceStatus::kError}) {
    if (InstanceStatusName(s) == name) return s;
  }
  return InstanceStatus::kUnknown;
}

}  // namespace bmas::lxd
