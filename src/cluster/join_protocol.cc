#include "cluster/join_protocol.h"

#include <fmt/format.h>
#include <rapidjson/document.h>

#include <map>
#include <optional>
#include <set>

#include "cluster/cluster_ca.h"
#include "common/json_object.h"
#include "common/version.h"

namespace bmas::cluster {
namespace {

using Strings = std::map<std::string, std::string>;

// The members of a JSON object of strings, keyed by names that IsPeerHostName accepts.
Result<Strings> ReadHostStrings(const rapidjson::Value& v, std::string_view key,
                                std::string_view what) {
  if (!v.IsObject()) {
    return InvalidArgument(fmt::format("{} of a join {} is not an object", key, what),
                           std::string(key));
  }
  Strings out;
  for (const auto& m : v.GetObject()) {
    std::string host(m.name.GetString(), m.name.GetStringLength());
    if (!IsPeerHostName(host) || !m.value.IsString()) {
      return InvalidArgument(
          fmt::format("{} of a join {} holds an entry that is not a host name and a string", key,
                      what),
          std::string(key));
    }
    if (!out.emplace(host, std::string(m.value.GetString(), m.value.GetStringLength())).second) {
      return InvalidArgument(fmt::format("{} of a join {} repeats '{}'", key, what, host),
                             std::string(key));
    }
  }
  return out;
}

// The string members of a JSON object, each of `names` exactly once and nothing else; those of
// `object_names` are objects of strings keyed by host names, and come back in `*objects`.
// `what` names the message in errors. Values are never quoted in a message: one is a secret.
Result<Strings> ReadStrings(std::string_view body, size_t limit,
                            const std::set<std::string>& names, std::string_view what,
                            const std::set<std::string>& object_names = {},
                            std::map<std::string, Strings>* objects = nullptr) {
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
    if (object_names.count(key) != 0 && objects != nullptr) {
      auto inner = ReadHostStrings(m.value, key, what);
      if (!inner) return inner.error();
      if (!objects->emplace(key, std::move(*inner)).second) {
        return InvalidArgument(fmt::format("a join {} repeats '{}'", what, key), key);
      }
      continue;
    }
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
  for (const std::string& name : object_names) {
    if (objects == nullptr || objects->count(name) == 0) {
      return InvalidArgument(fmt::format("a join {} lacks '{}'", what, name), name);
    }
  }
  return out;
}

// The "protocol" and "bmas" members of a join message, read before its members are checked: a
// message of another protocol has other members, and the versions say more than which member is
// missing. A message without "protocol" is protocol 1. "" for what is not there or not a string.
struct Versions {
  int protocol = 1;
  std::string bmas;
};

// Whether `release` is a version (at most 32 of a version's characters): only such a release
// goes into a refusal, the controller's log or a node's notes, so that a peer cannot write a
// line of its own there.
bool IsPlainRelease(std::string_view release) {
  return !release.empty() && release.size() <= 32 &&
         release.find_first_not_of("0123456789abcdefghijklmnopqrstuvwxyz"
                                   "ABCDEFGHIJKLMNOPQRSTUVWXYZ.+~-") == std::string_view::npos;
}

// nullopt for what is not a JSON object: ReadStrings says so.
std::optional<Versions> PeekVersions(std::string_view body) {
  Versions v;
  rapidjson::Document d;
  d.Parse<rapidjson::kParseIterativeFlag>(body.data(), body.size());
  if (d.HasParseError() || !d.IsObject()) return std::nullopt;
  if (auto p = d.FindMember("protocol"); p != d.MemberEnd()) {
    v.protocol = 0;  // present but not a version: still a mismatch
    if (p->value.IsString()) {
      const std::string s(p->value.GetString(), p->value.GetStringLength());
      if (!s.empty() && s.size() < 6 && s.find_first_not_of("0123456789") == std::string::npos) {
        v.protocol = std::stoi(s);
      }
    }
  }
  if (auto b = d.FindMember("bmas"); b != d.MemberEnd() && b->value.IsString()) {
    std::string_view release(b->value.GetString(), b->value.GetStringLength());
    if (IsPlainRelease(release)) v.bmas = release;
  }
  return v;
}

std::string Release(const Versions& v) {
  if (!v.bmas.empty()) return "bmas " + v.bmas;
  return v.protocol == 1 ? "a bmas from before join protocol 2" : "an unknown bmas";
}

// InvalidArgument naming both sides' versions and the fix, or ok. `from_node`: the message is
// a node's request, read by the controller.
Result<void> CheckProtocol(std::string_view body, bool from_node) {
  const std::optional<Versions> peeked = PeekVersions(body);
  if (!peeked || peeked->protocol == kJoinProtocol) return {};
  const Versions& theirs = *peeked;
  const std::string ours = fmt::format("bmas {} (join protocol {})", kBmasVersion, kJoinProtocol);
  const std::string other = fmt::format("{} (join protocol {})", Release(theirs), theirs.protocol);
  const bool other_newer = theirs.protocol > kJoinProtocol;
  std::string message;
  if (from_node) {
    message = fmt::format("the node runs {} and this controller {}: {}", other, ours,
                          other_newer ? "upgrade the controller first"
                                      : "install the controller's bmas on the node");
  } else {
    message = fmt::format("the controller runs {} and this node {}: {}", other, ours,
                          other_newer ? "install the controller's bmas on this node"
                                      : "upgrade the controller first");
  }
  return Error{ErrorCode::kInvalidArgument,
               message + ", then join again (README: Upgrading bmas on a running cluster)",
               "protocol"};
}

void WriteVersions(JsonWriter& w) {
  Member(w, "protocol", std::to_string(kJoinProtocol));
  Member(w, "bmas", kBmasVersion);
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

void WritePeers(JsonWriter& w, const Strings& peers) {
  w.Key("lxd_peers");
  w.StartObject();
  for (const auto& [host, pem] : peers) Member(w, host, pem);
  w.EndObject();
}

}  // namespace

std::string FormatLxdPeersRequest(const std::string& host) {
  return JsonObject([&](JsonWriter& w) { Member(w, "host", host); });
}

Result<std::string> ParseLxdPeersRequest(std::string_view body) {
  auto m = ReadStrings(body, kMaxJoinRequestBytes, {"host"}, "peers request");
  if (!m) return m.error();
  if (!IsPeerHostName((*m)["host"])) {
    return InvalidArgument("a peers request names no host", "host");
  }
  return std::move((*m)["host"]);
}

std::string FormatLxdPeersReply(const Strings& peers) {
  return JsonObject([&](JsonWriter& w) { WritePeers(w, peers); });
}

Result<Strings> ParseLxdPeersReply(std::string_view body) {
  std::map<std::string, Strings> objects;
  auto m = ReadStrings(body, kMaxJoinReplyBytes, {}, "peers reply", {"lxd_peers"}, &objects);
  if (!m) return m.error();
  return std::move(objects["lxd_peers"]);
}

std::optional<std::string> ReleaseMismatch(std::string_view controller_release,
                                           std::string_view node_release) {
  if (controller_release.empty() || controller_release == node_release) return std::nullopt;
  return fmt::format(
      "the controller runs bmas {} and this node bmas {}: they speak the same join protocol, "
      "but every machine of the cluster should run one release; install the same bmas package "
      "on both",
      controller_release, node_release);
}

bool IsPeerHostName(std::string_view host) {
  if (host.empty() || host.size() > 253 || host.front() == '.') return false;
  for (char c : host) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '.';
    if (!ok) return false;
  }
  return true;
}

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
    WriteVersions(w);
    Member(w, "secret", Hex(request.secret));
    Member(w, "host", request.host);
    Member(w, "address", request.address);
    Member(w, "csr", request.csr_pem);
    Member(w, "replica_csr", request.replica_csr_pem);
  });
}

Result<JoinRequest> ParseJoinRequest(std::string_view body) {
  if (body.size() <= kMaxJoinRequestBytes) {
    if (auto ok = CheckProtocol(body, /*from_node=*/true); !ok) return ok.error();
  }
  auto m = ReadStrings(body, kMaxJoinRequestBytes,
                       {"protocol", "bmas", "secret", "host", "address", "csr", "replica_csr"},
                       "request");
  if (!m) return m.error();
  JoinRequest r;
  if (IsPlainRelease((*m)["bmas"])) r.bmas_version = std::move((*m)["bmas"]);
  auto secret = FromHex((*m)["secret"]);
  if (!secret || secret->empty()) {
    return InvalidArgument("the secret of a join request is not hex", "secret");
  }
  r.secret = std::move(*secret);
  r.host = std::move((*m)["host"]);
  r.address = std::move((*m)["address"]);
  r.csr_pem = std::move((*m)["csr"]);
  r.replica_csr_pem = std::move((*m)["replica_csr"]);
  if (r.host.empty()) return InvalidArgument("a join request names no host", "host");
  return r;
}

std::string FormatJoinReply(const JoinReply& reply) {
  return JsonObject([&](JsonWriter& w) {
    WriteVersions(w);
    Member(w, "node_cert", reply.node_cert_pem);
    Member(w, "ca_cert", reply.ca_cert_pem);
    Member(w, "replica_cert", reply.replica_cert_pem);
    Member(w, "munge_key", Hex(reply.munge_key));
    Member(w, "bmas_toml", reply.bmas_toml);
    Member(w, "prolog", reply.prolog);
    Member(w, "epilog", reply.epilog);
    Member(w, "operator_secret", reply.operator_secret);
    WritePeers(w, reply.lxd_peers);
  });
}

Result<JoinReply> ParseJoinReply(std::string_view body) {
  if (body.size() <= kMaxJoinReplyBytes) {
    if (auto ok = CheckProtocol(body, /*from_node=*/false); !ok) return ok.error();
  }
  std::map<std::string, Strings> objects;
  auto m = ReadStrings(body, kMaxJoinReplyBytes,
                       {"protocol", "bmas", "node_cert", "ca_cert", "replica_cert", "munge_key", "bmas_toml",
                        "prolog", "epilog", "operator_secret"},
                       "reply", {"lxd_peers"}, &objects);
  if (!m) return m.error();
  JoinReply r;
  if (IsPlainRelease((*m)["bmas"])) r.bmas_version = std::move((*m)["bmas"]);
  r.lxd_peers = std::move(objects["lxd_peers"]);
  auto key = FromHex((*m)["munge_key"]);
  if (!key || key->empty()) return InvalidArgument("the munge key of a join reply is not hex");
  r.munge_key = std::move(*key);
  r.node_cert_pem = std::move((*m)["node_cert"]);
  r.ca_cert_pem = std::move((*m)["ca_cert"]);
  r.replica_cert_pem = std::move((*m)["replica_cert"]);
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
