// LxdClient's server-wide resources: server info and config, trusted client certificates,
// images and their aliases, storage pools and profiles.

#include "lxd/lxd_client.h"

#include <fmt/format.h>

#include <sstream>

#include "common/json_object.h"
#include "common/json_read.h"
#include "lxd/lxd_client_internal.h"

namespace bmas::lxd {

using rapidjson::Value;
using internal::Devices;
using internal::Int;
using internal::Parse;
using internal::Segment;
using internal::Strings;
using internal::Writer;
using internal::WriteConfigAndDevices;
using internal::WriteMap;
using internal::WriteString;

namespace {

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
  WriteConfigAndDevices(w, p.config, p.devices);
  w.EndObject();
  return buf.GetString();
}

}  // namespace

Result<ServerInfo> LxdClient::Server() {
  auto r = Call(ClientRequest{"GET", "/1.0", {}, {}}, "ask LXD for its version");
  if (!r) return r.error();
  auto doc = Parse(r->body, "read LXD's server info");
  if (!doc) return doc.error();
  ServerInfo info;
  if (const Value* m = JsonMember(*doc, "metadata")) {
    info.config = Strings(*m, "config");
    info.auth = JsonString(*m, "auth");
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

Result<void> LxdClient::SetServerConfig(const StringMap& config) {
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  w.Key("config");
  WriteMap(w, config);
  w.EndObject();
  auto r = Call(ClientRequest{"PATCH", "/1.0", {}, buf.GetString()}, "change LXD's server config");
  if (!r) return r.error();
  return {};
}

Result<std::vector<TrustedCertificate>> LxdClient::TrustedCertificates() {
  const std::string what = "list the certificates LXD trusts";
  auto r = Call(ClientRequest{"GET", "/1.0/certificates?recursion=1", {}, {}}, what);
  if (!r) return r.error();
  auto doc = Parse(r->body, what);
  if (!doc) return doc.error();
  std::vector<TrustedCertificate> out;
  const Value* m = JsonMember(*doc, "metadata");
  if (m != nullptr && m->IsArray()) {
    for (const Value& c : m->GetArray()) {
      TrustedCertificate t{JsonString(c, "name"), JsonString(c, "fingerprint"), false, {}};
      if (const Value* r = JsonMember(c, "restricted"); r != nullptr && r->IsBool()) {
        t.restricted = r->GetBool();
      }
      if (const Value* p = JsonMember(c, "projects"); p != nullptr && p->IsArray()) {
        for (const Value& project : p->GetArray()) {
          if (project.IsString()) t.projects.emplace_back(project.GetString());
        }
      }
      out.push_back(std::move(t));
    }
  }
  return out;
}

Result<void> LxdClient::TrustCertificate(const std::string& name, const std::string& pem,
                                         const std::vector<std::string>& projects) {
  // LXD takes the certificate as base64 DER: the PEM's body without its armour lines.
  std::string der64;
  std::istringstream lines(pem);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("-----", 0) != 0) der64 += line;
  }
  rapidjson::StringBuffer buf;
  Writer w(buf);
  w.StartObject();
  Member(w, "type", "client");
  w.Key("name");
  WriteString(w, name);
  w.Key("certificate");
  WriteString(w, der64);
  if (!projects.empty()) {
    Member(w, "restricted", true);
    w.Key("projects");
    w.StartArray();
    for (const std::string& p : projects) WriteString(w, p);
    w.EndArray();
  }
  w.EndObject();
  auto r = CallAndWait(ClientRequest{"POST", "/1.0/certificates", {}, buf.GetString()},
                       fmt::format("trust certificate {}", name));
  if (!r) return r.error();
  return {};
}

Result<void> LxdClient::RemoveTrustedCertificate(const std::string& fingerprint) {
  auto r = Call(ClientRequest{"DELETE", "/1.0/certificates/" + Segment(fingerprint), {}, {}},
                fmt::format("stop trusting certificate {}", fingerprint.substr(0, 12)));
  if (!r) return r.error();
  return {};
}

Result<std::vector<Image>> LxdClient::Images() {
  auto r = Call(ClientRequest{"GET", "/1.0/images?recursion=1", {}, {}}, "list images");
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
  ClientRequest req{"POST", "/1.0/images", {}, std::move(tarball)};
  req.content_type = "application/octet-stream";
  auto meta = CallAndWait(std::move(req), "import an image");
  if (!meta) return meta.error();
  auto doc = Parse(*meta, "import an image");
  if (!doc) return doc.error();
  const std::string fingerprint = JsonString(*doc, "fingerprint");
  if (fingerprint.empty()) return Internal("LXD imported an image but gave no fingerprint");
  if (alias.empty()) return fingerprint;
  const std::string what = fmt::format("point alias {} at image {}", alias, fingerprint);
  auto existing = Call(ClientRequest{"GET", "/1.0/images/aliases/" + Segment(alias), {}, {}}, what);
  if (existing) {
    const std::string body = fmt::format(R"({{"target":"{}","description":""}})", fingerprint);
    auto put = Call(ClientRequest{"PUT", "/1.0/images/aliases/" + Segment(alias), {}, body}, what);
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
  auto post = Call(ClientRequest{"POST", "/1.0/images/aliases", {}, buf.GetString()}, what);
  if (!post) return post.error();
  return fingerprint;
}

Result<std::vector<StoragePool>> LxdClient::StoragePools() {
  auto r = Call(ClientRequest{"GET", "/1.0/storage-pools?recursion=1", {}, {}}, "list storage pools");
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
  auto r = CallAndWait(ClientRequest{"POST", "/1.0/storage-pools", {}, buf.GetString()},
                       fmt::format("create storage pool {} ({})", name, driver));
  if (!r) return r.error();
  return {};
}

Result<Profile> LxdClient::GetProfile(const std::string& name) {
  const std::string what = fmt::format("get profile {}", name);
  auto r = Call(ClientRequest{"GET", "/1.0/profiles/" + Segment(name), {}, {}}, what);
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
               ? Call(ClientRequest{"PUT", "/1.0/profiles/" + Segment(profile.name), {},
                                 ProfileBody(profile, false)},
                      what)
               : Call(ClientRequest{"POST", "/1.0/profiles", {}, ProfileBody(profile, true)}, what);
  if (!r) return r.error();
  return {};
}

}  // namespace bmas::lxd
