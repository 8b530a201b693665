#pragma once

// Strict reading of TOML configuration: every key is typed and range-checked, and a key the
// reader never asked for is an error. Errors name the file, the line and the key.
// Configuration errors end start-up, so they are exceptions (ConfigError).

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace toml {
inline namespace v3 {
class table;
class node;
}  // namespace v3
}  // namespace toml

namespace bmas {

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ConfigTable {
 public:
  // `table` must outlive this object. `source` is the file name; `prefix` the dotted path of
  // this table ("" for the root).
  ConfigTable(const toml::table& table, std::string source, std::string prefix);

  int64_t Int(std::string_view key, int64_t fallback, int64_t min, int64_t max);
  double Double(std::string_view key, double fallback, double min, double max);
  bool Bool(std::string_view key, bool fallback);
  std::string String(std::string_view key, std::string fallback,
                     std::initializer_list<std::string_view> allowed = {});
  std::vector<int64_t> IntArray(std::string_view key, int64_t min, int64_t max);
  std::vector<std::string> StringArray(std::string_view key);
  // A sub-table, or nullopt when absent.
  std::optional<ConfigTable> Table(std::string_view key);
  // The tables of an array of tables (`[[key]]` or `key = [{...}, ...]`), empty when absent;
  // element i is named "key[i]" in errors.
  std::vector<ConfigTable> TableArray(std::string_view key);
  // Keys of this table, in file order.
  std::vector<std::string> Keys() const;
  bool Has(std::string_view key) const;

  // Throws for the first key of this table that was never read.
  void RejectUnknownKeys() const;
  // Throws ConfigError "<file>:<line>: <path.key>: <what>" for a value the caller finds wrong
  // (the line of `key`, else of this table).
  [[noreturn]] void Invalid(std::string_view key, const std::string& what) const;

  const std::string& source() const { return source_; }
  // The dotted path of this table, e.g. "cluster.nodes[2]".
  const std::string& prefix() const { return prefix_; }
  // The line where this table starts (its header), for errors about the table as a whole.
  int line() const;

 private:
  const toml::node* Get(std::string_view key);
  [[noreturn]] void Fail(std::string_view key, const toml::node* node,
                         const std::string& what) const;
  std::string Path(std::string_view key) const;

  const toml::table* table_;
  std::string source_;
  std::string prefix_;
  std::vector<std::string> read_;
};

}  // namespace bmas
