#include "common/metrics.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bmas {
namespace {

// Number of non-overlapping occurrences of `needle` in `haystack`.
int CountOccurrences(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

TEST(CounterTest, StartsAtZeroAndAccumulates) {
  Counter c;
  EXPECT_EQ(c.value(), 0);
  c.Inc();
  c.Inc(2.5);
  EXPECT_DOUBLE_EQ(c.value(), 3.5);
}

TEST(GaugeTest, SetOverwrites) {
  Gauge g;
  EXPECT_EQ(g.value(), 0);
  g.Set(7);
  g.Set(-1.5);
  EXPECT_DOUBLE_EQ(g.value(), -1.5);
}

TEST(HistogramTest, ObservationsLandInTheFirstBucketWhoseBoundIsNotBelowThem) {
  Histogram h({1, 2, 4});
  for (double v : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 4.5, 100.0}) h.Observe(v);
  // Bounds are inclusive (le): 1.0 goes to the first bucket, 4.0 to the third.
  EXPECT_EQ(h.bucket_counts(), (std::vector<uint64_t>{2, 2, 2, 2}));
  EXPECT_EQ(h.count(), 8u);
  EXPECT_DOUBLE_EQ(h.sum(), 116.5);
}

TEST(HistogramTest, EmptyHistogramHasZeroQuantile) {
  Histogram h({1, 2});
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.Quantile(0.5), 0);
}

struct QuantileCase {
  double q;
  double want;
};

class HistogramQuantileTest : public testing::TestWithParam<QuantileCase> {};

TEST_P(HistogramQuantileTest, InterpolatesWithinBuckets) {
  // Buckets: (0,1] x2, (1,2] x2, (2,4] x4, (4,+Inf) x2.
  Histogram h({1, 2, 4});
  for (double v : {0.5, 0.5, 1.5, 1.5, 3.0, 3.0, 3.0, 3.0, 10.0, 10.0}) h.Observe(v);
  EXPECT_DOUBLE_EQ(h.Quantile(GetParam().q), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(Quantiles, HistogramQuantileTest,
                         testing::Values(QuantileCase{0.1, 0.5},   // rank 1 of 2 in (0,1]
                                         QuantileCase{0.2, 1.0},   // top of the first bucket
                                         QuantileCase{0.3, 1.5},   // rank 1 of 2 in (1,2]
                                         QuantileCase{0.5, 2.5},   // rank 1 of 4 in (2,4]
                                         QuantileCase{0.8, 4.0},   // top of (2,4]
                                         QuantileCase{0.95, 4.0},  // +Inf: last finite bound
                                         QuantileCase{1.0, 4.0}));

TEST(MetricsRegistryTest, EmptyRegistryRendersNothing) {
  MetricsRegistry r;
  EXPECT_EQ(r.Render(), "");
}

TEST(MetricsRegistryTest, RendersUnlabelledCounterAndGauge) {
  MetricsRegistry r;
  r.AddCounter("requests_total", "Requests served.", "").Inc(3);
  r.AddGauge("temperature", "Current temperature.", "").Set(0.25);
  EXPECT_EQ(r.Render(),
            "# HELP requests_total Requests served.\n"
            "# TYPE requests_total counter\n"
            "requests_total 3.0\n"
            "# HELP temperature Current temperature.\n"
            "# TYPE temperature gauge\n"
            "temperature 0.25\n");
}

TEST(MetricsRegistryTest, SeriesOfOneFamilyShareOneHelpAndTypeLine) {
  MetricsRegistry r;
  r.AddCounter("done_total", "Finished.", R"(reason="stop")").Inc(1);
  r.AddGauge("other", "Another family.", "").Set(1);
  r.AddCounter("done_total", "Finished.", R"(reason="length")").Inc(2);
  const std::string out = r.Render();
  EXPECT_EQ(CountOccurrences(out, "# HELP done_total "), 1);
  EXPECT_EQ(CountOccurrences(out, "# TYPE done_total counter\n"), 1);
  // The family's series are rendered together, under its HELP and TYPE, in order of addition.
  EXPECT_NE(out.find("# TYPE done_total counter\n"
                     "done_total{reason=\"stop\"} 1.0\n"
                     "done_total{reason=\"length\"} 2.0\n"),
            std::string::npos)
      << out;
  // Families appear in order of first registration.
  EXPECT_LT(out.find("# HELP done_total"), out.find("# HELP other"));
}

TEST(MetricsRegistryTest, RendersHistogramWithCumulativeBucketsSumAndCount) {
  MetricsRegistry r;
  Histogram& h = r.AddHistogram("latency_seconds", "Latency.", R"(model_name="m")", {0.25, 1});
  h.Observe(0.0625);
  h.Observe(0.5);
  h.Observe(0.75);
  h.Observe(4);
  EXPECT_EQ(r.Render(),
            "# HELP latency_seconds Latency.\n"
            "# TYPE latency_seconds histogram\n"
            "latency_seconds_bucket{model_name=\"m\",le=\"0.25\"} 1\n"
            "latency_seconds_bucket{model_name=\"m\",le=\"1.0\"} 3\n"
            "latency_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 4\n"
            "latency_seconds_sum{model_name=\"m\"} 5.3125\n"
            "latency_seconds_count{model_name=\"m\"} 4\n");
}

TEST(MetricsRegistryTest, RendersUnlabelledHistogramWithOnlyLeLabel) {
  MetricsRegistry r;
  r.AddHistogram("h", "H.", "", {2}).Observe(1);
  EXPECT_EQ(r.Render(),
            "# HELP h H.\n"
            "# TYPE h histogram\n"
            "h_bucket{le=\"2.0\"} 1\n"
            "h_bucket{le=\"+Inf\"} 1\n"
            "h_sum 1.0\n"
            "h_count 1\n");
}

TEST(MetricsRegistryTest, RenderReflectsUpdatesAfterRegistration) {
  MetricsRegistry r;
  Counter& c = r.AddCounter("c_total", "C.", "");
  // Later additions must not invalidate earlier references.
  for (int i = 0; i < 100; ++i) r.AddGauge("g" + std::to_string(i), "G.", "");
  c.Inc(5);
  EXPECT_NE(r.Render().find("c_total 5.0\n"), std::string::npos);
}

struct EscapeCase {
  std::string in;
  std::string want;
};

class EscapeLabelValueTest : public testing::TestWithParam<EscapeCase> {};

TEST_P(EscapeLabelValueTest, EscapesBackslashQuoteAndNewline) {
  EXPECT_EQ(EscapeLabelValue(GetParam().in), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(Cases, EscapeLabelValueTest,
                         testing::Values(EscapeCase{"", ""},
                                         EscapeCase{"llama-3.1-8b", "llama-3.1-8b"},
                                         EscapeCase{"a\"b", "a\\\"b"}, EscapeCase{"a\\b", "a\\\\b"},
                                         EscapeCase{"a\nb", "a\\nb"},
                                         EscapeCase{"\\\"\n", "\\\\\\\"\\n"}));

}  // namespace
}  // namespace bmas
