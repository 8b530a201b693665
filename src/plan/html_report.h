#pragma once

// The report of `bmas plan --html OUT`: one self-contained HTML file that draws the JSON of
// `bmas plan --json` as tables and uPlot plots (web/src/plan.js reads it). Everything it needs
// is inlined (uPlot, the page script and its CSS, the report) and its Content-Security-Policy
// forbids any fetch: clusters are often offline, and the file is mailed around and kept.

#include <string>
#include <string_view>

namespace bmas::plan {

// The HTML document for `report_json`, which is embedded as it is, with `<` written `\u003c`
// so that no string in it can end the <script> block holding it. The page script reads it and
// copes with null or missing sections (a jobs-only report has no inference and no cost); text
// from the report reaches the page as text, never as markup.
std::string PlanHtml(std::string_view report_json);

}  // namespace bmas::plan
