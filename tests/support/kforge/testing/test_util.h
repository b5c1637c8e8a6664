// Helpers shared by every test binary (target kforge_test_support).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kforge/core/fs.h"
#include "kforge/core/status.h"

namespace kforge::testing {

// A fresh temporary directory, removed with everything in it when this goes.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "kforge-test") {
    auto dir = MakeTempDir(prefix);
    EXPECT_TRUE(dir.ok()) << dir.status().ToString();
    path_ = dir.ok() ? *dir : std::filesystem::temp_directory_path() / (prefix + "-fallback");
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kforge::testing

// A Result<T> or Status that must be ok, its error printed when it is not.
#define ASSERT_OK(expr)                                   \
  do {                                                    \
    const auto& kf_s_ = (expr);                           \
    ASSERT_TRUE(kf_s_.ok()) << kf_s_.status().ToString(); \
  } while (0)
#define ASSERT_STATUS_OK(expr)                   \
  do {                                           \
    const ::kforge::Status kf_s_ = (expr);       \
    ASSERT_TRUE(kf_s_.ok()) << kf_s_.ToString(); \
  } while (0)
