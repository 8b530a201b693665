#pragma once

// A JSON object written with rapidjson's Writer: the small replies of the agent and the CLI.

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

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
// their length is kept), bool as true or false, integers as integers, nullopt as null.
// Floating point is left to the caller (w.Key, then w.Double or a rounding helper): how it
// prints is theirs to choose.
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

// An optional value: its value as above, or null when it has none.
template <typename W, typename T>
void Member(W& w, std::string_view key, const std::optional<T>& value) {
  if (value) {
    Member(w, key, *value);
  } else {
    w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
    w.Null();
  }
}

// Members whose values nest: an object, an array of objects, an array of strings. The loops
// and Start/End pairs every such member needs, written once.

// "key": {…}: `members()` writes the inner object's members.
template <typename W, typename F>
void ObjectMember(W& w, std::string_view key, F&& members) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
  w.StartObject();
  members();
  w.EndObject();
}

// [{…}, …]: one object per item of `items`, whose members `members(item)` writes.
template <typename W, typename R, typename F>
void ObjectArray(W& w, R&& items, F&& members) {
  w.StartArray();
  for (auto&& item : items) {
    w.StartObject();
    members(item);
    w.EndObject();
  }
  w.EndArray();
}

// "key": [{…}, …]: the same as a member.
template <typename W, typename R, typename F>
void ObjectsMember(W& w, std::string_view key, R&& items, F&& members) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
  ObjectArray(w, std::forward<R>(items), std::forward<F>(members));
}

// "key": [{…}, …] of only the items for which `keep(item)` holds. (A loop, not
// std::views::filter: clang 14, which builds the fuzzers, cannot compile libstdc++ 12's views.)
template <typename W, typename R, typename P, typename F>
void ObjectsMemberWhere(W& w, std::string_view key, const R& items, P&& keep, F&& members) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
  w.StartArray();
  for (const auto& item : items) {
    if (!keep(item)) continue;
    w.StartObject();
    members(item);
    w.EndObject();
  }
  w.EndArray();
}

// "key": ["…", …].
template <typename W, typename R>
void StringsMember(W& w, std::string_view key, const R& strings) {
  w.Key(key.data(), static_cast<rapidjson::SizeType>(key.size()));
  w.StartArray();
  for (const auto& s : strings) w.String(s.data(), static_cast<rapidjson::SizeType>(s.size()));
  w.EndArray();
}

// A whole document that is an array of objects: ObjectArray's text.
template <typename R, typename F>
std::string JsonObjectArray(R&& items, F&& members) {
  rapidjson::StringBuffer buf;
  JsonWriter w(buf);
  ObjectArray(w, std::forward<R>(items), [&](const auto& item) { members(w, item); });
  return std::string(buf.GetString(), buf.GetSize());
}

}  // namespace bmas
