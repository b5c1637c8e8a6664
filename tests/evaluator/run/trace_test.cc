// The diagnosis traces (run/trace.h): with KFORGE_EXCHANGE_TRACE set, every
// exchange with a group is one JSON line naming the group, the op, the phase,
// its start and its seconds; unset, nothing is written. Fake workers, no GPU.
#include "run/trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "run/session.h"
#include "run/worker_group.h"

namespace kforge::eval {
namespace {

std::vector<nlohmann::json> Lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < 2; ++r) unsetenv(("KFORGE_WORKER_FAKE_" + std::to_string(r)).c_str());
    std::filesystem::remove(path_);
  }
  void TearDown() override {
    unsetenv(kExchangeTrace);
    std::filesystem::remove(path_);
  }
  // A session whose harness group is two fake workers.
  void StartHarness() {
    GroupOptions o;
    o.worker_path = KFORGE_FAKE_WORKER;
    o.world = 2;
    o.devices = {0, 0};
    o.emulated = true;
    o.start_deadline_s = 10;
    auto g = WorkerGroup::Start(o);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    harness_ = std::move(g).value();
    session_.options = &options_;
    session_.harness = harness_.get();
  }
  bool Ping(const char* op, const char* phase) {
    return Exchange(session_, *harness_, {{"op", op}}, 5, phase).ok();
  }
  EvalOptions options_;
  EvalSession session_;
  std::unique_ptr<WorkerGroup> harness_;
  std::string path_ =
      ::testing::TempDir() + "kforge-exchange-trace-" + std::to_string(getpid()) + ".jsonl";
};

TEST_F(TraceTest, EveryExchangeIsOneLineWithItsGroupOpPhaseAndSeconds) {
  ASSERT_NO_FATAL_FAILURE(StartHarness());
  setenv(kExchangeTrace, path_.c_str(), 1);
  const double before =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  ASSERT_TRUE(Ping("ping", "setup"));
  ASSERT_TRUE(Ping("pong", "correctness"));
  const auto lines = Lines(path_);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["group"], "harness");
  EXPECT_EQ(lines[0]["op"], "ping");
  EXPECT_EQ(lines[0]["phase"], "setup");
  EXPECT_EQ(lines[1]["op"], "pong");
  EXPECT_EQ(lines[1]["phase"], "correctness");
  EXPECT_GE(lines[0]["t_s"].get<double>(), before);
  EXPECT_GE(lines[1]["t_s"].get<double>(), lines[0]["t_s"].get<double>());
  EXPECT_GT(lines[0]["s"].get<double>(), 0);
  EXPECT_LT(lines[0]["s"].get<double>(), 5);
}

TEST_F(TraceTest, NothingIsWrittenUnlessAsked) {
  ASSERT_NO_FATAL_FAILURE(StartHarness());
  ASSERT_TRUE(Ping("ping", "setup"));
  EXPECT_FALSE(std::filesystem::exists(path_));
  setenv(kExchangeTrace, "", 1);  // empty: off too
  ASSERT_TRUE(Ping("ping", "setup"));
  EXPECT_FALSE(std::filesystem::exists(path_));
  EXPECT_FALSE(Tracing(kExchangeTrace));
}

}  // namespace
}  // namespace kforge::eval
