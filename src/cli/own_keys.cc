#include "cli/own_keys.h"

#include <fmt/format.h>
#include <rapidjson/document.h>

#include <algorithm>

#include "common/json_object.h"


namespace bmas {
Result<std::string> AnswerOwnKeys(Store& store, const std::string& user,
                                  const std::string& action, const std::string& key_id,
                                  int64_t now) {
  auto keys = store.ListKeys(user);
  if (!keys) {
    if (keys.error().code != ErrorCode::kNotFound) return keys.error();
    return Error{ErrorCode::kNotFound,
                 fmt::format("{} is not a gateway user: ask your admin to `bmas user add {}`",
                             user, user)};
  }
  const auto active = [](const KeyInfo& k) { return !k.revoked_at.has_value(); };
  if (action == "list") {
    return JsonObject([&](JsonWriter& w) {
      w.Key("keys");
      w.StartArray();
      for (const KeyInfo& k : *keys) {
        w.StartObject();
        Member(w, "id", k.id);
        Member(w, "created_at", k.created_at);
        w.Key("revoked_at");
        if (k.revoked_at) w.Int64(*k.revoked_at); else w.Null();
        w.EndObject();
      }
      w.EndArray();
    });
  }
  if (action == "create") {
    if (static_cast<size_t>(std::count_if(keys->begin(), keys->end(), active)) >= kMaxOwnKeys) {
      return Error{ErrorCode::kPermissionDenied,
                   fmt::format("you hold {} active keys, the most you may: revoke one first "
                               "(`bmas key list`, then `bmas key revoke ID`)",
                               kMaxOwnKeys)};
    }
    const auto today = [&](const KeyInfo& k) { return k.created_at > now - 24 * 3600; };
    if (static_cast<size_t>(std::count_if(keys->begin(), keys->end(), today)) >=
        kMaxOwnKeysPerDay) {
      return Error{ErrorCode::kPermissionDenied,
                   fmt::format("you created {} keys in the last 24 hours, the most you may: use "
                               "one you hold (`bmas key list`), or ask your admin",
                               kMaxOwnKeysPerDay)};
    }
    auto key = store.CreateKey(user);
    if (!key) return key.error();
    return JsonObject([&](JsonWriter& w) {
      Member(w, "key", key->c_str());
    });
  }
  if (action == "revoke") {
    const bool mine = std::any_of(keys->begin(), keys->end(), [&](const KeyInfo& k) {
      return k.id == key_id && active(k);
    });
    if (!mine) {
      return Error{ErrorCode::kNotFound,
                   fmt::format("you have no active key with id '{}' (see `bmas key list`)",
                               key_id)};
    }
    if (auto r = store.RevokeKey(key_id); !r) return r.error();
    return JsonObject([&](JsonWriter& w) {
      Member(w, "revoked", key_id);
    });
  }
  return InvalidArgument(fmt::format("unknown key action '{}' (list, create or revoke)", action));
}

Result<std::vector<KeyInfo>> ParseOwnKeys(std::string_view reply) {
  rapidjson::Document d;
  d.Parse(reply.data(), reply.size());
  if (d.HasParseError() || !d.IsObject() || !d.HasMember("keys") || !d["keys"].IsArray()) {
    return InvalidArgument("the agent's answer is not a list of keys");
  }
  std::vector<KeyInfo> out;
  for (const auto& k : d["keys"].GetArray()) {
    if (!k.IsObject() || !k.HasMember("id") || !k["id"].IsString() ||
        !k.HasMember("created_at") || !k["created_at"].IsInt64() || !k.HasMember("revoked_at")) {
      return InvalidArgument("the agent's answer holds a malformed key");
    }
    KeyInfo info;
    info.id = k["id"].GetString();
    info.created_at = k["created_at"].GetInt64();
    if (k["revoked_at"].IsInt64()) info.revoked_at = k["revoked_at"].GetInt64();
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace bmas
