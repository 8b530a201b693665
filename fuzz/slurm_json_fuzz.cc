// Fuzzes the readers of slurmrestd's JSON replies (slurm_json.h): every one is given the same
// bytes, as a reply to any request may be any of them.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "slurm/slurm_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  (void)bmas::ParseErrors(body);
  (void)bmas::ErrorFromResponse(200, body, "fuzz", "user");
  (void)bmas::ErrorFromResponse(500, body, "fuzz", "user");
  (void)bmas::ParseSubmitResponse(body);
  (void)bmas::ParsePingResponse(body);
  (void)bmas::ParseNodesResponse(body);
  (void)bmas::ParseDbJobsResponse(body);
  if (auto jobs = bmas::ParseJobsResponse(body)) {
    for (const bmas::JobInfo& job : *jobs) (void)bmas::JobStateName(job.state);
  }
  return 0;
}
