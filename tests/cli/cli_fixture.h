// The fixture of the CLI tests: the kforge binary run as a subprocess from
// the source root, with its caches in a temporary directory.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kforge/core/subprocess.h"
#include "kforge/testing/test_util.h"

namespace kforge {

inline const std::filesystem::path kRoot(KFORGE_SOURCE_ROOT);

inline std::string Cassette() {
  return "replay:" + (kRoot / "examples/demo/cassette.jsonl").string();
}

class CliTest : public ::testing::Test {
 protected:
  ProcessResult Kforge(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
    args.insert(args.begin(), KFORGE_BIN);
    ProcessOptions o;
    o.cwd = kRoot;
    o.env = std::move(env);
    o.env["XDG_CACHE_HOME"] = (tmp_ / "cache").string();
    o.timeout = std::chrono::minutes(3);
    auto r = RealProcessRunner().Run(args, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : ProcessResult{};
  }

  testing::TempDir dir_{"kforge-cli-test"};
  const std::filesystem::path tmp_ = dir_.path();
};

}  // namespace kforge
