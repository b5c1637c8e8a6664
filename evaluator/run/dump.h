// `kforge eval --dump DIR`: one check trial's tensors as .npy files with a
// JSON manifest, so that a result can be replayed and cross-checked with
// other tools (docs/eval-result.md, "Dumps").
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/task.h"
#include "kforge/oracle.h"
#include "task/inputs.h"

namespace kforge::eval {

struct TrialTensors {
  const Problem* problem = nullptr;
  std::string task, size;
  Dtype dtype{};
  uint64_t seed = 0;
  const HostInputs* inputs = nullptr;  // [rank][input], encoded in dtype
  const std::vector<std::vector<std::vector<char>>>* outputs =
      nullptr;                         // [rank][output], as written
  const OracleIo* expected = nullptr;  // the oracle's outputs (f64)
};

// The numpy descr of a dtype: bf16 and the fp8s have none and are written as
// their bit patterns ("<u2", "|u1"), which the manifest names.
std::string NpyDescr(Dtype dt);

// Writes DIR/<size>/rank<r>/{input,output,expected}.<tensor>.npy and adds
// their entries to DIR/manifest.json (created or extended).
Status DumpTrial(const std::filesystem::path& dir, const TrialTensors& t);

}  // namespace kforge::eval
