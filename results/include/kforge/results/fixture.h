// Synthetic run stores for tests and demos: several models, strategies,
// tasks, samples, statuses and speedups, written through RunStore. The
// outcomes are a pure function of the spec (seeded), so a fixture is the same
// on every machine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::results {

struct FixtureSpec {
  std::string run_name = "fixture";
  // Earlier models are stronger: more correct samples and higher speedups.
  std::vector<std::string> models = {"model-a", "model-b", "model-c"};
  std::vector<std::string> strategies = {"one-shot", "refine"};
  int tasks = 6;  // tasks 001_t … with categories cycling collective/fused/moe
  int samples = 2;
  int turns = 2;  // per session; the last turn's evaluation decides
  std::vector<int> worlds = {4};
  // Models whose sessions ran with ranks sharing a GPU.
  std::vector<std::string> emulated_models;
  uint64_t seed = 7;
  bool finished = true;  // run state done (else left running, last sessions pending)
};

// Creates (or adds to) the store in `run_dir`.
Status WriteFixtureRun(const std::filesystem::path& run_dir, const FixtureSpec& spec);

}  // namespace kforge::results
