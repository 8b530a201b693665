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

std::vector<std::string> JsonStringList(const rapidjson::Value& v, const char* key) {
  std::vector<std::string> out;
  const rapidjson::Value* m = JsonMember(v, key);
  if (m == nullptr || !m->IsArray()) return out;
  for (const rapidjson::Value& e : m->GetArray()) {
    if (e.IsString()) out.emplace_back(e.GetString(), e.GetStringLength());
  }
  return out;
}

}  // namespace bmas
