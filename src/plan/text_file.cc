#include "plan/text_file.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/config_table.h"

namespace bmas::plan {

std::string ReadTextFile(const std::string& path, std::string_view what) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  if (in) text << in.rdbuf();
  if (!in || in.bad()) {
    throw ConfigError(fmt::format("{}: cannot read the {}: {}", path, what, std::strerror(errno)));
  }
  return text.str();
}

}  // namespace bmas::plan
