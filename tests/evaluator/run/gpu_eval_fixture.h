// The fixture of the GPU evaluation tests (ctest label `gpu`): one evaluator
// and the task suite, shared by every test of the binary; skips cleanly
// without a CUDA device.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/fs.h"
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/hardware.h"
#include "kforge/evaluator/task_select.h"

namespace kforge::eval {

class GpuEvalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (tasks_ != nullptr || skip_reason_ != nullptr) return;  // both suites share one set-up
    auto card = ProbeHardware({}, KFORGE_WORKER_PATH);
    if (!card.ok()) {
      skip_reason_ = new std::string("no CUDA device: " + card.status().message());
      return;
    }
    auto tasks = LoadTasks(TasksDir(""));
    ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
    tasks_ = new std::vector<Task>(std::move(tasks).value());
    evaluator_ = MakeEvaluator(KFORGE_WORKER_PATH).release();
  }
  void SetUp() override {
    if (skip_reason_) GTEST_SKIP() << *skip_reason_;
  }
  static const Task& Find(const std::string& key) {
    const Task* t = FindTask(*tasks_, key);
    EXPECT_NE(t, nullptr) << key;
    return *t;
  }
  // The bench size with the fewest bytes at W = 2: correctness, not speed (a task's
  // first bench size is often a large real-model shape).
  static std::string SmallestBenchSize(const Task& t) {
    std::string best = t.bench_sizes.front().label;
    double best_bytes = -1;
    for (const SizeSpec& s : t.bench_sizes) {
      auto p = Instantiate(t, t.world_sizes.front(), t.dtypes.front(), s, false);
      if (!p.ok()) continue;
      double bytes = 0;
      for (const auto& x : p->inputs) bytes += static_cast<double>(x.nbytes);
      for (const auto& x : p->outputs) bytes += static_cast<double>(x.nbytes);
      if (best_bytes < 0 || bytes < best_bytes) best_bytes = bytes, best = s.label;
    }
    return best;
  }
  static nlohmann::json Eval(const Task& task, const std::filesystem::path& kernel, int world,
                             EvalOptions o = {}) {
    auto src = ReadFile(kernel);
    EXPECT_TRUE(src.ok()) << kernel;
    o.world = world;
    if (o.trials == 5) o.trials = 2;
    auto doc = evaluator_->Evaluate(task, *src, kernel.filename().string(), o);
    EXPECT_TRUE(doc.ok()) << doc.status().ToString();
    if (!doc.ok()) return nlohmann::json::object();
    return *doc;
  }
  static inline std::string* skip_reason_ = nullptr;
  static inline std::vector<Task>* tasks_ = nullptr;
  static inline Evaluator* evaluator_ = nullptr;
};

}  // namespace kforge::eval
