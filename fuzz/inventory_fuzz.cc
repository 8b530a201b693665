// Fuzzes ParseCluster, the reader of the cluster inventory (TOML). Its contract is to throw
// ConfigError for anything wrong; any other exception, crash or sanitizer report is a bug.

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/config_table.h"
#include "core/cluster.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    bmas::Cluster cluster = bmas::ParseCluster(text, "fuzz.toml");
    for (size_t i = 0; i < cluster.nodes.size(); ++i) (void)bmas::SlurmdPortOf(cluster, i);
    for (const bmas::Node& node : cluster.nodes) (void)bmas::LinkMatrix(node.gpus);
  } catch (const bmas::ConfigError&) {
  }
  return 0;
}
