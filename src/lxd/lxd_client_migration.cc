// LxdClient's copies between LXD servers (without CRIU): the source's migration operation and
// the target's instance made by pulling from it.

#include "lxd/lxd_client.h"

#include <fmt/format.h>

#include "common/json_object.h"
#include "common/json_read.h"
#include "lxd/lxd_client_internal.h"

namespace bmas::lxd {

using rapidjson::Value;
using internal::CreateBody;
using internal::Segment;
using internal::Writer;
using internal::WriteMap;
using internal::WriteString;

Result<MigrationSource> LxdClient::StartMigrationSource(const std::string& name) {
  const std::string what = fmt::format("start copying instance {} out", name);
  auto started = StartOperation(ClientRequest{"POST", "/1.0/instances/" + Segment(name), {},
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

Result<void> LxdClient::CreateInstanceByMigration(const InstanceSpec& spec,
                                                  const std::string& architecture,
                                                  const MigrationPull& source) {
  const std::string body = CreateBody(spec, architecture, [&source](Writer& w) {
    Member(w, "type", "migration");
    Member(w, "mode", "pull");
    w.Key("operation");
    WriteString(w, source.operation_url);
    w.Key("certificate");
    WriteString(w, source.certificate);
    w.Key("secrets");
    WriteMap(w, source.secrets);
    Member(w, "instance_only", true);
  });
  auto r = CallAndWait(ClientRequest{"POST", "/1.0/instances", {}, body},
                       fmt::format("copy instance {} from {}", spec.name, source.operation_url));
  if (!r) return r.error();
  return {};
}

}  // namespace bmas::lxd
