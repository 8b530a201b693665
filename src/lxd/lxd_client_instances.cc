// LxdClient's instances: listing, getting, creating from an image, state changes, deletion,
// and live edits of their config and devices.

#include "lxd/lxd_client.h"

#include <fmt/format.h>

#include <functional>
#include <optional>

#include "common/json_object.h"
#include "common/json_read.h"
#include "lxd/lxd_client_internal.h"

namespace bmas::lxd {

using rapidjson::Value;
using internal::CreateBody;
using internal::Parse;
using internal::ParseInstance;
using internal::Segment;
using internal::Serialize;
using internal::Writer;
using internal::WriteDevices;
using internal::WriteString;

Result<std::vector<Instance>> LxdClient::Instances() {
  auto r = Call(ClientRequest{"GET", "/1.0/instances?recursion=1", {}, {}}, "list instances");
  if (!r) return r.error();
  auto doc = Parse(r->body, "list instances");
  if (!doc) return doc.error();
  std::vector<Instance> out;
  const Value* m = JsonMember(*doc, "metadata");
  if (m != nullptr && m->IsArray()) {
    for (const Value& v : m->GetArray()) out.push_back(ParseInstance(v));
  }
  return out;
}

Result<Instance> LxdClient::GetInstance(const std::string& name) {
  const std::string what = fmt::format("get instance {}", name);
  auto r = Call(ClientRequest{"GET", "/1.0/instances/" + Segment(name), {}, {}}, what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  const Value* m = JsonMember(*doc, "metadata");
  if (m == nullptr) return Internal(fmt::format("cannot {}: no metadata", what));
  Instance i = ParseInstance(*m);
  i.etag = r->etag;
  return i;
}

Result<void> LxdClient::CreateInstance(const InstanceSpec& spec) {
  const std::string body = CreateBody(spec, "", [&spec](Writer& w) {
    Member(w, "type", "image");
    // 64 hex digits name an image by fingerprint; anything else is an alias.
    const bool fingerprint = spec.image.size() == 64 &&
                             spec.image.find_first_not_of("0123456789abcdef") == std::string::npos;
    w.Key(fingerprint ? "fingerprint" : "alias");
    WriteString(w, spec.image);
  });
  auto r = CallAndWait(ClientRequest{"POST", "/1.0/instances", {}, body},
                       fmt::format("create instance {}", spec.name));
  if (!r) return r.error();
  return {};
}

Result<void> LxdClient::ChangeState(const std::string& name, const std::string& action, bool force,
                                    int timeout_s) {
  const std::string body = fmt::format(R"({{"action":"{}","timeout":{},"force":{}}})", action,
                                       timeout_s, force ? "true" : "false");
  auto r = CallAndWait(ClientRequest{"PUT", "/1.0/instances/" + Segment(name) + "/state", {}, body},
                       fmt::format("{} instance {}", action, name));
  if (!r) return r.error();
  return {};
}

Result<void> LxdClient::DeleteInstance(const std::string& name) {
  auto r = CallAndWait(ClientRequest{"DELETE", "/1.0/instances/" + Segment(name), {}, {}},
                       fmt::format("delete instance {}", name));
  if (!r) return r.error();
  return {};
}

Result<void> LxdClient::AddDevice(const std::string& name, const std::string& device,
                                  const StringMap& spec) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("devices");
  WriteDevices(w, {{device, spec}});
  w.EndObject();
  auto r = CallAndWait(ClientRequest{"PATCH", "/1.0/instances/" + Segment(name), {}, buf.GetString()},
                       fmt::format("add device {} to {}", device, name));
  if (!r) return r.error();
  return {};
}

Result<void> LxdClient::AddDevices(const std::string& name,
                                   const std::map<std::string, StringMap>& devices) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("devices");
  WriteDevices(w, devices);
  w.EndObject();
  auto r = CallAndWait(ClientRequest{"PATCH", "/1.0/instances/" + Segment(name), {}, buf.GetString()},
                       fmt::format("add {} device(s) to {}", devices.size(), name));
  if (!r) return r.error();
  return {};
}

Result<bool> LxdClient::EditInstance(
    const std::string& name, const std::string& what,
    const std::function<Result<bool>(Value&, rapidjson::Document::AllocatorType&)>& edit) {
  auto r = Call(ClientRequest{"GET", "/1.0/instances/" + Segment(name), {}, {}}, what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  auto m = doc->FindMember("metadata");
  if (m == doc->MemberEnd() || !m->value.IsObject()) {
    return Internal(fmt::format("cannot {}: no metadata", what));
  }
  auto changed = edit(m->value, doc->GetAllocator());
  if (!changed || !*changed) return changed;
  ClientRequest put{"PUT", "/1.0/instances/" + Segment(name), {}, Serialize(m->value)};
  if (!r->etag.empty()) put.headers.emplace_back("If-Match", r->etag);
  if (auto done = CallAndWait(std::move(put), what); !done) return done.error();
  return true;
}

Result<int> LxdClient::RemoveDevices(const std::string& name,
                                     const std::vector<std::string>& devices) {
  int removed = 0;
  auto edited = EditInstance(
      name, fmt::format("remove devices from {}", name),
      [&](Value& m, rapidjson::Document::AllocatorType&) -> Result<bool> {
        auto have = m.FindMember("devices");
        if (have == m.MemberEnd() || !have->value.IsObject()) return false;
        for (const std::string& d : devices) {
          if (have->value.RemoveMember(d.c_str())) ++removed;
        }
        return removed > 0;
      });
  if (!edited) return edited.error();
  return removed;
}

Result<int64_t> LxdClient::InitPid(const std::string& name) {
  const std::string what = fmt::format("get the state of {}", name);
  auto r = Call(ClientRequest{"GET", "/1.0/instances/" + Segment(name) + "/state", {}, {}}, what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  const Value* m = JsonMember(*doc, "metadata");
  const Value* pid = m != nullptr ? JsonMember(*m, "pid") : nullptr;
  if (pid == nullptr || !pid->IsInt64() || pid->GetInt64() <= 0) {
    return Error{ErrorCode::kUnavailable, fmt::format("{} is not running", name)};
  }
  return pid->GetInt64();
}

Result<void> LxdClient::RemoveDevice(const std::string& name, const std::string& device) {
  const std::string what = fmt::format("remove device {} from {}", device, name);
  auto edited = EditInstance(
      name, what, [&](Value& m, rapidjson::Document::AllocatorType&) -> Result<bool> {
        auto devices = m.FindMember("devices");
        if (devices == m.MemberEnd() || !devices->value.IsObject() ||
            !devices->value.RemoveMember(device.c_str())) {
          return NotFound(fmt::format("cannot {}: it has no such device", what), "device");
        }
        return true;
      });
  if (!edited) return edited.error();
  return {};
}

Result<void> LxdClient::UpdateInstance(
    const std::string& name, const std::map<std::string, std::optional<std::string>>& config,
    const std::map<std::string, std::optional<StringMap>>& devices) {
  auto edited = EditInstance(
      name, fmt::format("update {}", name),
      [&](Value& m, rapidjson::Document::AllocatorType& a) -> Result<bool> {
        auto section = [&](const char* key) -> Value& {
          auto it = m.FindMember(key);
          if (it == m.MemberEnd() || !it->value.IsObject()) {
            m.RemoveMember(key);
            m.AddMember(Value(key, a), Value(rapidjson::kObjectType), a);
            it = m.FindMember(key);
          }
          return it->value;
        };
        auto put = [&a](Value& object, const std::string& key, Value value) {
          object.RemoveMember(key.c_str());
          object.AddMember(Value(key.c_str(), a), std::move(value), a);
        };
        Value& c = section("config");
        for (const auto& [key, value] : config) {
          if (value) {
            put(c, key, Value(value->c_str(), a));
          } else {
            c.RemoveMember(key.c_str());
          }
        }
        Value& d = section("devices");
        for (const auto& [device, spec] : devices) {
          if (!spec) {
            d.RemoveMember(device.c_str());
            continue;
          }
          Value entries(rapidjson::kObjectType);
          for (const auto& [k, v] : *spec) {
            entries.AddMember(Value(k.c_str(), a), Value(v.c_str(), a), a);
          }
          put(d, device, std::move(entries));
        }
        return true;
      });
  if (!edited) return edited.error();
  return {};
}

}  // namespace bmas::lxd
