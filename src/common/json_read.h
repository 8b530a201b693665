#pragma once

// Reading members of parsed JSON (RapidJSON) that may be missing or of another type. The JSON
// comes from daemons bmas does not control (LXD, slurmrestd), so a member that is not there or
// not what was expected reads as "nothing" instead of tripping RapidJSON's asserts.

#include <rapidjson/document.h>

#include <string>
#include <vector>

namespace bmas {

// The member `key` of `v`, or nullptr when `v` is not an object or has no such member.
const rapidjson::Value* JsonMember(const rapidjson::Value& v, const char* key);

// The string member `key` of `v` (embedded NULs kept), or "" when it is missing or not a string.
std::string JsonString(const rapidjson::Value& v, const char* key);

// The string elements of the array member `key` of `v` (embedded NULs kept; elements that are
// not strings skipped), or none when it is missing or not an array.
std::vector<std::string> JsonStringList(const rapidjson::Value& v, const char* key);

}  // namespace bmas
