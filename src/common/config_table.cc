#include "common/config_table.h"

#include <algorithm>

#include <fmt/format.h>
#include <toml++/toml.h>

namespace bmas {

ConfigTable::ConfigTable(const toml::table& table, std::string source, std::string prefix)
    : table_(&table), source_(std::move(source)), prefix_(std::move(prefix)) {}

std::string ConfigTable::Path(std::string_view key) const {
  return prefix_.empty() ? std::string(key) : fmt::format("{}.{}", prefix_, key);
}

void ConfigTable::Fail(std::string_view key, const toml::node* node,
                       const std::string& what) const {
  int line = node != nullptr ? static_cast<int>(node->source().begin.line) : 0;
  if (line == 0) line = static_cast<int>(table_->source().begin.line);
  throw ConfigError(fmt::format("{}:{}: {}: {}", source_, line, Path(key), what));
}

const toml::node* ConfigTable::Get(std::string_view key) {
  read_.emplace_back(key);
  return table_->get(key);
}

bool ConfigTable::Has(std::string_view key) const { return table_->contains(key); }

int64_t ConfigTable::Int(std::string_view key, int64_t fallback, int64_t min, int64_t max) {
  const toml::node* n = Get(key);
  if (n == nullptr) return fallback;
  auto v = n->value<int64_t>();
  if (!n->is_integer() || !v) Fail(key, n, fmt::format("expected an integer in {}..{}", min, max));
  if (*v < min || *v > max) {
    Fail(key, n, fmt::format("{} is out of range: expected {}..{}", *v, min, max));
  }
  return *v;
}

double ConfigTable::Double(std::string_view key, double fallback, double min, double max) {
  const toml::node* n = Get(key);
  if (n == nullptr) return fallback;
  auto v = n->value<double>();  // integers convert
  if (!(n->is_floating_point() || n->is_integer()) || !v) {
    Fail(key, n, fmt::format("expected a number in {}..{}", min, max));
  }
  if (!(*v >= min && *v <= max)) {  // NaN fails too
    Fail(key, n, fmt::format("{} is out of range: expected {}..{}", *v, min, max));
  }
  return *v;
}

bool ConfigTable::Bool(std::string_view key, bool fallback) {
  const toml::node* n = Get(key);
  if (n == nullptr) return fallback;
  if (!n->is_boolean()) Fail(key, n, "expected true or false");
  return *n->value<bool>();
}

std::string ConfigTable::String(std::string_view key, std::string fallback,
                                std::initializer_list<std::string_view> allowed) {
  const toml::node* n = Get(key);
  if (n == nullptr) return fallback;
  if (!n->is_string()) Fail(key, n, "expected a string");
  std::string v = *n->value<std::string>();
  if (allowed.size() > 0 && std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    Fail(key, n, fmt::format("\"{}\" is not one of: {}", v, fmt::join(allowed, ", ")));
  }
  return v;
}

std::vector<int64_t> ConfigTable::IntArray(std::string_view key, int64_t min, int64_t max) {
  std::vector<int64_t> out;
  const toml::node* n = Get(key);
  if (n == nullptr) return out;
  const toml::array* a = n->as_array();
  if (a == nullptr) Fail(key, n, "expected an array of integers");
  for (const toml::node& e : *a) {
    auto v = e.value<int64_t>();
    if (!e.is_integer() || !v || *v < min || *v > max) {
      Fail(key, &e, fmt::format("expected integers in {}..{}", min, max));
    }
    out.push_back(*v);
  }
  return out;
}

std::vector<std::string> ConfigTable::StringArray(std::string_view key) {
  std::vector<std::string> out;
  const toml::node* n = Get(key);
  if (n == nullptr) return out;
  const toml::array* a = n->as_array();
  if (a == nullptr) Fail(key, n, "expected an array of strings");
  for (const toml::node& e : *a) {
    if (!e.is_string()) Fail(key, &e, "expected an array of strings");
    out.push_back(*e.value<std::string>());
  }
  return out;
}

std::optional<ConfigTable> ConfigTable::Table(std::string_view key) {
  const toml::node* n = Get(key);
  if (n == nullptr) return std::nullopt;
  const toml::table* t = n->as_table();
  if (t == nullptr) Fail(key, n, "expected a table");
  return ConfigTable(*t, source_, Path(key));
}

std::vector<ConfigTable> ConfigTable::TableArray(std::string_view key) {
  std::vector<ConfigTable> out;
  const toml::node* n = Get(key);
  if (n == nullptr) return out;
  const toml::array* a = n->as_array();
  if (a == nullptr) Fail(key, n, "expected an array of tables");
  for (size_t i = 0; i < a->size(); ++i) {
    const toml::table* t = (*a)[i].as_table();
    if (t == nullptr) Fail(key, &(*a)[i], "expected an array of tables");
    out.emplace_back(*t, source_, fmt::format("{}[{}]", Path(key), i));
  }
  return out;
}

void ConfigTable::Invalid(std::string_view key, const std::string& what) const {
  Fail(key, table_->get(key), what);
}

int ConfigTable::line() const { return static_cast<int>(table_->source().begin.line); }

namespace {

// toml++ keeps a table's keys sorted by name; bmas reports them in file order.
std::vector<std::pair<std::string, int>> KeysInFileOrder(const toml::table& table) {
  std::vector<std::pair<std::string, int>> keys;
  for (const auto& [k, v] : table) {
    int line = static_cast<int>(k.source().begin.line);
    if (line == 0) line = static_cast<int>(v.source().begin.line);
    keys.emplace_back(std::string(k.str()), line);
  }
  std::stable_sort(keys.begin(), keys.end(),
                   [](const auto& a, const auto& b) { return a.second < b.second; });
  return keys;
}

}  // namespace

std::vector<std::string> ConfigTable::Keys() const {
  std::vector<std::string> keys;
  for (auto& [k, line] : KeysInFileOrder(*table_)) keys.push_back(std::move(k));
  return keys;
}

void ConfigTable::RejectUnknownKeys() const {
  for (const auto& [k, line] : KeysInFileOrder(*table_)) {
    if (std::find(read_.begin(), read_.end(), k) == read_.end()) {
      throw ConfigError(fmt::format("{}:{}: unknown key '{}'", source_, line, Path(k)));
    }
  }
}

}  // namespace bmas
