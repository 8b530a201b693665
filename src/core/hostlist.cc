#include "core/hostlist.h"

#include <cstdint>

#include <fmt/format.h>

namespace bmas {
namespace {

// A number as the hostlist writes it: its value and the width it is padded to.
struct Number {
  uint64_t value = 0;
  size_t width = 0;
};

std::string Pad(uint64_t value, size_t width) { return fmt::format("{:0{}}", value, width); }

Result<Number> ParseNumber(std::string_view text, std::string_view hostlist) {
  // Nine digits keep every value and range size far from overflow.
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != text.npos) {
    return InvalidArgument(
        fmt::format("host list '{}': '{}' is not a number of 1 to 9 digits", hostlist, text));
  }
  return Number{std::stoull(std::string(text)), text.size()};
}

// The numbers one bracket body such as "01-03,07" stands for, padded.
Result<std::vector<std::string>> ExpandBracket(std::string_view body, std::string_view hostlist) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= body.size()) {
    size_t comma = body.find(',', start);
    std::string_view item = body.substr(start, comma == body.npos ? body.npos : comma - start);
    size_t dash = item.find('-');
    auto lo = ParseNumber(item.substr(0, dash), hostlist);
    if (!lo) return lo.error();
    Number hi = *lo;
    if (dash != item.npos) {
      auto parsed = ParseNumber(item.substr(dash + 1), hostlist);
      if (!parsed) return parsed.error();
      hi = *parsed;
    }
    if (hi.value < lo->value) {
      return InvalidArgument(
          fmt::format("host list '{}': range '{}' runs backwards", hostlist, item));
    }
    // Counted over the whole bracket: "[0-60000,0-60000,...]" is as large as its sum.
    if (hi.value - lo->value >= kMaxHostlistNames - out.size()) {
      return InvalidArgument(
          fmt::format("host list '{}': more than {} names", hostlist, kMaxHostlistNames));
    }
    for (uint64_t v = lo->value; v <= hi.value; ++v) out.push_back(Pad(v, lo->width));
    if (comma == body.npos) break;
    start = comma + 1;
  }
  return out;
}

Error TooLong(std::string_view hostlist) {
  return InvalidArgument(
      fmt::format("host list '{}': a name longer than {} bytes", hostlist, kMaxHostNameBytes));
}

// Expands one name with brackets, appending to `out`.
Result<void> ExpandName(std::string_view name, std::string_view hostlist,
                        std::vector<std::string>& out) {
  size_t open = name.find('[');
  if (open == name.npos) {
    if (name.find(']') != name.npos) {
      return InvalidArgument(fmt::format("host list '{}': ']' without '['", hostlist));
    }
    if (out.size() >= kMaxHostlistNames) {
      return InvalidArgument(
          fmt::format("host list '{}': more than {} names", hostlist, kMaxHostlistNames));
    }
    if (name.size() > kMaxHostNameBytes) return TooLong(hostlist);
    out.emplace_back(name);
    return {};
  }
  size_t close = name.find(']', open);
  if (close == name.npos || name.substr(open + 1, close - open - 1).find('[') != name.npos) {
    return InvalidArgument(fmt::format("host list '{}': '[' without its ']'", hostlist));
  }
  auto numbers = ExpandBracket(name.substr(open + 1, close - open - 1), hostlist);
  if (!numbers) return numbers.error();
  std::vector<std::string> tails;
  if (auto r = ExpandName(name.substr(close + 1), hostlist, tails); !r) return r.error();
  std::string_view prefix = name.substr(0, open);
  for (const std::string& n : *numbers) {
    for (const std::string& t : tails) {
      if (prefix.size() + n.size() + t.size() > kMaxHostNameBytes) return TooLong(hostlist);
      if (out.size() >= kMaxHostlistNames) {
        return InvalidArgument(
            fmt::format("host list '{}': more than {} names", hostlist, kMaxHostlistNames));
      }
      out.push_back(fmt::format("{}{}{}", prefix, n, t));
    }
  }
  return {};
}

}  // namespace

Result<std::vector<std::string>> ExpandHostlist(std::string_view hostlist) {
  std::vector<std::string> out;
  size_t start = 0;
  int depth = 0;
  for (size_t i = 0; i <= hostlist.size(); ++i) {
    char c = i < hostlist.size() ? hostlist[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c != ',' || depth > 0) continue;
    std::string_view name = hostlist.substr(start, i - start);
    if (name.empty())
      return InvalidArgument(fmt::format("host list '{}': an empty name", hostlist));
    if (name.find_first_of(" \t\n=") != name.npos) {
      return InvalidArgument(fmt::format("host list '{}': names hold no spaces or '='", hostlist));
    }
    if (auto r = ExpandName(name, hostlist, out); !r) return r.error();
    start = i + 1;
  }
  if (depth != 0)
    return InvalidArgument(fmt::format("host list '{}': unbalanced brackets", hostlist));
  return out;
}

std::string CompressHostlist(const std::vector<std::string>& names) {
  struct Group {
    std::string prefix;
    size_t width = 0;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // empty: a name without a number
  };
  std::vector<Group> groups;
  for (const std::string& name : names) {
    size_t digits = name.find_last_not_of("0123456789") + 1;  // npos + 1 == 0
    std::string_view number = std::string_view(name).substr(digits);
    if (number.empty() || number.size() > 9) {
      groups.push_back(Group{name, 0, {}});
      continue;
    }
    uint64_t value = std::stoull(std::string(number));
    std::string prefix = name.substr(0, digits);
    // The name joins the previous group when that group's padding writes it back unchanged.
    if (!groups.empty() && !groups.back().ranges.empty() && groups.back().prefix == prefix &&
        Pad(value, groups.back().width) == number) {
      auto& last = groups.back().ranges.back();
      if (value == last.second + 1) {
        last.second = value;
      } else {
        groups.back().ranges.emplace_back(value, value);
      }
      continue;
    }
    groups.push_back(Group{prefix, number.size(), {{value, value}}});
  }
  std::vector<std::string> parts;
  for (const Group& g : groups) {
    if (g.ranges.empty()) {
      parts.push_back(g.prefix);
    } else if (g.ranges.size() == 1 && g.ranges[0].first == g.ranges[0].second) {
      parts.push_back(g.prefix + Pad(g.ranges[0].first, g.width));
    } else {
      std::vector<std::string> items;
      for (const auto& [lo, hi] : g.ranges) {
        items.push_back(lo == hi ? Pad(lo, g.width)
                                 : fmt::format("{}-{}", Pad(lo, g.width), Pad(hi, g.width)));
      }
      parts.push_back(fmt::format("{}[{}]", g.prefix, fmt::join(items, ",")));
    }
  }
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace bmas
