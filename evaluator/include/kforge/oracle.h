// The oracle interface for task authors: an fp64 CPU function computing every
// rank's outputs from every rank's inputs. Each task's oracle.cpp registers one
// with KF_ORACLE(name) and, for `custom` inputs, a generator with
// KF_INPUT_GENERATOR(name).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"

namespace kforge {

struct OracleTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<double> data;  // row-major
};

// What an oracle sees: all ranks' inputs and (pre-sized) outputs, as doubles.
class OracleIo {
 public:
  int world = 0;
  std::map<std::string, double> params;            // [params] plus bound size variables (N, ...)
  std::vector<std::vector<OracleTensor>> inputs;   // [rank][input index]
  std::vector<std::vector<OracleTensor>> outputs;  // [rank][output index]

  std::span<const double> in(int rank, std::string_view name) const;
  std::span<double> out(int rank, std::string_view name);
  const std::vector<int64_t>& in_shape(int rank, std::string_view name) const;
  const std::vector<int64_t>& out_shape(int rank, std::string_view name) const;
  // A param or size variable; aborts with a clear message if absent (a task bug).
  double param(std::string_view name) const;
};

// Deterministic random numbers for custom generators (splitmix64-based).
class OracleRng {
 public:
  explicit OracleRng(uint64_t seed) : state_(seed) {}
  uint64_t NextU64();
  double Uniform();                     // [0, 1)
  double Normal();                      // N(0, 1)
  int64_t Int(int64_t lo, int64_t hi);  // [lo, hi]

 private:
  uint64_t state_;
};

struct GeneratorIo {
  int world = 0;
  int rank = 0;
  int input = 0;  // index into the task's [[inputs]]
  std::string input_name;
  std::map<std::string, double> params;
  OracleTensor* tensor = nullptr;  // pre-sized; fill tensor->data
  OracleRng* rng = nullptr;        // seeded from (trial seed, rank, input)
  uint64_t trial_seed = 0;         // for values that must agree across ranks
};

// Calls fn(begin, end) on contiguous chunks covering [0, n), on the host's
// cores, for an oracle whose items (ranks, rows) are independent: each chunk
// may write only what its items own. Chunks hold at least `min_per_chunk`
// items; small ranges run on the calling thread.
void OracleParallelFor(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn,
                       int64_t min_per_chunk = 1);

using OracleFn = std::function<Status(OracleIo&)>;
using GeneratorFn = std::function<Status(GeneratorIo&)>;

// Registry (filled by static registration in each task's oracle.cpp).
bool RegisterOracle(const std::string& name, OracleFn fn);
bool RegisterGenerator(const std::string& name, GeneratorFn fn);
const OracleFn* FindOracle(std::string_view name);
const GeneratorFn* FindGenerator(std::string_view name);
std::vector<std::string> RegisteredOracles();

}  // namespace kforge

#define KF_ORACLE(task_name)                                             \
  static ::kforge::Status kf_oracle_##task_name(::kforge::OracleIo& io); \
  static const bool kf_oracle_registered_##task_name =                   \
      ::kforge::RegisterOracle(#task_name, kf_oracle_##task_name);       \
  static ::kforge::Status kf_oracle_##task_name(::kforge::OracleIo& io)

#define KF_INPUT_GENERATOR(task_name)                                           \
  static ::kforge::Status kf_generator_##task_name(::kforge::GeneratorIo& gen); \
  static const bool kf_generator_registered_##task_name =                       \
      ::kforge::RegisterGenerator(#task_name, kf_generator_##task_name);        \
  static ::kforge::Status kf_generator_##task_name(::kforge::GeneratorIo& gen)
