// Where the store is: $BMAS_STORE_URL, else the config's [store] url, else SQLite.

#include "daemon/services.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

namespace bmas {
namespace {

// Sets an environment variable for the test's scope, and puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::optional<std::string>& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ConfiguredStoreTest, TheEnvironmentWinsOverTheConfigWhichWinsOverSqlite) {
  const std::string config = (std::filesystem::temp_directory_path() /
                              ("bmas_services_test_" + std::to_string(getpid()) + ".toml"))
                                 .string();
  std::ofstream(config) << "[store]\nurl = \"postgresql://bmas@db1/bmas\"\n";
  {
    ScopedEnv no_config("BMAS_CONFIG", "");
    ScopedEnv no_url("BMAS_STORE_URL", std::nullopt);
    EXPECT_EQ(*ConfiguredStoreUrl(), "");
    EXPECT_EQ(DescribeConfiguredStore("/s/store/bmas.db"), "/s/store/bmas.db");
  }
  {
    ScopedEnv with_config("BMAS_CONFIG", config);
    ScopedEnv no_url("BMAS_STORE_URL", std::nullopt);
    EXPECT_EQ(*ConfiguredStoreUrl(), "postgresql://bmas@db1/bmas");
  }
  {
    ScopedEnv with_config("BMAS_CONFIG", config);
    ScopedEnv url("BMAS_STORE_URL", "postgresql://gw:secret@db2/bmas");
    EXPECT_EQ(*ConfiguredStoreUrl(), "postgresql://gw:secret@db2/bmas");
    // Logs never show the password.
    EXPECT_EQ(DescribeConfiguredStore("/s/store/bmas.db"), "postgresql://gw:***@db2/bmas");
  }
  std::filesystem::remove(config);
}

TEST(ConfiguredStoreTest, ABrokenConfigIsAnErrorThatNamesIt) {
  const std::string config = (std::filesystem::temp_directory_path() /
                              ("bmas_services_bad_" + std::to_string(getpid()) + ".toml"))
                                 .string();
  std::ofstream(config) << "[store]\nurl = \"mysql://db1\"\n";
  ScopedEnv with_config("BMAS_CONFIG", config);
  ScopedEnv no_url("BMAS_STORE_URL", std::nullopt);
  auto url = ConfiguredStoreUrl();
  ASSERT_FALSE(url);
  EXPECT_NE(url.error().message.find(config), std::string::npos) << url.error().message;
  auto store = OpenConfiguredStore("/nonexistent/store/bmas.db");
  ASSERT_FALSE(store);
  std::filesystem::remove(config);
}

}  // namespace
}  // namespace bmas
