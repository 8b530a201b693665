#pragma once

// A small Prometheus registry: counters, gauges and histograms with fixed label sets,
// rendered in the text exposition format (version 0.0.4).
//
// Not thread-safe: a registry and its metrics belong to one thread (an io_context).

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace bmas {

class Counter {
 public:
  void Inc(double v = 1) { value_ += v; }
  double value() const { return value_; }

 private:
  double value_ = 0;
};

class Gauge {
 public:
  void Set(double v) { value_ = v; }
  double value() const { return value_; }

 private:
  double value_ = 0;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& bucket_counts() const { return counts_; }  // not cumulative
  // The value below which a fraction q of observations fall, interpolated within buckets.
  double Quantile(double q) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // one per bound, plus +Inf
  uint64_t count_ = 0;
  double sum_ = 0;
};

class MetricsRegistry {
 public:
  // `labels` is the label set in exposition form, e.g. `model_name="m",finished_reason="stop"`
  // (may be empty). Metrics of the same name form one family. References stay valid for the
  // registry's life.
  Counter& AddCounter(const std::string& name, const std::string& help, std::string labels);
  Gauge& AddGauge(const std::string& name, const std::string& help, std::string labels);
  Histogram& AddHistogram(const std::string& name, const std::string& help, std::string labels,
                          std::vector<double> bounds);

  std::string Render() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series {
    std::string labels;
    Counter* counter = nullptr;
    Gauge* gauge = nullptr;
    Histogram* histogram = nullptr;
  };
  struct Family {
    std::string name;
    std::string help;
    Type type;
    std::vector<Series> series;
  };
  Family& GetFamily(const std::string& name, const std::string& help, Type type);

  std::vector<Family> families_;
  std::deque<Counter> counters_;
  std::deque<Gauge> gauges_;
  std::deque<Histogram> histograms_;
};

// Escapes a label value for the exposition format.
std::string EscapeLabelValue(const std::string& value);

}  // namespace bmas
