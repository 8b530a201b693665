#pragma once

// Reading the agent's JSON replies back (usage_view.cc, idle_view.cc): a member of the type
// expected, or false when it is missing or of another type. For those .cc files only.

#include <rapidjson/document.h>

#include <cstdint>
#include <string>

namespace bmas::reply {

inline bool Int(const rapidjson::Value& o, const char* key, int64_t* out) {
  if (!o.HasMember(key) || !o[key].IsInt64()) return false;
  *out = o[key].GetInt64();
  return true;
}

inline bool Text(const rapidjson::Value& o, const char* key, std::string* out) {
  if (!o.HasMember(key) || !o[key].IsString()) return false;
  *out = std::string(o[key].GetString(), o[key].GetStringLength());
  return true;
}

}  // namespace bmas::reply
