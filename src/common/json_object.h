#pragma once

// A JSON object written with rapidjson's Writer: the small replies of the agent and the CLI.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <concepts>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

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

// One member of the object `w` is writing: "key": value. Strings as strings (not NUL-ended:
// their length is kept), bool as true or false, integers as integers. Floating point is left
// to the caller (w.Key, then w.Double or a rounding helper): how it prints is theirs to choose.
template <typename W>
void Member(W& w, std::string_view key, std::string_view value) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}
template <typename W>
void Member(W& w, std::string_view key, const std::string& value) {
  Member(w, key, std::string_view(value));
}
template <typename W>
void Member(W& w, std::string_view key, const char* value) {
  Member(w, key, std::string_view(value));
}
template <typename W, typename T>
  requires std::same_as<T, bool>
void Member(W& w, std::string_view key, T value) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
  w.Bool(value);
}
template <typename W, std::integral T>
  requires(!std::same_as<T, bool>)
void Member(W& w, std::string_view key, T value) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
  if constexpr (std::is_signed_v<T>) {
    w.Int64(static_cast<int64_t>(value));
  } else {
    w.Uint64(static_cast<uint64_t>(value));
  }
}

}  // namespace bmas
