#include "common/json_read.h"

namespace bmas {

const rapidjson::Value* JsonMember(const rapidjson::Value& v, const char* key) {
  if (!v.IsObject()) return nullptr;
  const auto it = v.FindMember(key);
  return it == v.MemberEnd() ? nullptr : &it->value;
}

std::string JsonString(const rapidjson::Value& v, const char* key) {
  const rapidjson::Value* m = JsonMember(v, key);
  return m != nullptr && m->IsString() ? std::string(m->GetString(), m->GetStringLength())
                                       : std::string();
}

}  // namespace bmas
