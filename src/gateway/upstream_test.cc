#include "gateway/upstream.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace bmas::gateway {
namespace {

std::vector<std::string> Drain(SseSplitter& s) {
  std::vector<std::string> events;
  for (std::string_view e = s.Next(); !e.empty(); e = s.Next()) events.emplace_back(e);
  return events;
}

TEST(SseSplitterTest, SplitsEventsWhateverTheReadBoundaries) {
  const std::string stream =
      "data: {\"a\":1}\n\ndata: {\"b\":\"x\\n\"}\n\ndata: [DONE]\n\n";
  // Every way of cutting the stream into two reads gives the same events.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseSplitter s;
    std::vector<std::string> events;
    s.Append(std::string_view(stream).substr(0, cut));
    for (auto& e : Drain(s)) events.push_back(e);
    s.Append(std::string_view(stream).substr(cut));
    for (auto& e : Drain(s)) events.push_back(e);
    ASSERT_EQ(events.size(), 3u) << "cut at " << cut;
    EXPECT_EQ(events[0], "data: {\"a\":1}\n\n");
    EXPECT_EQ(events[1], "data: {\"b\":\"x\\n\"}\n\n");
    EXPECT_EQ(events[2], "data: [DONE]\n\n");
    EXPECT_TRUE(s.Rest().empty());
  }
}

TEST(SseSplitterTest, ByteByByte) {
  const std::string stream = "data: 1\n\ndata: 2\n\n";
  SseSplitter s;
  std::vector<std::string> events;
  for (char c : stream) {
    s.Append(std::string_view(&c, 1));
    for (auto& e : Drain(s)) events.push_back(e);
  }
  EXPECT_EQ(events, (std::vector<std::string>{"data: 1\n\n", "data: 2\n\n"}));
}

TEST(SseSplitterTest, KeepsAPartialEventAsRest) {
  SseSplitter s;
  s.Append("data: 1\n\ndata: par");
  EXPECT_EQ(Drain(s).size(), 1u);
  EXPECT_EQ(s.Rest(), "data: par");
  s.Append("tial\n\n");
  EXPECT_EQ(Drain(s), (std::vector<std::string>{"data: partial\n\n"}));
}

struct UrlCase {
  const char* input;
  bool ok;
  const char* url;
  const char* host;
  const char* port;
  const char* base_path;
};

class ParseBackendUrlTest : public ::testing::TestWithParam<UrlCase> {};

TEST_P(ParseBackendUrlTest, Parses) {
  const UrlCase& c = GetParam();
  auto r = ParseBackendUrl(c.input);
  ASSERT_EQ(r.has_value(), c.ok) << c.input;
  if (!c.ok) {
    EXPECT_NE(r.error().message.find(c.input), std::string::npos) << r.error().message;
    return;
  }
  EXPECT_EQ(r->url, c.url);
  EXPECT_EQ(r->host, c.host);
  EXPECT_EQ(r->port, c.port);
  EXPECT_EQ(r->base_path, c.base_path);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ParseBackendUrlTest,
    ::testing::Values(
        UrlCase{"http://127.0.0.1:8000", true, "http://127.0.0.1:8000", "127.0.0.1", "8000", ""},
        UrlCase{"http://127.0.0.1:8000/", true, "http://127.0.0.1:8000", "127.0.0.1", "8000", ""},
        UrlCase{"http://node7:8000/vllm/", true, "http://node7:8000/vllm", "node7", "8000", "/vllm"},
        UrlCase{"https://x:1", true, "https://x:1", "x", "1", ""},
        UrlCase{"https://10.0.0.11:18100/", true, "https://10.0.0.11:18100", "10.0.0.11", "18100",
                ""},
        UrlCase{"ftp://x:1", false, "", "", "", ""}, UrlCase{"http://x", false, "", "", "", ""},
        UrlCase{"http://x:", false, "", "", "", ""}, UrlCase{"http://x:80a", false, "", "", "", ""},
        UrlCase{"127.0.0.1:8000", false, "", "", "", ""}));

TEST(CheckBackendTransportTest, PlainHttpOffLoopbackIsRefusedUnlessAllowed) {
  for (const char* ok : {"http://127.0.0.1:8000", "http://localhost:1", "http://[::1]:8000",
                         "http://127.9.9.9:8000", "https://10.0.0.11:18100",
                         "https://oss01:18100/v"}) {
    auto url = ParseBackendUrl(ok);
    ASSERT_TRUE(url) << ok;
    EXPECT_TRUE(CheckBackendTransport(*url, false)) << ok;
  }
  for (const char* plain : {"http://10.0.0.11:18100", "http://oss01:8000", "http://[fe80::1]:80"}) {
    auto url = ParseBackendUrl(plain);
    ASSERT_TRUE(url) << plain;
    auto r = CheckBackendTransport(*url, false);
    ASSERT_FALSE(r) << plain;
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message.find("clear text"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("https://"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("BMAS_PLAIN_REMOTE_BACKENDS"), std::string::npos);
    EXPECT_TRUE(CheckBackendTransport(*url, true)) << plain;
  }
}

TEST(BackendTlsContextTest, NeedsACertificate) {
  auto none = BackendTlsContext("", "/etc/bmas/ca.crt");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("BMAS_BACKEND_CA_FILE"), std::string::npos);
  auto junk = BackendTlsContext("not a certificate", "/x/ca.crt");
  ASSERT_FALSE(junk);
  EXPECT_NE(junk.error().message.find("/x/ca.crt"), std::string::npos);
}

TEST(MetricLabelIntTest, ReadsALabelOfTheFirstSample) {
  // As vLLM and bmas engine write it.
  const std::string text =
      "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig.\n"
      "# TYPE vllm:cache_config_info gauge\n"
      "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"640\","
      "enable_prefix_caching=\"True\"} 1\n"
      "vllm:num_requests_running{model_name=\"m\"} 3\n";
  EXPECT_EQ(MetricLabelInt(text, "vllm:cache_config_info", "num_gpu_blocks"), 640);
  EXPECT_EQ(MetricLabelInt(text, "vllm:cache_config_info", "block_size"), 16);
  EXPECT_EQ(MetricLabelInt(text, "vllm:cache_config_info", "gpu_blocks"), 0);  // whole names only
  EXPECT_EQ(MetricLabelInt(text, "vllm:cache_config_info", "enable_prefix_caching"), 0);
  EXPECT_EQ(MetricLabelInt(text, "vllm:cache_config", "block_size"), 0);  // whole metric names
  EXPECT_EQ(MetricLabelInt("", "vllm:cache_config_info", "block_size"), 0);
  EXPECT_EQ(MetricLabelInt("vllm:cache_config_info{block_size=\"16", "vllm:cache_config_info",
                           "block_size"),
            0);
}

}  // namespace
}  // namespace bmas::gateway
