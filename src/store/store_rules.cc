#include "store/store_rules.h"

#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <fmt/format.h>
#include <rapidjson/document.h>

#include "common/json_object.h"
#include "common/json_read.h"

namespace bmas::store_rules {
namespace {

constexpr std::string_view kKeyPrefix = "sk-bmas-";
constexpr size_t kKeyIdHex = 12;
constexpr size_t kSecretHex = 48;

std::string RandomHex(size_t hex_chars) {
  std::string bytes((hex_chars + 1) / 2, '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string hex;
  for (unsigned char c : bytes) hex += fmt::format("{:02x}", c);
  hex.resize(hex_chars);
  return hex;
}

Digest Sha256(std::string_view data) {
  Digest digest{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest.data(), &len, EVP_sha256(), nullptr);
  return digest;
}

}  // namespace

Result<void> CheckUserName(const std::string& name) {
  if (IsValidUserName(name)) return {};
  return InvalidArgument(
      fmt::format("'{}' is not a valid user name: use a Unix account name (a lowercase letter or "
                  "_, then lowercase letters, digits, _ or -, at most 32)",
                  name),
      "name");
}

Result<void> CheckLimits(const UserLimits& l) {
  if (!(l.weight > 0 && l.weight <= 1e6)) {
    return InvalidArgument(fmt::format("weight must be above 0 (got {})", l.weight), "weight");
  }
  for (const auto& limit : {l.rpm, l.tpm, l.tokens_per_day, l.max_concurrent}) {
    if (limit && *limit < 0) {
      return InvalidArgument(fmt::format("limits cannot be negative (got {})", *limit));
    }
  }
  if (std::string why = CheckWorkspaceLimits(l.workspace); !why.empty()) {
    return InvalidArgument(why);
  }
  return {};
}

Result<UserLimits> ApplyChange(UserLimits l, const UserChange& c) {
  if (c.weight) l.weight = *c.weight;
  if (c.rpm) l.rpm = c.rpm;
  if (c.tpm) l.tpm = c.tpm;
  if (c.tokens_per_day) l.tokens_per_day = c.tokens_per_day;
  if (c.max_concurrent) l.max_concurrent = c.max_concurrent;
  WorkspaceLimits& w = l.workspace;
  if (c.workspace.cpus) w.cpus = c.workspace.cpus;
  if (c.workspace.memory) w.memory = c.workspace.memory;
  if (c.workspace.processes) w.processes = c.workspace.processes;
  if (c.workspace.disk) w.disk = c.workspace.disk;
  for (const std::string& field : c.clear) {
    if (field == "rpm") l.rpm.reset();
    else if (field == "tpm") l.tpm.reset();
    else if (field == "tokens_per_day") l.tokens_per_day.reset();
    else if (field == "max_concurrent") l.max_concurrent.reset();
    else if (field == "cpus") w.cpus.reset();
    else if (field == "memory") w.memory.reset();
    else if (field == "processes") w.processes.reset();
    else if (field == "disk") w.disk.reset();
    else return InvalidArgument(fmt::format("'{}' is not a limit that can be cleared", field));
  }
  if (auto r = CheckLimits(l); !r) return r.error();
  return l;
}

Result<UserLimits> ChangedLimits(Store& store, const std::string& name, const UserChange& change) {
  auto found = store.FindUser(name);
  if (!found) return found.error();
  if (!*found) return NoSuchUser(name);
  return ApplyChange((*found)->limits, change);
}

Result<void> RequireUser(Store& store, const std::string& name) {
  auto found = store.FindUser(name);
  if (!found) return found.error();
  if (!*found) return NoSuchUser(name);
  return {};
}

Reservation Admit(const UserLimits& l, const ReservationTotals& t, int64_t tokens) {
  if (l.rpm && t.requests_minute + 1 > *l.rpm) return {false, "rpm"};
  if (l.tpm && t.tokens_minute + tokens > *l.tpm) return {false, "tpm"};
  if (l.tokens_per_day && t.tokens_day + tokens > *l.tokens_per_day) {
    return {false, "tokens_per_day"};
  }
  if (l.max_concurrent && t.in_flight + 1 > *l.max_concurrent) return {false, "max_concurrent"};
  return {true, ""};
}

Error NoSuchReservation(const std::string& request_id) {
  return NotFound(fmt::format("no reservation for request '{}'", request_id), "request_id");
}

NewKey MintKey() {
  NewKey k;
  k.id = RandomHex(kKeyIdHex);
  const std::string secret = RandomHex(kSecretHex);
  k.digest = Sha256(secret);
  k.key = fmt::format("{}{}-{}", kKeyPrefix, k.id, secret);
  return k;
}

std::optional<PresentedKey> ParseKey(std::string_view k) {
  if (k.substr(0, kKeyPrefix.size()) != kKeyPrefix) return std::nullopt;
  k.remove_prefix(kKeyPrefix.size());
  if (k.size() != kKeyIdHex + 1 + kSecretHex || k[kKeyIdHex] != '-') return std::nullopt;
  return PresentedKey{std::string(k.substr(0, kKeyIdHex)), Sha256(k.substr(kKeyIdHex + 1))};
}

bool SameDigest(std::string_view kept, const Digest& presented) {
  return kept.size() == presented.size() &&
         CRYPTO_memcmp(kept.data(), presented.data(), presented.size()) == 0;
}

Error UserExists(const std::string& name) {
  return Error{ErrorCode::kAlreadyExists, fmt::format("user '{}' already exists", name)};
}

Error NoSuchUser(const std::string& name) {
  return Error{ErrorCode::kNotFound,
               fmt::format("no user '{}' (add it with `bmas user add {}`)", name, name), "name"};
}

Error NoSuchKey(const std::string& key_id) {
  return Error{ErrorCode::kNotFound,
               fmt::format("no active key with id '{}' (see `bmas key list USER`)", key_id), "id"};
}

Error BackendListed(const std::string& url) {
  return Error{ErrorCode::kAlreadyExists, fmt::format("backend {} is already listed", url)};
}

Error NoSuchBackend(const std::string& url) {
  return Error{ErrorCode::kNotFound,
               fmt::format("no backend {} (see `bmas gateway backend list`)", url)};
}

Error NoSuchDeployment(const std::string& model) {
  return Error{ErrorCode::kNotFound,
               fmt::format("no deployment of model '{}' (see `bmas inference list`)", model),
               "model"};
}

std::string TimetableJson(const std::vector<TimetableFloor>& timetable) {
  return JsonObjectArray(timetable, [](JsonWriter& w, const TimetableFloor& f) {
    Member(w, "days", f.days);
    Member(w, "from", f.from_minute);
    Member(w, "to", f.to_minute);
    Member(w, "min", f.min);
  });
}

std::vector<TimetableFloor> ParseTimetableJson(const std::string& text) {
  rapidjson::Document doc;
  std::vector<TimetableFloor> out;
  if (doc.Parse(text.c_str()).HasParseError() || !doc.IsArray()) return out;
  for (const rapidjson::Value& v : doc.GetArray()) {
    auto member = [&v](const char* key) {
      const rapidjson::Value* m = JsonMember(v, key);
      return m != nullptr && m->IsInt() ? m->GetInt() : 0;
    };
    out.push_back({static_cast<unsigned>(member("days")), member("from"), member("to"),
                   member("min")});
  }
  return out;
}

}  // namespace bmas::store_rules
