// libFuzzer target: what the dashboard reads from outside. The first byte picks the reader:
// a Cookie header from any browser (CookieValue), the gateway's /load or an agent's /gpus
// (sources.h); what parses is then drawn by the views a page asks for.
// Links bmas_dashboard (src/dashboard/CMakeLists.txt).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "dashboard/history.h"
#include "dashboard/sessions.h"
#include "dashboard/sources.h"
#include "dashboard/views.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  using namespace bmas::dashboard;
  ClusterState s;
  const Viewer viewer{"alice", false};
  switch (data[0] % 3) {
    case 0:
      (void)CookieValue(text, "bmas_session");
      break;
    case 1:
      if (auto load = ParseGatewayLoad(text)) {
        s.gateway = std::move(*load);
        (void)QuantileBetween({}, s.gateway.ttft, 0.95);
        (void)MakeHistoryPoint(s, s.gateway.queue_wait);
        (void)InferenceJson(s, viewer);
      }
      break;
    default:
      if (auto gpus = ParseAgentGpus(text, "node")) {
        s.telemetry.push_back(std::move(*gpus));
        (void)ClusterJson(s, viewer);
      }
      break;
  }
  return 0;
}
