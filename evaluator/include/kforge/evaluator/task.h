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
  // > 0: the output as a whole must also be this close, relative RMS:
  // sqrt(mean((got-exp)^2) / mean(exp^2)) <= rms, on outputs of at least
  // kRmsMinElements (a statistic needs elements). It separates transports an
  // element-wise bound cannot: int8 partial sums sit within the atol that
  // NCCL's bf16 ring needs at W >= 4, yet are ~2x further off over all.
  double rms = 0;
};
inline constexpr int64_t kRmsMinElements = 1024;

// A tolerance as written in task.toml: numbers or expressions over W, elem,
// the params and the size variables (so that it can scale with W or K).
struct ToleranceSpec {
  std::string atol = "0";
  std::string rtol = "0";
  std::string rms = "0";
};

// How an input's values relate across ranks.
struct Distribution {
  enum class Kind {
    kPerRank,     // every rank draws its own values (the default)
    kReplicated,  // every rank holds the same values (same_on_all_ranks = true)
    kShard,       // rank g of `group` holds the g-th slice along `dim` of one global tensor
  };
  Kind kind = Kind::kPerRank;
  int dim = 0;        // kShard: the sharded dimension of the local shape
  std::string group;  // kShard: a [[groups]] name; empty = the whole world
};

// A sub-communicator: the world split into groups of `size` ranks.
// contiguous: group = r / size, rank in group = r % size (TP inside a node);
// strided:    group = r % (W / size), rank in group = r / (W / size) (FSDP across TP).
struct GroupSpec {
  std::string name;
  std::string size;  // expression; must divide W
  enum class Layout { kContiguous, kStrided };
  Layout layout = Layout::kContiguous;
};

// The physical minimum of one call, per rank, as expressions: bytes every rank
// must move through its HBM and over NVLink, its flops, and the rounds of
// cross-rank synchronisation the operation needs at least (each one a flag
// round trip between peers, measured when the hardware is probed). Empty:
// unknown.
struct FloorSpec {
  std::string hbm_bytes;
  std::string link_bytes;
  std::string flops;
  std::string sync_rounds;
};

// The best known human kernel for the task, timed beside the reference so that
// a result says how far a kernel is from it (docs/tasks.md, [expert]). Either a
// kernel file in the task folder with the public technique it implements, or
// the reason no public technique beats the reference.
struct ExpertSpec {
  std::filesystem::path kernel;  // absolute; empty when `none` says why there is none
  std::string technique;         // which public technique, and where it comes from
  std::string none;              // why the task has no expert kernel
};

inline constexpr int kMaxInitPieces = 8;

// One range of a normal or uniform input's elements with its own parameters:
// elements [previous piece's until, until) of the tensor (the global tensor's
// index for a sharded input); the last piece has no `until` and takes the rest.
struct InitPieceSpec {
  std::string until;  // expression; empty on the last piece
  std::string a, b;   // expressions: mean and std (normal) or low and high (uniform)
};

// Every parameter is an expression over the size variables and W (e.g. std =
// "1 / sqrt(d_in)"), evaluated when the task is instantiated.
struct InitSpec {
  enum class Kind { kNormal, kUniform, kInt, kPermutation, kCustom };
  Kind kind = Kind::kNormal;
  std::string mean = "0", std = "1";            // normal
  std::string low = "-1", high = "1";           // uniform
  std::string int_low = "0", int_high = "100";  // int
  std::vector<InitPieceSpec> pieces;            // normal, uniform: by element range
  // normal: the std of a per-column offset (a column is an index along the
  // last dimension), drawn once per trial and the same on every rank; "0": none.
  std::string column_std = "0";
  // normal, uniform: the values along the last dimension of every row are
  // distinct after rounding to the dtype (a duplicate moves up one step of the
  // dtype until it is unique), so that top-k and sorts over a row have no ties.
  bool distinct = false;
};

struct TensorSpec {
  std::string name;
  std::string dtype;               // a dtype name or "T"
  std::vector<std::string> shape;  // expressions
  InitSpec init;                   // inputs only
  bool same_on_all_ranks = false;  // inputs only (distribution.kind kReplicated)
  Distribution distribution;       // inputs only
  bool inout = false;              // inputs only: updated in place, checked like an output
  std::string ranks;               // outputs only: "" = all ranks, else an expression for one rank
  std::optional<ToleranceSpec> tolerance;  // outputs and inout inputs
  // Outputs and inout inputs: the same whichever rank holds which input (a sum
  // over ranks), so an answer for rank-rotated inputs is right, not a mix-up.
  bool rank_symmetric = false;
  // Outputs only: the name of another output (integer, shape ["1"]) holding
  // how many rows of this one are valid; the first dimension is then a
  // capacity, and only the first `count` rows are compared (docs/tasks.md,
  // "Outputs whose length depends on the data"). Empty: every row counts.
  std::string count;
};

struct SizeSpec {
  std::string label;
  std::map<std::string, std::string> vars;  // variable -> expression
};

struct Policy {
  bool harness_collectives = false;
  bool nccl = false;
  bool cublas = false;
  bool cufft = false;
  bool cudnn = false;  // the GPU machine may lack libcudnn (docs/tasks.md, [policy])
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
  std::map<Dtype, ToleranceSpec> tolerance;
  std::vector<GroupSpec> groups;
  FloorSpec floor;
  std::optional<ExpertSpec> expert;  // absent: not yet stated
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

// A tensor at concrete sizes. A shape may depend on the rank (the variable
// `rank` in its expressions): then rank_shapes holds every rank's shape and
// shape/numel/nbytes are the largest, which is what the symmetric allocation
// holds on every rank.
struct ConcreteTensor {
  std::string name;
  Dtype dtype;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  size_t nbytes = 0;
  std::vector<std::vector<int64_t>> rank_shapes;  // empty: the same shape on every rank
  int only_rank = -1;   // outputs: >= 0 when only that rank's value is checked
  Tolerance tolerance;  // outputs: resolved for this dtype, W and size
  // Inputs: the init with its parameters evaluated (a, b are mean/std for
  // normal, low/high for uniform and int), and how values relate across ranks.
  InitSpec::Kind init = InitSpec::Kind::kNormal;
  double init_a = 0, init_b = 1;
  double init_column_std = 0;  // normal: see InitSpec::column_std
  bool init_distinct = false;  // normal, uniform: see InitSpec::distinct
  // Normal and uniform inputs with pieces: element ranges [previous until,
  // until) with their own a, b (the last one's until is kRest); empty: init_a,
  // init_b everywhere.
  struct Piece {
    static constexpr int64_t kRest = INT64_MAX;
    int64_t until = 0;
    double a = 0, b = 1;
  };
  std::vector<Piece> init_pieces;
  Distribution distribution;
  bool inout = false;
  int inout_of = -1;            // outputs: >= 0 for the checked state of in-place input inout_of
  bool rank_symmetric = false;  // outputs: see TensorSpec::rank_symmetric
  int count_output = -1;        // outputs: index of the output counting its valid rows, or -1

  // Elements in one row (a slice of the first dimension); 1 for a 1-D tensor.
  int64_t RowElems(int rank) const;
  // This rank's shape cut to its first `rows` rows (rows <= ShapeOf(rank)[0]):
  // the part of a counted output that is compared.
  ConcreteTensor FirstRows(int rank, int64_t rows) const;

  const std::vector<int64_t>& ShapeOf(int rank) const {
    return rank_shapes.empty() ? shape : rank_shapes[static_cast<size_t>(rank)];
  }
  int64_t NumelOf(int rank) const;
  size_t NbytesOf(int rank) const;
};

// A sub-communicator at a concrete W.
struct ConcreteGroup {
  std::string name;
  int size = 0;
  GroupSpec::Layout layout = GroupSpec::Layout::kContiguous;
  int IndexOf(int rank, int world) const;                // which group `rank` is in
  int RankIn(int rank, int world) const;                 // its rank inside that group
  std::vector<int> Members(int index, int world) const;  // world ranks, by group rank
};

struct Problem {
  const Task* task = nullptr;  // null in a worker, which gets the problem over the wire
  std::string task_name;       // the task's name: its oracle's and input generator's key
  int world = 0;
  Dtype dtype;  // the value of T
  std::string size_label;
  bool is_check_size = false;
  std::map<std::string, double> vars;  // params + size variables + W + elem
  std::vector<ConcreteTensor> inputs;
  // The task's outputs in task.toml order, then one entry per inout input
  // (inout_of >= 0), which kernels do not see among ctx->outputs.
  std::vector<ConcreteTensor> outputs;
  std::vector<ConcreteGroup> groups;
  size_t workspace_bytes = 0;
  double perf_bytes = 0;
  double busbw_factor = 1;
  // The floor (FloorSpec) per rank; 0 where the task gives none.
  double floor_hbm_bytes = 0, floor_link_bytes = 0, floor_flops = 0, floor_sync_rounds = 0;

  // Outputs a kernel writes (excludes the inout entries).
  int KernelOutputCount() const;
};

// Instantiates a task at world size W, dtype T and one of its sizes. W must
// be one the task declares, except W = 1 with `self_test` (the NCCL
// self-test, docs/eval-result.md), where the shapes decide.
Result<Problem> Instantiate(const Task& task, int world, Dtype dtype, const SizeSpec& size,
                            bool is_check_size, bool self_test = false);

// Every check of `kforge tasks validate` except running the oracle: all sizes
// at all world sizes and dtypes instantiate; returns one line per problem.
Status ValidateShapes(const Task& task);

}  // namespace kforge::eval
