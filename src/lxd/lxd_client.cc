#include "lxd/lxd_client.h"

#include <fmt/format.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <sstream>

#include <boost/asio/local/stream_protocol.hpp>

#include "common/asio.h"
#include "common/json_read.h"
#include "lxd/lxd_internal.h"

namespace bmas::lxd {
namespace {

using rapidjson::Value;
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

class UnixLxdTransport final : public LxdTransport {
 public:
  UnixLxdTransport(std::string path, std::chrono::milliseconds timeout)
      : path_(std::move(path)), timeout_(timeout) {}

  Result<LxdResponse> RoundTrip(const LxdRequest& request) override {
    using Local = net::local::stream_protocol;
    net::io_context io;
    Local::socket socket(io);
    beast::error_code ec;
    socket.connect(Local::endpoint(path_), ec);
    if (ec) return internal::TransportError("connect", path_, ec, timeout_);
    internal::SetSocketTimeouts(socket.native_handle(), timeout_);
    // Asio's own sync reads would not honour SO_RCVTIMEO (see internal::BoundedSocket).
    internal::BoundedSocket<Local::socket> bounded(socket);
    return internal::Exchange(bounded, request, "lxd", path_, timeout_);
  }

  std::string Where() const override { return path_; }

 private:
  std::string path_;
  std::chrono::milliseconds timeout_;
};

// ---- JSON reading -------------------------------------------------------------------------

int64_t Int(const Value& v, const char* key, int64_t fallback = 0) {
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

std::vector<std::string> StringList(const Value& v, const char* key) {
  std::vector<std::string> out;
  const Value* m = JsonMember(v, key);
  if (m == nullptr || !m->IsArray()) return out;
  for (const Value& e : m->GetArray()) {
    if (e.IsString()) out.emplace_back(e.GetString());
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

// Escapes a path segment (instance and device names are plain; this guards the rest).
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

ErrorCode CodeFor(int64_t lxd_code) {
  switch (lxd_code) {
    case 400: return ErrorCode::kInvalidArgument;
    case 403: return ErrorCode::kPermissionDenied;
    case 404: return ErrorCode::kNotFound;
    case 409: return ErrorCode::kAlreadyExists;
    case 503: return ErrorCode::kUnavailable;
    default: return ErrorCode::kInternal;
  }
}

Instance ParseInstance(const Value& v) {
  Instance i;
  i.name = JsonString(v, "name");
  i.status = JsonString(v, "status");
  i.type = JsonString(v, "type");
  i.architecture = JsonString(v, "architecture");
  i.config = Strings(v, "config");
  i.devices = Devices(v);
  i.profiles = StringList(v, "profiles");
  i.created_at = JsonString(v, "created_at");
  return i;
}

Profile ParseProfile(const Value& v) {
  Profile p;
  p.name = JsonString(v, "name");
  p.description = JsonString(v, "description");
  p.config = Strings(v, "config");
  p.devices = Devices(v);
  return p;
}

std::string ProfileBody(const Profile& p, bool with_name) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  if (with_name) {
    w.Key("name");
    WriteString(w, p.name);
  }
  w.Key("description");
  WriteString(w, p.description);
  w.Key("config");
  WriteMap(w, p.config);
  w.Key("devices");
  WriteDevices(w, p.devices);
  w.EndObject();
  return buf.GetString();
}

}  // namespace

LxdTransportPtr NewUnixLxdTransport(std::string path, std::chrono::milliseconds timeout) {
  return std::make_unique<UnixLxdTransport>(std::move(path), timeout);
}

bool IsValidInstanceName(const std::string& name) {
  if (name.empty() || name.size() > 63 || !std::isalpha(static_cast<unsigned char>(name[0])) ||
      name.back() == '-') {
    return false;
  }
  for (unsigned char c : name) {
    if (!std::isalnum(c) && c != '-') return false;
  }
  return true;
}

namespace {

// An operation is waited for in long polls of this many seconds, well inside the transport's
// bound on each read, so that a slow operation is never taken for a dead LXD.
int WaitSlice(std::chrono::milliseconds timeout) {
  return static_cast<int>(std::clamp<int64_t>(timeout.count() / 2000, 1, 30));
}

}  // namespace

LxdClient::LxdClient(const std::string& socket, std::chrono::milliseconds timeout)
    : transport_(NewUnixLxdTransport(socket, timeout)), wait_slice_s_(WaitSlice(timeout)) {}

LxdClient::LxdClient(LxdTransportPtr transport, std::chrono::milliseconds timeout)
    : transport_(std::move(transport)), wait_slice_s_(WaitSlice(timeout)) {}

Result<LxdResponse> LxdClient::Call(LxdRequest request, const std::string& what) {
  auto response = transport_->RoundTrip(request);
  if (!response) {
    Error e = response.error();
    e.message = fmt::format("cannot {}: {}. Is LXD running? `bmas lxd up` starts it", what,
                            e.message);
    return e;
  }
  if (response->status >= 200 && response->status < 300) return response;
  auto doc = Parse(response->body, what);
  std::string message = doc ? JsonString(*doc, "error") : std::string();
  int64_t code = doc ? Int(*doc, "error_code", response->status) : response->status;
  if (message.empty()) message = fmt::format("HTTP {}", response->status);
  return Error{CodeFor(code), fmt::format("cannot {}: {}", what, message), {}};
}

Result<std::string> LxdClient::CallAndWait(LxdRequest request, const std::string& what) {
  auto r = Call(std::move(request), what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  if (JsonString(*doc, "type") != "async") {
    const Value* m = JsonMember(*doc, "metadata");
    return m != nullptr ? Serialize(*m) : std::string("null");
  }
  const std::string op = JsonString(*doc, "operation");
  if (op.empty()) return Internal(fmt::format("cannot {}: async response without operation", what));
  return WaitOperation(op, what);
}

Result<std::string> LxdClient::WaitOperation(const std::string& op, const std::string& what) {
  // The wait is long-polled in slices so the transport's deadline never cuts it.
  for (;;) {
    auto w = Call(LxdRequest{"GET", fmt::format("{}/wait?timeout={}", op, wait_slice_s_), {}, {}},
                  what);
    if (!w) return w.error();
    auto wd = Parse(w->body, what);
    if (!wd) return wd.error();
    const Value* meta = JsonMember(*wd, "metadata");
    if (meta == nullptr || !meta->IsObject()) {
      return Internal(fmt::format("cannot {}: operation {} has no metadata", what, op));
    }
    const std::string status = JsonString(*meta, "status");
    if (status == "Success") {
      const Value* m = JsonMember(*meta, "metadata");
      return m != nullptr ? Serialize(*m) : std::string("null");
    }
    if (status == "Running" || status == "Pending") continue;
    std::string err = JsonString(*meta, "err");
    if (err.empty()) err = fmt::format("operation ended {}", status);
    ErrorCode code = ErrorCode::kInternal;
    if (err.find("already exists") != std::string::npos) code = ErrorCode::kAlreadyExists;
    if (err.find("not found") != std::string::npos) code = ErrorCode::kNotFound;
    return Error{code, fmt::format("cannot {}: {}", what, err), {}};
  }
}

Result<ServerInfo> LxdClient::Server() {
  auto r = Call(LxdRequest{"GET", "/1.0", {}, {}}, "ask LXD for its version");
  if (!r) return r.error();
  auto doc = Parse(r->body, "read LXD's server info");
  if (!doc) return doc.error();
  ServerInfo info;
  if (const Value* m = JsonMember(*doc, "metadata")) {
    info.config = Strings(*m, "config");
    if (const Value* env = JsonMember(*m, "environment")) {
      info.certificate = JsonString(*env, "certificate");
      info.version = JsonString(*env, "server_version");
      info.kernel = JsonString(*env, "kernel_version");
      if (const Value* drivers = JsonMember(*env, "storage_supported_drivers");
          drivers != nullptr && drivers->IsArray()) {
        for (const Value& d : drivers->GetArray()) {
          info.storage_drivers.push_back(JsonString(d, "Name"));
        }
      }
    }
  }
  return info;
}

Result<std::vector<Instance>> LxdClient::Instances() {
  auto r = Call(LxdRequest{"GET", "/1.0/instances?recursion=1", {}, {}}, "list instances");
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
  auto r = Call(LxdRequest{"GET", "/1.0/instances/" + Segment(name), {}, {}}, what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  const Value* m = JsonMember(*doc, "metadata");
  if (m == nullptr) return Internal(fmt::format("cannot {}: no metadata", what));
  Instance i = ParseInstance(*m);
  i.etag = r->etag;
  return i;
}

namespace {

// The body of POST /1.0/instances: `spec` with the source that `write_source` writes.
std::string CreateBody(const InstanceSpec& spec, const std::string& architecture,
                       const std::function<void(Writer&)>& write_source) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("name");
  WriteString(w, spec.name);
  w.Key("type");
  w.String("container");
  if (!architecture.empty()) {
    w.Key("architecture");
    WriteString(w, architecture);
  }
  w.Key("source");
  w.StartObject();
  write_source(w);
  w.EndObject();
  w.Key("profiles");
  WriteStrings(w, spec.profiles);
  w.Key("config");
  WriteMap(w, spec.config);
  w.Key("devices");
  WriteDevices(w, spec.devices);
  w.EndObject();
  return buf.GetString();
}

}  // namespace

Result<void> LxdClient::CreateInstance(const InstanceSpec& spec) {
  const std::string body = CreateBody(spec, "", [&spec](Writer& w) {
    w.Key("type");
    w.String("image");
    // 64 hex digits name an image by fingerprint; anything else is an alias.
    const bool fingerprint = spec.image.size() == 64 &&
                             spec.image.find_first_not_of("0123456789abcdef") == std::string::npos;
    w.Key(fingerprint ? "fingerprint" : "alias");
    WriteString(w, spec.image);
  });
  auto r = CallAndWait(LxdRequest{"POST", "/1.0/instances", {}, body},
                       fmt::format("create instance {}", spec.name));
  if (!r) return r.error();
  return {};
}

Result<MigrationSource> LxdClient::StartMigrationSource(const std::string& name) {
  const std::string what = fmt::format("start copying instance {} out", name);
  auto started = StartOperation(LxdRequest{"POST", "/1.0/instances/" + Segment(name), {},
                                           R"({"migration":true,"live":false,"instance_only":true})"},
                                what);
  if (!started) return started.error();
  MigrationSource source;
  source.operation = std::move(started->first);
  if (started->second.IsObject()) {
    for (const auto& e : started->second.GetObject()) {
      if (e.value.IsString()) source.secrets[e.name.GetString()] = e.value.GetString();
    }
  }
  if (source.secrets.empty()) {
    return Internal(fmt::format("cannot {}: LXD's answer has no secrets", what));
  }
  return source;
}

Result<std::pair<std::string, rapidjson::Document>> LxdClient::StartOperation(
    LxdRequest request, const std::string& what) {
  auto r = Call(std::move(request), what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  std::string operation = JsonString(*doc, "operation");
  const Value* op = JsonMember(*doc, "metadata");
  const Value* meta = op != nullptr ? JsonMember(*op, "metadata") : nullptr;
  if (operation.empty() || meta == nullptr) {
    return Internal(fmt::format("cannot {}: LXD's answer has no operation", what));
  }
  rapidjson::Document out;
  out.CopyFrom(*meta, out.GetAllocator());
  return std::make_pair(std::move(operation), std::move(out));
}

Result<void> LxdClient::CreateInstanceByMigration(const InstanceSpec& spec,
                                                  const std::string& architecture,
                                                  const MigrationPull& source) {
  const std::string body = CreateBody(spec, architecture, [&source](Writer& w) {
    w.Key("type");
    w.String("migration");
    w.Key("mode");
    w.String("pull");
    w.Key("operation");
    WriteString(w, source.operation_url);
    w.Key("certificate");
    WriteString(w, source.certificate);
    w.Key("secrets");
    WriteMap(w, source.secrets);
    w.Key("instance_only");
    w.Bool(true);
  });
  auto r = CallAndWait(LxdRequest{"POST", "/1.0/instances", {}, body},
                       fmt::format("copy instance {} from {}", spec.name, source.operation_url));
  if (!r) return r.error();
  return {};
}

Result<void> LxdClient::CancelOperation(const std::string& operation) {
  auto r = Call(LxdRequest{"DELETE", operation, {}, {}}, "cancel operation " + operation);
  if (!r) return r.error();
  return {};
}

Result<void> LxdClient::SetServerConfig(const StringMap& config) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("config");
  WriteMap(w, config);
  w.EndObject();
  auto r = Call(LxdRequest{"PATCH", "/1.0", {}, buf.GetString()}, "change LXD's server config");
  if (!r) return r.error();
  return {};
}

Result<std::vector<std::string>> LxdClient::TrustedCertificates() {
  const std::string what = "list the certificates LXD trusts";
  auto r = Call(LxdRequest{"GET", "/1.0/certificates?recursion=1", {}, {}}, what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  std::vector<std::string> out;
  const Value* m = JsonMember(*doc, "metadata");
  if (m != nullptr && m->IsArray()) {
    for (const Value& c : m->GetArray()) out.push_back(JsonString(c, "fingerprint"));
  }
  return out;
}

Result<void> LxdClient::TrustCertificate(const std::string& name, const std::string& pem) {
  // LXD takes the certificate as base64 DER: the PEM's body without its armour lines.
  std::string der64;
  std::istringstream lines(pem);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("-----", 0) != 0) der64 += line;
  }
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("type");
  w.String("client");
  w.Key("name");
  WriteString(w, name);
  w.Key("certificate");
  WriteString(w, der64);
  w.EndObject();
  auto r = CallAndWait(LxdRequest{"POST", "/1.0/certificates", {}, buf.GetString()},
                       fmt::format("trust certificate {}", name));
  if (!r) return r.error();
  return {};
}

Result<void> LxdClient::ChangeState(const std::string& name, const std::string& action, bool force,
                                    int timeout_s) {
  const std::string body = fmt::format(R"({{"action":"{}","timeout":{},"force":{}}})", action,
                                       timeout_s, force ? "true" : "false");
  auto r = CallAndWait(LxdRequest{"PUT", "/1.0/instances/" + Segment(name) + "/state", {}, body},
                       fmt::format("{} instance {}", action, name));
  if (!r) return r.error();
  return {};
}

Result<void> LxdClient::DeleteInstance(const std::string& name) {
  auto r = CallAndWait(LxdRequest{"DELETE", "/1.0/instances/" + Segment(name), {}, {}},
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
  auto r = CallAndWait(LxdRequest{"PATCH", "/1.0/instances/" + Segment(name), {}, buf.GetString()},
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
  auto r = CallAndWait(LxdRequest{"PATCH", "/1.0/instances/" + Segment(name), {}, buf.GetString()},
                       fmt::format("add {} device(s) to {}", devices.size(), name));
  if (!r) return r.error();
  return {};
}

Result<bool> LxdClient::EditInstance(
    const std::string& name, const std::string& what,
    const std::function<Result<bool>(Value&, rapidjson::Document::AllocatorType&)>& edit) {
  auto r = Call(LxdRequest{"GET", "/1.0/instances/" + Segment(name), {}, {}}, what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  auto m = doc->FindMember("metadata");
  if (m == doc->MemberEnd() || !m->value.IsObject()) {
    return Internal(fmt::format("cannot {}: no metadata", what));
  }
  auto changed = edit(m->value, doc->GetAllocator());
  if (!changed || !*changed) return changed;
  LxdRequest put{"PUT", "/1.0/instances/" + Segment(name), {}, Serialize(m->value)};
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
  auto r = Call(LxdRequest{"GET", "/1.0/instances/" + Segment(name) + "/state", {}, {}}, what);
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

namespace {

enum class ExecMode { kRecorded, kPiped, kInteractive };

// The body of POST /1.0/instances/NAME/exec: output recorded to logs, or stdio reached through
// websockets: pipes, or (kInteractive) a pty of `width` x `height`.
std::string ExecBody(const ExecSpec& spec, ExecMode mode, int width = 0, int height = 0) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("command");
  WriteStrings(w, spec.command);
  w.Key("environment");
  WriteMap(w, spec.environment);
  w.Key("wait-for-websocket");
  w.Bool(mode != ExecMode::kRecorded);
  w.Key("interactive");
  w.Bool(mode == ExecMode::kInteractive);
  w.Key("record-output");
  w.Bool(mode == ExecMode::kRecorded);
  if (mode == ExecMode::kInteractive) {
    w.Key("width");
    w.Int(width);
    w.Key("height");
    w.Int(height);
  }
  w.Key("user");
  w.Uint(spec.user);
  w.Key("group");
  w.Uint(spec.group);
  if (!spec.cwd.empty()) {
    w.Key("cwd");
    WriteString(w, spec.cwd);
  }
  w.EndObject();
  return buf.GetString();
}

}  // namespace

Result<ExecResult> LxdClient::Exec(const std::string& name, const ExecSpec& spec) {
  const std::string what = fmt::format("run a command in {}", name);
  auto meta = CallAndWait(LxdRequest{"POST", "/1.0/instances/" + Segment(name) + "/exec", {},
                                     ExecBody(spec, ExecMode::kRecorded)},
                          what);
  if (!meta) return meta.error();
  auto doc = Parse(*meta, what);
  if (!doc) return doc.error();
  ExecResult result;
  result.exit_code = static_cast<int>(Int(*doc, "return", -1));
  const StringMap output = Strings(*doc, "output");
  for (const auto& [fd, path] : output) {
    auto log = Call(LxdRequest{"GET", path, {}, {}}, what + " (read its output)");
    if (!log) return log.error();
    (fd == "1" ? result.out : result.err) = std::move(log->body);
    // The recorded output would otherwise pile up in the instance's log directory.
    (void)Call(LxdRequest{"DELETE", path, {}, {}}, what + " (delete its output)");
  }
  return result;
}

Result<WebsocketExec> LxdClient::StartInteractiveExec(const std::string& name,
                                                      const ExecSpec& spec, int width,
                                                      int height) {
  return StartWebsocketExec(name, ExecBody(spec, ExecMode::kInteractive, width, height),
                            fmt::format("start an interactive command in {}", name),
                            {"0", "control"});
}

Result<WebsocketExec> LxdClient::StartPipedExec(const std::string& name, const ExecSpec& spec) {
  return StartWebsocketExec(name, ExecBody(spec, ExecMode::kPiped),
                            fmt::format("start a command in {}", name),
                            {"0", "1", "2", "control"});
}

Result<WebsocketExec> LxdClient::StartWebsocketExec(const std::string& name, std::string body,
                                                    const std::string& what,
                                                    const std::vector<std::string>& fds) {
  auto started = StartOperation(
      LxdRequest{"POST", "/1.0/instances/" + Segment(name) + "/exec", {}, std::move(body)}, what);
  if (!started) return started.error();
  WebsocketExec e;
  e.operation = std::move(started->first);
  e.secrets = Strings(started->second, "fds");
  for (const auto& fd : fds) {
    if (auto it = e.secrets.find(fd); it == e.secrets.end() || it->second.empty()) {
      return Internal(fmt::format("cannot {}: LXD's answer lacks websocket {}'s secret", what, fd));
    }
  }
  return e;
}

Result<int> LxdClient::ExecExitCode(const std::string& operation) {
  auto meta = WaitOperation(operation, "wait for a command to end");
  if (!meta) return meta.error();
  auto doc = Parse(*meta, "read a command's exit code");
  if (!doc) return doc.error();
  return static_cast<int>(Int(*doc, "return", -1));
}

Result<std::vector<Image>> LxdClient::Images() {
  auto r = Call(LxdRequest{"GET", "/1.0/images?recursion=1", {}, {}}, "list images");
  if (!r) return r.error();
  auto doc = Parse(r->body, "list images");
  if (!doc) return doc.error();
  std::vector<Image> out;
  const Value* m = JsonMember(*doc, "metadata");
  if (m == nullptr || !m->IsArray()) return out;
  for (const Value& v : m->GetArray()) {
    Image i;
    i.fingerprint = JsonString(v, "fingerprint");
    i.properties = Strings(v, "properties");
    i.size = Int(v, "size");
    i.uploaded_at = JsonString(v, "uploaded_at");
    if (const Value* aliases = JsonMember(v, "aliases"); aliases != nullptr && aliases->IsArray()) {
      for (const Value& a : aliases->GetArray()) i.aliases.push_back(JsonString(a, "name"));
    }
    out.push_back(std::move(i));
  }
  return out;
}

Result<std::string> LxdClient::ImportImage(std::string tarball, const std::string& alias) {
  LxdRequest req{"POST", "/1.0/images", {}, std::move(tarball)};
  req.content_type = "application/octet-stream";
  auto meta = CallAndWait(std::move(req), "import an image");
  if (!meta) return meta.error();
  auto doc = Parse(*meta, "import an image");
  if (!doc) return doc.error();
  const std::string fingerprint = JsonString(*doc, "fingerprint");
  if (fingerprint.empty()) return Internal("LXD imported an image but gave no fingerprint");
  if (alias.empty()) return fingerprint;
  const std::string what = fmt::format("point alias {} at image {}", alias, fingerprint);
  auto existing = Call(LxdRequest{"GET", "/1.0/images/aliases/" + Segment(alias), {}, {}}, what);
  if (existing) {
    const std::string body = fmt::format(R"({{"target":"{}","description":""}})", fingerprint);
    auto put = Call(LxdRequest{"PUT", "/1.0/images/aliases/" + Segment(alias), {}, body}, what);
    if (!put) return put.error();
    return fingerprint;
  }
  if (existing.error().code != ErrorCode::kNotFound) return existing.error();
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("name");
  WriteString(w, alias);
  w.Key("target");
  WriteString(w, fingerprint);
  w.EndObject();
  auto post = Call(LxdRequest{"POST", "/1.0/images/aliases", {}, buf.GetString()}, what);
  if (!post) return post.error();
  return fingerprint;
}

Result<std::vector<StoragePool>> LxdClient::StoragePools() {
  auto r = Call(LxdRequest{"GET", "/1.0/storage-pools?recursion=1", {}, {}}, "list storage pools");
  if (!r) return r.error();
  auto doc = Parse(r->body, "list storage pools");
  if (!doc) return doc.error();
  std::vector<StoragePool> out;
  const Value* m = JsonMember(*doc, "metadata");
  if (m == nullptr || !m->IsArray()) return out;
  for (const Value& v : m->GetArray()) {
    out.push_back(StoragePool{JsonString(v, "name"), JsonString(v, "driver"), Strings(v, "config"),
                              JsonString(v, "status")});
  }
  return out;
}

Result<void> LxdClient::CreateStoragePool(const std::string& name, const std::string& driver,
                                          const StringMap& config) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("name");
  WriteString(w, name);
  w.Key("driver");
  WriteString(w, driver);
  w.Key("config");
  WriteMap(w, config);
  w.EndObject();
  auto r = CallAndWait(LxdRequest{"POST", "/1.0/storage-pools", {}, buf.GetString()},
                       fmt::format("create storage pool {} ({})", name, driver));
  if (!r) return r.error();
  return {};
}

Result<Profile> LxdClient::GetProfile(const std::string& name) {
  const std::string what = fmt::format("get profile {}", name);
  auto r = Call(LxdRequest{"GET", "/1.0/profiles/" + Segment(name), {}, {}}, what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  const Value* m = JsonMember(*doc, "metadata");
  if (m == nullptr) return Internal(fmt::format("cannot {}: no metadata", what));
  return ParseProfile(*m);
}

Result<void> LxdClient::PutProfile(const Profile& profile) {
  const std::string what = fmt::format("write profile {}", profile.name);
  auto existing = GetProfile(profile.name);
  if (!existing && existing.error().code != ErrorCode::kNotFound) return existing.error();
  auto r = existing
               ? Call(LxdRequest{"PUT", "/1.0/profiles/" + Segment(profile.name), {},
                                 ProfileBody(profile, false)},
                      what)
               : Call(LxdRequest{"POST", "/1.0/profiles", {}, ProfileBody(profile, true)}, what);
  if (!r) return r.error();
  return {};
}

}  // namespace bmas::lxd
