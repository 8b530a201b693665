// libFuzzer target: the root agent's request parser, which reads bytes from any local user.
// Links bmas_agent_protocol (src/daemon/CMakeLists.txt).

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/agent_protocol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto request = bmas::ParseAgentRequest(text);
  if (request) {
    // What parses renders and parses back to the same request.
    auto again = bmas::ParseAgentRequest(bmas::RenderAgentRequest(*request));
    if (!again || again->op != request->op || again->job != request->job ||
        again->argv != request->argv || again->env != request->env ||
        again->cwd != request->cwd || again->login != request->login ||
        again->rows != request->rows || again->cols != request->cols ||
        again->action != request->action || again->key_id != request->key_id) {
      __builtin_trap();
    }
    bmas::FilterUserEnvironment(request->env);
  }
  return 0;
}
