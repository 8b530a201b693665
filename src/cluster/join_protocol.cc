#include "cluster/join_protocol.h"

#include <fmt/format.h>
#include <rapidjson/document.h>

#include <map>
#include <set>

#include "cluster/cluster_ca.h"
#include "common/json_object.h"

namespace bmas::cluster {
namespace {

// The string members of a JSON object, each of `names` exactly once and nothing else.
// `what` names the message in errors. Values are never quoted in a message: one is a secret.
Result<std::map<std::string, std::string>> ReadStrings(std::string_view body, size_t limit,
                                                       const std::set<std::string>& names,
                                                       std::string_view what) {
  if (body.size() > limit) {
    return Error{
        ErrorCode::kTooLarge, fmt::format("a join {} is at most {} bytes", what, limit), {}};
  }
  rapidjson::Document d;
  d.Parse<rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag>(body.data(),
                                                                                  body.size());
  if (d.HasParseError() || !d.IsObject()) {
    return InvalidArgument(fmt::format("a join {} is a JSON object", what));
  }
  std::map<std::string, std::string> out;
  for (const auto& m : d.GetObject()) {
    std::string key(m.name.GetString(), m.name.GetStringLength());
    if (names.count(key) == 0) {
      return InvalidArgument(fmt::format("a join {} has no member '{}'", what, key), key);
    }
    if (!m.value.IsString()) {
      return InvalidArgument(fmt::format("{} of a join {} is not a string", key, what), key);
    }
    std::string value(m.value.GetString(), m.value.GetStringLength());
    if (!out.emplace(key, std::move(value)).second) {
      return InvalidArgument(fmt::format("a join {} repeats '{}'", what, key), key);
    }
  }
  for (const std::string& name : names) {
    if (out.count(name) == 0) {
      return InvalidArgument(fmt::format("a join {} lacks '{}'", what, name), name);
    }
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<std::string> FromHex(std::string_view hex) {
  if (hex.size() % 2 != 0) return InvalidArgument("an odd number of hex digits");
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = HexDigit(hex[i]);
    const int lo = HexDigit(hex[i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgument("not hex digits");
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

std::string FormatJoinRequest(const JoinRequest& request) {
  return JsonObject([&](JsonWriter& w) {
    Member(w, "secret", Hex(request.secret));
    Member(w, "host", request.host);
    Member(w, "address", request.address);
    Member(w, "csr", request.csr_pem);
  });
}

Result<JoinRequest> ParseJoinRequest(std::string_view body) {
  auto m = ReadStrings(body, kMaxJoinRequestBytes, {"secret", "host", "address", "csr"}, "request");
  if (!m) return m.error();
  JoinRequest r;
  auto secret = FromHex((*m)["secret"]);
  if (!secret || secret->empty()) {
    return InvalidArgument("the secret of a join request is not hex", "secret");
  }
  r.secret = std::move(*secret);
  r.host = std::move((*m)["host"]);
  r.address = std::move((*m)["address"]);
  r.csr_pem = std::move((*m)["csr"]);
  if (r.host.empty()) return InvalidArgument("a join request names no host", "host");
  return r;
}

std::string FormatJoinReply(const JoinReply& reply) {
  return JsonObject([&](JsonWriter& w) {
    Member(w, "node_cert", reply.node_cert_pem);
    Member(w, "ca_cert", reply.ca_cert_pem);
    Member(w, "munge_key", Hex(reply.munge_key));
    Member(w, "bmas_toml", reply.bmas_toml);
    Member(w, "prolog", reply.prolog);
    Member(w, "epilog", reply.epilog);
    Member(w, "operator_secret", reply.operator_secret);
  });
}

Result<JoinReply> ParseJoinReply(std::string_view body) {
  auto m =
      ReadStrings(body, kMaxJoinReplyBytes,
                  {"node_cert", "ca_cert", "munge_key", "bmas_toml", "prolog", "epilog",
                   "operator_secret"},
                  "reply");
  if (!m) return m.error();
  JoinReply r;
  auto key = FromHex((*m)["munge_key"]);
  if (!key || key->empty()) return InvalidArgument("the munge key of a join reply is not hex");
  r.munge_key = std::move(*key);
  r.node_cert_pem = std::move((*m)["node_cert"]);
  r.ca_cert_pem = std::move((*m)["ca_cert"]);
  r.bmas_toml = std::move((*m)["bmas_toml"]);
  r.prolog = std::move((*m)["prolog"]);
  r.epilog = std::move((*m)["epilog"]);
  r.operator_secret = std::move((*m)["operator_secret"]);
  if (r.operator_secret.empty() || !FromHex(r.operator_secret)) {
    return InvalidArgument("the operator secret of a join reply is not hex");
  }
  return r;
}

}  // namespace bmas::cluster
