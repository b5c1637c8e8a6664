// Internal to the evaluator: the state of one evaluation while its phases run.
#pragma once

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/task.h"
#include "run/worker_group.h"
#include "task/inputs.h"

namespace kforge::eval {

struct EvalSession {
  const Task* task = nullptr;
  Dtype dtype{};
  int world = 0;
  WorkerGroup* group = nullptr;
  const EvalOptions* options = nullptr;
  size_t l2_bytes = 50u << 20;
  std::random_device seeds;  // fresh, secret seeds: never derived from anything a kernel sees

  nlohmann::json checks = nlohmann::json::array();
  nlohmann::json timing = nlohmann::json::array();
  nlohmann::json failure;  // the error / timeout object of the result, when one happened
  int trials_passed = 0;

  uint64_t NewSeed() { return (static_cast<uint64_t>(seeds()) << 32) ^ seeds(); }
};

// Correctness at one check size over options->trials trials, against the
// oracle. kMismatch / kRuntimeError / kDeadlock / kHarness on failure (with
// session.failure filled for the last three).
Status RunCheckSize(EvalSession& s, const SizeSpec& size);
// One bench size: candidate vs baseline outputs, then interleaved timing and
// revalidation of the timed outputs.
Status RunBenchSize(EvalSession& s, const SizeSpec& size);

// Compares one rank's output (raw bytes) with the oracle's expectation; null
// when it passes, else a `mismatches` entry of docs/eval-result.md.
nlohmann::json CheckAgainstOracle(const Problem& p, int rank, int output, const void* got,
                                  const OracleIo& expected, const HostInputs& inputs);

}  // namespace kforge::eval
