// An evaluation session of the test task "001_sum" at W = 2 (emulated) with
// one bench size planned and a baseline cache: where the tests of baseline
// and expert reuse start.
#pragma once

#include <gtest/gtest.h>

#include "run/baseline_cache.h"
#include "run/session.h"
#include "task_fixture.h"

namespace kforge::eval {

struct OneSizeSession {
  testing::TempDir tmp;
  Task task = testing::LoadOrDie(tmp.path(), "001_sum", testing::SumToml());
  EvalOptions options;
  EvalSession s;
  BaselineCache cache;
  OneSizeSession() {
    s.task = &task;
    s.dtype = Dtype::kF32;
    s.world = 2;
    s.devices = {0, 0};
    s.emulated = true;
    s.options = &options;
    s.baselines = &cache;
    s.reference_object = "/cache/trusted/kernels/ab12/kernel.so";
    SizePlan plan;
    plan.size = task.bench_sizes.front();
    auto p = Instantiate(task, 2, Dtype::kF32, plan.size, false);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    plan.problem = *p;
    plan.sets = 3;
    s.plans.push_back(plan);
  }
};

}  // namespace kforge::eval
