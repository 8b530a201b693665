#pragma once

#include <string>
#include <string_view>

namespace bmas::plan {

// The whole of the file `path`. Throws ConfigError "<path>: cannot read the <what>: <reason>".
std::string ReadTextFile(const std::string& path, std::string_view what);

}  // namespace bmas::plan
