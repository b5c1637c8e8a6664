// The task model: task.toml parsed and validated, and a Problem = a task
// instantiated at one world size, dtype and named size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/dtype.h"

namespace kforge::eval {

struct Tolerance {
  double atol = 0;
  double rtol = 0;
};

struct InitSpec {
  enum class Kind { kNormal, kUniform, kInt, kPermutation, kCustom };
  Kind kind = Kind::kNormal;
  double mean = 0, std = 1;                     // normal
  double low = -1, high = 1;                    // uniform
  std::string int_low = "0", int_high = "100";  // int: expressions
};

struct TensorSpec {
  std::string name;
  std::string dtype;               // a dtype name or "T"
  std::vector<std::string> shape;  // expressions
  InitSpec init;                   // inputs only
  bool same_on_all_ranks = false;  // inputs only
  std::string ranks;               // outputs only: "" = all ranks, else an expression for one rank
  std::optional<Tolerance> tolerance;  // outputs only
};

struct SizeSpec {
  std::string label;
  std::map<std::string, std::string> vars;  // variable -> expression
};

struct Policy {
  bool harness_collectives = false;
  bool nccl = false;
  bool cublas = false;
};

struct Task {
  std::filesystem::path dir;
  std::string key;  // folder name, e.g. "001_allreduce"
  int id = 0;
  std::string name;  // "allreduce"
  std::string title;
  std::string category;
  std::string provenance;
  std::string description;
  std::vector<int> world_sizes;
  std::vector<Dtype> dtypes;  // values of T; front() is the default
  std::map<std::string, double> params;
  std::vector<TensorSpec> inputs;
  std::vector<TensorSpec> outputs;
  std::map<Dtype, Tolerance> tolerance;
  std::vector<SizeSpec> check_sizes;
  std::vector<SizeSpec> bench_sizes;
  std::string perf_bytes;         // expression
  std::string perf_busbw_factor;  // expression
  Policy policy;
  std::string workspace;                         // expression; empty = default
  std::filesystem::path reference;               // dir/reference.cu
  std::vector<std::filesystem::path> solutions;  // dir/solutions/*.cu, sorted
};

// Parses and validates dir/task.toml. Errors name the file, the line and the field.
Result<Task> LoadTask(const std::filesystem::path& dir);
// Every task folder under root (sorted by key). Stops at the first bad task.
Result<std::vector<Task>> LoadTasks(const std::filesystem::path& root);
// Finds a task by key, number or name.
const Task* FindTask(const std::vector<Task>& tasks, std::string_view selector);

// A tensor at concrete sizes.
struct ConcreteTensor {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  size_t nbytes = 0;
  int only_rank = -1;   // outputs: >= 0 when only that rank's value is checked
  Tolerance tolerance;  // outputs: resolved for this dtype
};

struct Problem {
  const Task* task = nullptr;
  int world = 0;
  Dtype dtype;  // the value of T
  std::string size_label;
  bool is_check_size = false;
  std::map<std::string, double> vars;  // params + size variables + W + elem
  std::vector<ConcreteTensor> inputs;
  std::vector<ConcreteTensor> outputs;
  size_t workspace_bytes = 0;
  double perf_bytes = 0;
  double busbw_factor = 1;
};

// Instantiates a task at world size W, dtype T and one of its sizes.
Result<Problem> Instantiate(const Task& task, int world, Dtype dtype, const SizeSpec& size,
                            bool is_check_size);

// Every check of `kforge tasks validate` except running the oracle: all sizes
// at all world sizes and dtypes instantiate; returns one line per problem.
Status ValidateShapes(const Task& task);

}  // namespace kforge::eval
