#pragma once

// A JSON object written with rapidjson's Writer: the small replies of the agent and the CLI.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <functional>
#include <string>

namespace bmas {

using JsonWriter = rapidjson::Writer<rapidjson::StringBuffer>;

// A JSON object whose members `body` writes.
inline std::string JsonObject(const std::function<void(JsonWriter&)>& body) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  w.StartObject();
  body(w);
  w.EndObject();
  return buf.GetString();
}

}  // namespace bmas
