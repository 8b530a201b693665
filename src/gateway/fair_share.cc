#include "gateway/fair_share.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <limits>
#include <cmath>
#include <set>

namespace bmas::gateway {

namespace {

constexpr std::string_view kHeader = "fair1";

std::string Escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c == '%') {
      out += "%25";
    } else if (c == '\t') {
      out += "%09";
    } else if (c == '\n') {
      out += "%0A";
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::string> Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const std::string_view code = s.substr(i + 1, 2);
    if (code == "25") {
      out += '%';
    } else if (code == "09") {
      out += '\t';
    } else if (code == "0A") {
      out += '\n';
    } else {
      return std::nullopt;
    }
    i += 2;
  }
  return out;
}

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

template <class T>
std::optional<T> Number(std::string_view s) {
  T value{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

bool Serves(const std::vector<std::string>& models, const std::string& model) {
  return std::find(models.begin(), models.end(), model) != models.end();
}

}  // namespace

std::string EncodeFairReport(const FairReport& report) {
  std::string out(kHeader);
  out += '\n';
  for (const auto& u : report.users) {
    out += fmt::format("u\t{}\t{}\t{}\t{}\t{}\n", Escape(u.model), Escape(u.user), u.weight,
                       u.queued, u.charged);
  }
  for (const auto& b : report.backends) {
    out += fmt::format("b\t{}\t{}\n", Escape(b.backend), b.in_flight);
  }
  return out;
}

std::optional<FairReport> DecodeFairReport(std::string_view body) {
  std::vector<std::string_view> lines = Split(body, '\n');
  if (lines.empty() || lines[0] != kHeader) return std::nullopt;
  FairReport report;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    std::vector<std::string_view> f = Split(lines[i], '\t');
    if (f[0] == "u" && f.size() == 6) {
      auto model = Unescape(f[1]);
      auto user = Unescape(f[2]);
      auto weight = Number<double>(f[3]);
      auto queued = Number<int64_t>(f[4]);
      auto charged = Number<int64_t>(f[5]);
      if (!model || !user || !weight || !queued || !charged) return std::nullopt;
      report.users.push_back(FairReport::User{std::move(*model), std::move(*user), *weight,
                                              *queued, *charged});
    } else if (f[0] == "b" && f.size() == 3) {
      auto backend = Unescape(f[1]);
      auto in_flight = Number<int64_t>(f[2]);
      if (!backend || !in_flight) return std::nullopt;
      report.backends.push_back(FairReport::Backend{std::move(*backend), *in_flight});
    } else {
      return std::nullopt;
    }
  }
  return report;
}

FairShare::FairShare(std::string self, double stale_after_s)
    : self_(std::move(self)), stale_after_s_(stale_after_s) {}

std::vector<RemoteCharge> FairShare::Update(const std::vector<GatewayReport>& reports,
                                            double now) {
  std::vector<RemoteCharge> charges;
  std::set<std::string> present;
  for (const GatewayReport& r : reports) {
    present.insert(r.gateway);
    auto [it, first] = seen_.try_emplace(r.gateway);
    Seen& s = it->second;
    if (first || r.at_ms != s.at_ms) {
      s.at_ms = r.at_ms;
      // A report seen for the first time may be a stopped gateway's: it counts once it changes.
      s.changed_at = first ? -std::numeric_limits<double>::infinity() : now;
      const bool had_report = s.report.has_value();
      s.report = DecodeFairReport(r.body);
      if (s.report) {
        std::map<std::pair<std::string, std::string>, int64_t> charged;
        for (const auto& u : s.report->users) {
          auto key = std::make_pair(u.model, u.user);
          if (r.gateway != self_ && had_report) {
            auto before = s.charged.find(key);
            const int64_t from = before == s.charged.end() ? 0 : before->second;
            if (u.charged > from) {
              charges.push_back(RemoteCharge{u.model, u.user, u.weight, u.charged - from});
            }
          }
          charged[std::move(key)] = u.charged;
        }
        s.charged = std::move(charged);
      }
    }
    s.live = s.report.has_value() && now - s.changed_at <= stale_after_s_;
  }
  std::erase_if(seen_, [&](const auto& e) { return !present.contains(e.first); });
  return charges;
}

std::vector<std::string> FairShare::LiveGateways() const {
  std::vector<std::string> out;
  for (const auto& [id, s] : seen_) {
    if (s.live) out.push_back(id);
  }
  return out;
}

int FairShare::Slots(const std::string& backend, int capacity,
                     const std::vector<std::string>& models) const {
  auto self = seen_.find(self_);
  if (self == seen_.end() || !self->second.report) return capacity;

  // Each live gateway on the backend: its requests waiting per user (over the backend's
  // models), the users' weights, and its requests in flight there.
  struct Present {
    const std::string* id;
    std::map<std::string, int64_t> queued;  // by user
    int64_t in_flight = 0;
    double weight = 0;  // backlogged weight, below
  };
  std::vector<Present> present;
  std::map<std::string, int64_t> total_queued;  // by user, over the present gateways
  std::map<std::string, double> weights;         // by user
  bool others = false;
  for (const auto& [id, s] : seen_) {
    const bool is_self = id == self_;
    if (!is_self && !s.live) continue;
    auto b = std::find_if(s.report->backends.begin(), s.report->backends.end(),
                          [&](const FairReport::Backend& e) { return e.backend == backend; });
    if (b == s.report->backends.end() && !is_self) continue;
    others = others || !is_self;
    Present p{&id, {}, b == s.report->backends.end() ? 0 : b->in_flight, 0};
    for (const auto& u : s.report->users) {
      if (u.queued <= 0 || !Serves(models, u.model)) continue;
      p.queued[u.user] += u.queued;
      total_queued[u.user] += u.queued;
      weights[u.user] = std::max(weights[u.user], u.weight);
    }
    present.push_back(std::move(p));
  }
  if (!others) return capacity;

  for (Present& p : present) {
    for (const auto& [user, queued] : p.queued) {
      p.weight += weights[user] * static_cast<double>(queued) /
                  static_cast<double>(total_queued[user]);
    }
  }
  auto me = std::find_if(present.begin(), present.end(),
                         [&](const Present& p) { return *p.id == self_; });
  if (me->weight <= 0) {
    int64_t others_in_flight = 0;
    for (const Present& p : present) {
      if (&p != &*me) others_in_flight += p.in_flight;
    }
    return static_cast<int>(std::max<int64_t>(1, capacity - others_in_flight));
  }

  // Slots left by gateways with no backlog; split among the backlogged ones.
  int64_t free = capacity;
  double total_weight = 0;
  for (const Present& p : present) {
    if (p.weight > 0) {
      total_weight += p.weight;
    } else {
      free -= p.in_flight;
    }
  }
  free = std::max<int64_t>(free, 0);
  struct Quota {
    const Present* p;
    int64_t slots;
    double remainder;
  };
  std::vector<Quota> quotas;
  int64_t given = 0;
  for (const Present& p : present) {
    if (p.weight <= 0) continue;
    const double exact = static_cast<double>(free) * p.weight / total_weight;
    const auto slots = static_cast<int64_t>(std::floor(exact));
    quotas.push_back(Quota{&p, slots, exact - static_cast<double>(slots)});
    given += slots;
  }
  // present is ordered by id (seen_ is a map), and stable_sort keeps that order among ties.
  std::stable_sort(quotas.begin(), quotas.end(),
                   [](const Quota& a, const Quota& b) { return a.remainder > b.remainder; });
  for (Quota& q : quotas) {
    if (given >= free) break;
    ++q.slots;
    ++given;
  }
  for (const Quota& q : quotas) {
    if (q.p == &*me) return static_cast<int>(std::max<int64_t>(1, q.slots));
  }
  return 1;  // unreachable: this gateway is backlogged, so it has a quota
}

}  // namespace bmas::gateway
