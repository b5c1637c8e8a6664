// Helpers shared by the results tests.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "kforge/core/fs.h"

namespace kforge::results::testing {

// A fresh temporary directory removed when the test ends.
class TempDir {
 public:
  TempDir() {
    auto dir = MakeTempDir("kforge-results-test");
    EXPECT_TRUE(dir.ok()) << dir.status().ToString();
    path_ = dir.ok() ? *dir : std::filesystem::path("/tmp/kforge-results-test-fallback");
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace kforge::results::testing

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
