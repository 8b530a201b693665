#include "plan/html_report.h"

#include <fmt/format.h>

#include "dashboard/assets.h"

namespace bmas::plan {
namespace {

// The dashboard's embedded assets hold the one copy of uPlot in the binary; the page script
// and its CSS sit beside it (src/dashboard/CMakeLists.txt). They are built in: a missing one
// is a build mistake, which plan_test catches, not a reason to throw at a user.
std::string_view AssetBody(std::string_view path) {
  const dashboard::Asset* a = dashboard::FindAsset(path);
  return a != nullptr ? a->body : std::string_view();
}

// Between <script> and </script> the HTML parser looks for "</script" (and "<!--"), whatever
// JSON's quoting says. Both start with '<', which only a JSON string can hold; "\u003c" is the
// same string to JSON.parse.
std::string EscapeJsonForScript(std::string_view json) {
  std::string out;
  out.reserve(json.size() + json.size() / 16);
  for (char c : json) {
    if (c == '<') {
      out += "\\u003c";
    } else {
      out += c;
    }
  }
  return out;
}

// Inline scripts and styles are the only ones allowed; no fetch, frame or form may leave the
// file (img-src data: is the empty favicon, which keeps the browser from asking for one).
constexpr std::string_view kHead =
    "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
    "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; form-action 'none'; "
    "base-uri 'none'\">\n"
    "<link rel=\"icon\" href=\"data:,\">\n<title>bmas plan</title>\n";

// <tag>, `body` on lines of its own, </tag>: an inline style or script.
void AppendInline(std::string& html, std::string_view tag, std::string_view body) {
  html += fmt::format("<{}>\n", tag);
  html += body;
  html += fmt::format("\n</{}>\n", tag);
}

}  // namespace

std::string PlanHtml(std::string_view report_json) {
  const std::string_view uplot_js = AssetBody("/assets/uPlot.iife.min.js");
  const std::string_view uplot_css = AssetBody("/assets/uPlot.min.css");
  const std::string_view plan_js = AssetBody("/assets/plan.js");
  const std::string_view plan_css = AssetBody("/assets/plan.css");
  const std::string json = EscapeJsonForScript(report_json);

  std::string html;
  html.reserve(kHead.size() + uplot_js.size() + uplot_css.size() + plan_js.size() +
               plan_css.size() + json.size() + 512);
  html += kHead;
  AppendInline(html, "style", uplot_css);
  AppendInline(html, "style", plan_css);
  html += "</head>\n<body>\n";
  // plan.js fills #page; without scripts the reader at least learns why it is empty.
  html +=
      "<main id=\"page\"><noscript>This report is drawn by JavaScript: allow scripts for "
      "this file.</noscript></main>\n";
  html += "<script type=\"application/json\" id=\"report\">";
  html += json;
  html += "</script>\n";
  AppendInline(html, "script", uplot_js);
  AppendInline(html, "script", plan_js);
  html += "</body>\n</html>\n";
  return html;
}

}  // namespace bmas::plan
