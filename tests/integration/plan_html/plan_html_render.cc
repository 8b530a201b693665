// plan_html_render IN.json OUT.html: the report of `bmas plan --html` for a JSON report on
// disk, so that the browser test can draw sample reports without running a simulation.
#include <fstream>
#include <iostream>
#include <sstream>

#include "plan/html_report.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: plan_html_render IN.json OUT.html\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::ostringstream json;
  if (!in || !(json << in.rdbuf())) {
    std::cerr << "plan_html_render: cannot read " << argv[1] << "\n";
    return 1;
  }
  std::ofstream out(argv[2], std::ios::binary | std::ios::trunc);
  out << bmas::plan::PlanHtml(json.str());
  if (!out.flush()) {
    std::cerr << "plan_html_render: cannot write " << argv[2] << "\n";
    return 1;
  }
  return 0;
}
