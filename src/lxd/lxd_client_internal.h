#pragma once

// Internal to LxdClient: the JSON reading and writing that its files (lxd_client*.cc) share.
// Callers of the client see the structs of lxd_types.h, never JSON.

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/result.h"
#include "lxd/lxd_types.h"

namespace bmas::lxd::internal {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

// ---- JSON reading: a member that is missing or of another type reads as `fallback` or empty.

// An integer member, also when LXD writes it as a string ("1024").
int64_t Int(const rapidjson::Value& v, const char* key, int64_t fallback = 0);
// An object member of strings; members that are not strings are skipped.
StringMap Strings(const rapidjson::Value& v, const char* key);
// The "devices" member: device name to its settings.
std::map<std::string, StringMap> Devices(const rapidjson::Value& v);
// `text` as a JSON object; an Error naming `what` when it is not one.
Result<rapidjson::Document> Parse(const std::string& text, const std::string& what);
std::string Serialize(const rapidjson::Value& v);
Instance ParseInstance(const rapidjson::Value& v);

// ---- JSON writing

void WriteString(Writer& w, const std::string& s);
void WriteMap(Writer& w, const StringMap& m);
void WriteDevices(Writer& w, const std::map<std::string, StringMap>& devices);
void WriteStrings(Writer& w, const std::vector<std::string>& list);
// The "config" and "devices" members an instance and a profile both have.
void WriteConfigAndDevices(Writer& w, const StringMap& config,
                           const std::map<std::string, StringMap>& devices);

// The body of POST /1.0/instances: `spec` with the source that `write_source` writes.
std::string CreateBody(const InstanceSpec& spec, const std::string& architecture,
                       const std::function<void(Writer&)>& write_source);

// Escapes a path segment (instance and device names are plain; this guards the rest).
std::string Segment(const std::string& s);

}  // namespace bmas::lxd::internal
