#include "common/metrics.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace bmas {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double v) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  ++counts_[i];
  ++count_;
  sum_ += v;
}

double Histogram::Quantile(double q) const {
  if (count_ == 0) return 0;
  double rank = q * static_cast<double>(count_);
  uint64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    if (seen + counts_[i] >= rank && counts_[i] > 0) {
      double lo = i == 0 ? 0 : bounds_[i - 1];
      if (i == bounds_.size()) return lo;  // +Inf bucket: the last finite bound
      double hi = bounds_[i];
      return lo + (hi - lo) * (rank - static_cast<double>(seen)) / counts_[i];
    }
    seen += counts_[i];
  }
  return bounds_.empty() ? 0 : bounds_.back();
}

MetricsRegistry::Family& MetricsRegistry::GetFamily(const std::string& name,
                                                    const std::string& help, Type type) {
  for (Family& f : families_) {
    if (f.name == name) return f;
  }
  families_.push_back(Family{name, help, type, {}});
  return families_.back();
}

Counter& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                     std::string labels) {
  Counter& c = counters_.emplace_back();
  GetFamily(name, help, Type::kCounter).series.push_back({std::move(labels), &c});
  return c;
}

Gauge& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                 std::string labels) {
  Gauge& g = gauges_.emplace_back();
  GetFamily(name, help, Type::kGauge).series.push_back({std::move(labels), nullptr, &g});
  return g;
}

Histogram& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                         std::string labels, std::vector<double> bounds) {
  Histogram& h = histograms_.emplace_back(std::move(bounds));
  GetFamily(name, help, Type::kHistogram)
      .series.push_back({std::move(labels), nullptr, nullptr, &h});
  return h;
}

namespace {

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

std::string Braced(const std::string& labels, const std::string& extra = {}) {
  if (labels.empty() && extra.empty()) return {};
  if (labels.empty()) return "{" + extra + "}";
  if (extra.empty()) return "{" + labels + "}";
  return "{" + labels + "," + extra + "}";
}

}  // namespace

std::string MetricsRegistry::Render() const {
  std::string out;
  out.reserve(8192);
  for (const Family& f : families_) {
    const char* type = f.type == Type::kCounter ? "counter"
                       : f.type == Type::kGauge ? "gauge"
                                                : "histogram";
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name,
                   type);
    for (const Series& s : f.series) {
      if (s.counter != nullptr) {
        fmt::format_to(std::back_inserter(out), "{}{} {}\n", f.name, Braced(s.labels),
                       Number(s.counter->value()));
      } else if (s.gauge != nullptr) {
        fmt::format_to(std::back_inserter(out), "{}{} {}\n", f.name, Braced(s.labels),
                       Number(s.gauge->value()));
      } else {
        const Histogram& h = *s.histogram;
        uint64_t cumulative = 0;
        for (size_t i = 0; i <= h.bounds().size(); ++i) {
          cumulative += h.bucket_counts()[i];
          std::string le = i < h.bounds().size() ? Number(h.bounds()[i]) : "+Inf";
          fmt::format_to(std::back_inserter(out), "{}_bucket{} {}\n", f.name,
                         Braced(s.labels, "le=\"" + le + "\""), cumulative);
        }
        fmt::format_to(std::back_inserter(out), "{}_sum{} {}\n{}_count{} {}\n", f.name,
                       Braced(s.labels), Number(h.sum()), f.name, Braced(s.labels), h.count());
      }
    }
  }
  return out;
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out;
}

}  // namespace bmas
