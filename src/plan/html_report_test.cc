#include "plan/html_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <string>

#include "dashboard/assets.h"
#include "plan/text_file.h"

namespace bmas::plan {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

const std::string kSample = std::string(BMAS_SOURCE_DIR) + "/tests/data/plan-report-sample.json";
constexpr std::string_view kReportOpen = R"(<script type="application/json" id="report">)";

// How often `needle` (lower case) occurs in `text`, ignoring case: the HTML parser does.
size_t CountNoCase(std::string text, std::string_view needle) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// The text of the report's <script> block, up to the first "</script" the parser would see.
std::string EmbeddedJson(const std::string& html) {
  const size_t begin = html.find(kReportOpen);
  if (begin == std::string::npos) return "";
  const size_t from = begin + kReportOpen.size();
  return html.substr(from, html.find("</script", from) - from);
}

std::string_view AssetBody(std::string_view path) {
  const dashboard::Asset* a = dashboard::FindAsset(path);
  return a != nullptr ? a->body : std::string_view();
}

TEST(HtmlReportTest, IsOneDocumentWithEverythingInline) {
  const std::string html = PlanHtml(ReadTextFile(kSample, "sample report"));
  EXPECT_THAT(html, StartsWith("<!doctype html>\n<html"));
  EXPECT_TRUE(html.ends_with("</html>\n"));
  for (std::string_view tag : {"<html", "</html>", "<head>", "</head>", "<body", "</body>"}) {
    EXPECT_EQ(CountNoCase(html, tag), 1u) << tag;
  }
  // Three scripts (the report, uPlot, plan.js) and each ends where it should: none of them
  // holds a "</script" of its own.
  EXPECT_EQ(CountNoCase(html, "<script"), 3u);
  EXPECT_EQ(CountNoCase(html, "</script"), 3u);
  EXPECT_EQ(CountNoCase(html, "</style"), 2u);

  const std::string_view uplot_js = AssetBody("/assets/uPlot.iife.min.js");
  const std::string_view uplot_css = AssetBody("/assets/uPlot.min.css");
  const std::string_view plan_js = AssetBody("/assets/plan.js");
  const std::string_view plan_css = AssetBody("/assets/plan.css");
  ASSERT_THAT(std::string(uplot_js), HasSubstr("uPlot"));
  ASSERT_THAT(std::string(uplot_css), HasSubstr(".uplot"));
  ASSERT_THAT(std::string(plan_js), HasSubstr("plot-timeline"));
  ASSERT_FALSE(plan_css.empty());
  for (std::string_view body : {uplot_js, uplot_css, plan_js, plan_css}) {
    EXPECT_THAT(html, HasSubstr(std::string(body)));
  }
}

TEST(HtmlReportTest, EmbedsTheReportAsJson) {
  const std::string json = ReadTextFile(kSample, "sample report");
  rapidjson::Document in, out;
  ASSERT_FALSE(in.Parse(json.c_str()).HasParseError());
  const std::string embedded = EmbeddedJson(PlanHtml(json));
  ASSERT_FALSE(out.Parse(embedded.c_str()).HasParseError()) << embedded.substr(0, 200);
  EXPECT_TRUE(out == in);  // rapidjson compares values deeply
  EXPECT_EQ(out["timeline"].Size(), 168u);
}

TEST(HtmlReportTest, AStringCannotEndTheScriptHoldingTheReport) {
  const std::string json =
      R"({"verdict": "</script><script>alert(1)</script>", "scenario": {"source": "<!--",)"
      R"( "cohorts": ["</SCRIPT >", "<img src=x onerror=alert(2)>"]}})";
  const std::string html = PlanHtml(json);
  EXPECT_EQ(CountNoCase(html, "<script"), 3u);
  EXPECT_EQ(CountNoCase(html, "</script"), 3u);
  EXPECT_THAT(html, Not(HasSubstr("<img")));
  EXPECT_THAT(html, Not(HasSubstr("<!--")));
  const std::string embedded = EmbeddedJson(html);
  EXPECT_THAT(embedded, HasSubstr(R"(\u003c/script>\u003cscript>alert(1))"));

  // What the page's JSON.parse reads back is the report's text, unchanged.
  rapidjson::Document out;
  ASSERT_FALSE(out.Parse(embedded.c_str()).HasParseError());
  EXPECT_STREQ(out["verdict"].GetString(), "</script><script>alert(1)</script>");
  EXPECT_STREQ(out["scenario"]["source"].GetString(), "<!--");
  EXPECT_STREQ(out["scenario"]["cohorts"][1].GetString(), "<img src=x onerror=alert(2)>");
}

TEST(HtmlReportTest, FetchesNothing) {
  const std::string html = PlanHtml(ReadTextFile(kSample, "sample report"));
  // No attribute or CSS that loads from elsewhere ("//host" is a network address too).
  const std::regex remote(R"((src|href|action)\s*=\s*["']?\s*(https?:)?//)", std::regex::icase);
  EXPECT_FALSE(std::regex_search(html, remote));
  const std::regex css_remote(R"(url\(\s*["']?\s*(https?:)?//)", std::regex::icase);
  EXPECT_FALSE(std::regex_search(html, css_remote));
  EXPECT_EQ(CountNoCase(html, "@import"), 0u);
  EXPECT_EQ(CountNoCase(html, "<link rel=\"stylesheet\""), 0u);
  EXPECT_EQ(CountNoCase(html, "<script src"), 0u);
  // And the browser is told to refuse any fetch the page might still try.
  EXPECT_THAT(html, HasSubstr("content=\"default-src 'none'; script-src 'unsafe-inline'"));
}

TEST(HtmlReportTest, AnyTextIsEmbedded) {
  // Not JSON, or empty: still one page, which says so when it runs (web/src/plan.js).
  for (const std::string json : {"", "not json", "null"}) {
    const std::string html = PlanHtml(json);
    EXPECT_EQ(CountNoCase(html, "</script"), 3u);
    EXPECT_EQ(EmbeddedJson(html), json);
  }
}

}  // namespace
}  // namespace bmas::plan
