// Task + (W, dtype, size) → Problem: every expression evaluated to numbers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kforge/evaluator/task.h"
#include "task/expr.h"

namespace kforge::eval {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
// No tensor may exceed 2^40 elements: far past any GPU, and keeps products exact.
constexpr int64_t kMaxNumel = int64_t{1} << 40;

// Binds the size's variables on top of `vars`. A variable may read W, elem,
// the params and other size variables; they are evaluated in dependency order
// (TOML tables do not keep the order they were written in), cycles are errors.
Status BindSizeVars(const SizeSpec& size, ExprVars& vars) {
  std::map<std::string, Expr> pending;
  for (const auto& [name, text] : size.vars) {
    KF_ASSIGN_OR_RETURN(Expr e, Expr::Parse(text));
    pending.emplace(name, std::move(e));
  }
  while (!pending.empty()) {
    bool progressed = false;
    for (auto it = pending.begin(); it != pending.end();) {
      const auto deps = it->second.Variables();
      const bool ready = std::all_of(deps.begin(), deps.end(), [&](const std::string& d) {
        return pending.count(d) == 0 || d == it->first;
      });
      if (!ready) {
        ++it;
        continue;
      }
      KF_ASSIGN_OR_RETURN(int64_t v, EvaluateInt(it->second.text(), vars,
                                                 fmt::format("size variable {}", it->first)));
      vars[it->first] = static_cast<double>(v);
      it = pending.erase(it);
      progressed = true;
    }
    if (!progressed) {
      std::string names;
      for (const auto& [name, e] : pending) names += (names.empty() ? "" : ", ") + name;
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("size variables depend on each other in a cycle: {}", names));
    }
  }
  return Status::Ok();
}

// The shape at every rank when a dimension reads `rank`; shape/numel are then
// the largest rank's (what the symmetric allocation holds everywhere).
Status ResolveShape(const TensorSpec& spec, const ExprVars& vars, int world, ConcreteTensor& c) {
  bool per_rank = false;
  for (const std::string& dim : spec.shape) {
    KF_ASSIGN_OR_RETURN(Expr e, Expr::Parse(dim));
    for (const std::string& v : e.Variables()) per_rank = per_rank || v == "rank";
  }
  auto shape_at = [&](const ExprVars& at, std::vector<int64_t>& shape, int64_t& numel) -> Status {
    numel = 1;
    for (const std::string& dim : spec.shape) {
      KF_ASSIGN_OR_RETURN(int64_t d, EvaluateInt(dim, at, "shape"));
      shape.push_back(d);
      if (d != 0 && numel > kMaxNumel / d) {
        return Error(ErrorKind::kInvalidInput, fmt::format("more than 2^40 elements"));
      }
      numel *= d;
    }
    return Status::Ok();
  };
  if (!per_rank) {
    KF_RETURN_IF_ERROR(shape_at(vars, c.shape, c.numel));
  } else {
    ExprVars at = vars;
    c.numel = -1;
    for (int r = 0; r < world; ++r) {
      at["rank"] = r;
      std::vector<int64_t> shape;
      int64_t numel = 0;
      if (Status s = shape_at(at, shape, numel); !s.ok())
        return s.WithContext(fmt::format("at rank {}", r));
      if (numel > c.numel) {
        c.numel = numel;
        c.shape = shape;
      }
      c.rank_shapes.push_back(std::move(shape));
    }
  }
  c.nbytes = static_cast<size_t>(c.numel) * DtypeSize(c.dtype);
  return Status::Ok();
}

Status ResolveTolerance(const Task& task, const TensorSpec& spec, const ExprVars& vars,
                        ConcreteTensor& c);

// A normal's mean/std or a uniform's low/high, and its pieces, at these sizes.
// Piece bounds are element indices of the tensor (the global one when it is
// sharded), increasing; MakeInputGen checks them against the element count.
Status ResolveContinuousInit(const TensorSpec& spec, const ExprVars& vars, ConcreteTensor& c) {
  const bool normal = spec.init.kind == InitSpec::Kind::kNormal;
  auto params = [&](const std::string& ea, const std::string& eb, double& a, double& b) -> Status {
    KF_ASSIGN_OR_RETURN(a, Evaluate(ea, vars));
    KF_ASSIGN_OR_RETURN(b, Evaluate(eb, vars));
    if (!std::isfinite(a) || !std::isfinite(b) || (normal && b < 0) || (!normal && !(a < b))) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("input '{}': init {} = {} and {} = {} ({})", spec.name,
                               normal ? "mean" : "low", a, normal ? "std" : "high", b,
                               normal ? "std must be finite and >= 0" : "needs low < high"));
    }
    return Status::Ok();
  };
  KF_RETURN_IF_ERROR(normal ? params(spec.init.mean, spec.init.std, c.init_a, c.init_b)
                            : params(spec.init.low, spec.init.high, c.init_a, c.init_b));
  if (normal) {
    KF_ASSIGN_OR_RETURN(c.init_column_std, Evaluate(spec.init.column_std, vars));
    if (!std::isfinite(c.init_column_std) || c.init_column_std < 0) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("input '{}': init column_std = {} must be finite and >= 0",
                               spec.name, c.init_column_std));
    }
  }
  if (spec.init.pieces.empty()) return Status::Ok();
  int64_t previous = 0;
  for (const InitPieceSpec& ps : spec.init.pieces) {
    ConcreteTensor::Piece piece;
    KF_RETURN_IF_ERROR(params(ps.a, ps.b, piece.a, piece.b));
    if (ps.until.empty()) {
      piece.until = ConcreteTensor::Piece::kRest;
    } else {
      KF_ASSIGN_OR_RETURN(piece.until, EvaluateInt(ps.until, vars, "until"));
    }
    if (piece.until <= previous) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("input '{}': init piece bound until = {} must be above the "
                               "previous one ({}): pieces are increasing element ranges",
                               spec.name, piece.until, previous));
    }
    previous = piece.until;
    c.init_pieces.push_back(piece);
  }
  return Status::Ok();
}

Result<ConcreteTensor> Resolve(const Task& task, const TensorSpec& spec, Dtype t,
                               const ExprVars& vars, int world, bool is_output) {
  ConcreteTensor c;
  c.name = spec.name;
  c.rank_symmetric = spec.rank_symmetric;
  if (spec.dtype == "T") {
    c.dtype = t;
  } else {
    KF_ASSIGN_OR_RETURN(c.dtype, ParseDtype(spec.dtype));
  }
  KF_RETURN_IF_ERROR(ResolveShape(spec, vars, world, c));
  if (!is_output) {
    c.init = spec.init.kind;
    c.distribution = spec.distribution;
    if (spec.same_on_all_ranks) c.distribution.kind = Distribution::Kind::kReplicated;
    c.inout = spec.inout;
    switch (spec.init.kind) {
      case InitSpec::Kind::kNormal:
      case InitSpec::Kind::kUniform:
        KF_RETURN_IF_ERROR(ResolveContinuousInit(spec, vars, c));
        c.init_distinct = spec.init.distinct;
        if (c.init_distinct && !IsFloating(c.dtype)) {
          return Error(ErrorKind::kInvalidInput,
                       fmt::format("input '{}': init distinct needs a floating dtype, not {}",
                                   spec.name, DtypeName(c.dtype)));
        }
        break;
      case InitSpec::Kind::kInt: {
        KF_ASSIGN_OR_RETURN(double lo, Evaluate(spec.init.int_low, vars));
        KF_ASSIGN_OR_RETURN(double hi, Evaluate(spec.init.int_high, vars));
        if (lo != std::floor(lo) || hi != std::floor(hi) || lo > hi) {
          return Error(
              ErrorKind::kInvalidInput,
              fmt::format(
                  "init int bounds low = {} and high = {} must be integers with low <= high", lo,
                  hi));
        }
        c.init_a = lo;
        c.init_b = hi;
        break;
      }
      case InitSpec::Kind::kPermutation:
      case InitSpec::Kind::kCustom:
        break;
    }
    return c;
  }
  if (!spec.ranks.empty()) {
    KF_ASSIGN_OR_RETURN(int64_t r, EvaluateInt(spec.ranks, vars, "ranks"));
    if (r >= world) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("ranks '{}' = {} is not a rank of W = {}", spec.ranks, r, world));
    }
    c.only_rank = static_cast<int>(r);
  }
  KF_RETURN_IF_ERROR(ResolveTolerance(task, spec, vars, c));
  return c;
}

// An output's (or an inout input's) tolerance for its dtype at these sizes.
Status ResolveTolerance(const Task& task, const TensorSpec& spec, const ExprVars& vars,
                        ConcreteTensor& c) {
  const ToleranceSpec* tol = nullptr;
  if (spec.tolerance) {
    tol = &*spec.tolerance;
  } else if (auto it = task.tolerance.find(c.dtype); it != task.tolerance.end()) {
    tol = &it->second;
  }
  if (tol != nullptr) {
    KF_ASSIGN_OR_RETURN(c.tolerance.atol, Evaluate(tol->atol, vars));
    KF_ASSIGN_OR_RETURN(c.tolerance.rtol, Evaluate(tol->rtol, vars));
    KF_ASSIGN_OR_RETURN(c.tolerance.rms, Evaluate(tol->rms, vars));
    if (!(c.tolerance.atol >= 0) || !(c.tolerance.rtol >= 0) || !(c.tolerance.rms >= 0)) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("tolerance of '{}' is negative: atol = {}, rtol = {}, rms = {}",
                               spec.name, c.tolerance.atol, c.tolerance.rtol, c.tolerance.rms));
    }
  } else if (IsFloating(c.dtype)) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("no tolerance for dtype {}", DtypeName(c.dtype)));
  }  // integers and bool compare exactly
  return Status::Ok();
}

}  // namespace

int64_t ConcreteTensor::NumelOf(int rank) const {
  if (rank_shapes.empty()) return numel;
  int64_t n = 1;
  for (int64_t d : rank_shapes[static_cast<size_t>(rank)]) n *= d;
  return n;
}

size_t ConcreteTensor::NbytesOf(int rank) const {
  return static_cast<size_t>(NumelOf(rank)) * DtypeSize(dtype);
}

int64_t ConcreteTensor::RowElems(int rank) const {
  const auto& s = ShapeOf(rank);
  int64_t n = 1;
  for (size_t d = 1; d < s.size(); ++d) n *= s[d];
  return n;
}

ConcreteTensor ConcreteTensor::FirstRows(int rank, int64_t rows) const {
  ConcreteTensor c = *this;
  c.shape = ShapeOf(rank);
  if (!c.shape.empty()) c.shape[0] = rows;
  c.rank_shapes.clear();
  c.numel = 1;
  for (int64_t d : c.shape) c.numel *= d;
  c.nbytes = static_cast<size_t>(c.numel) * DtypeSize(dtype);
  return c;
}

int ConcreteGroup::IndexOf(int rank, int world) const {
  return layout == GroupSpec::Layout::kContiguous ? rank / size : rank % (world / size);
}

int ConcreteGroup::RankIn(int rank, int world) const {
  return layout == GroupSpec::Layout::kContiguous ? rank % size : rank / (world / size);
}

std::vector<int> ConcreteGroup::Members(int index, int world) const {
  std::vector<int> ranks;
  for (int g = 0; g < size; ++g) {
    ranks.push_back(layout == GroupSpec::Layout::kContiguous ? index * size + g
                                                             : g * (world / size) + index);
  }
  return ranks;
}

int Problem::KernelOutputCount() const {
  int n = 0;
  for (const ConcreteTensor& t : outputs) n += t.inout_of < 0 ? 1 : 0;
  return n;
}

Result<Problem> Instantiate(const Task& task, int world, Dtype dtype, const SizeSpec& size,
                            bool is_check_size, bool self_test) {
  auto where = [&] {
    return fmt::format("{} at W={}, {}, {} size '{}'", task.key, world, DtypeName(dtype),
                       is_check_size ? "check" : "bench", size.label);
  };
  const bool declared =
      std::find(task.world_sizes.begin(), task.world_sizes.end(), world) != task.world_sizes.end();
  if (!declared && !(self_test && world == 1)) {
    std::string supported;
    for (int w : task.world_sizes) supported += (supported.empty() ? "" : ", ") + std::to_string(w);
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: world size {} is not supported (supported: {})", task.key, world,
                             supported));
  }
  if (std::find(task.dtypes.begin(), task.dtypes.end(), dtype) == task.dtypes.end()) {
    std::string supported;
    for (Dtype d : task.dtypes)
      supported += (supported.empty() ? "" : ", ") + std::string(DtypeName(d));
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: dtype {} is not supported (supported: {})", task.key,
                             DtypeName(dtype), supported));
  }
  Problem p;
  p.task = &task;
  p.task_name = task.name;
  p.world = world;
  p.dtype = dtype;
  p.size_label = size.label;
  p.is_check_size = is_check_size;
  p.vars = task.params;
  if (auto root = task.params.find("root"); root != task.params.end()) {
    if (root->second < 0 || root->second >= world || root->second != std::floor(root->second)) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{}: params.root = {} is not a rank of W = {}", where(),
                               root->second, world));
    }
  }
  p.vars["W"] = world;
  p.vars["elem"] = static_cast<double>(DtypeSize(dtype));
  if (Status s = BindSizeVars(size, p.vars); !s.ok()) return s.WithContext(where());

  for (size_t i = 0; i < task.groups.size(); ++i) {
    const GroupSpec& g = task.groups[i];
    auto size = EvaluateInt(g.size, p.vars, "group size");
    if (!size.ok())
      return size.status().WithContext(fmt::format("{}: groups[{}] '{}'", where(), i, g.name));
    if (*size < 1 || world % *size != 0) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{}: groups[{}] '{}': size {} does not divide W = {}", where(), i,
                               g.name, *size, world));
    }
    p.groups.push_back({g.name, static_cast<int>(*size), g.layout});
  }
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    auto c = Resolve(task, task.inputs[i], dtype, p.vars, world, false);
    if (!c.ok())
      return c.status().WithContext(
          fmt::format("{}: inputs[{}] '{}'", where(), i, task.inputs[i].name));
    p.inputs.push_back(std::move(*c));
  }
  for (size_t i = 0; i < task.outputs.size(); ++i) {
    auto c = Resolve(task, task.outputs[i], dtype, p.vars, world, true);
    if (!c.ok())
      return c.status().WithContext(
          fmt::format("{}: outputs[{}] '{}'", where(), i, task.outputs[i].name));
    p.outputs.push_back(std::move(*c));
  }
  for (size_t i = 0; i < task.outputs.size(); ++i) {
    if (task.outputs[i].count.empty()) continue;
    for (size_t k = 0; k < task.outputs.size(); ++k) {
      if (task.outputs[k].name == task.outputs[i].count)
        p.outputs[i].count_output = static_cast<int>(k);
    }
  }
  // Each inout input's state after the call is checked like an output.
  for (size_t i = 0; i < task.inputs.size(); ++i) {
    if (!task.inputs[i].inout) continue;
    ConcreteTensor c = p.inputs[i];
    c.inout = false;
    c.inout_of = static_cast<int>(i);
    if (Status s = ResolveTolerance(task, task.inputs[i], p.vars, c); !s.ok())
      return s.WithContext(fmt::format("{}: inputs[{}] '{}'", where(), i, task.inputs[i].name));
    p.outputs.push_back(std::move(c));
  }

  if (task.workspace.empty()) {
    size_t largest = 0;
    for (const auto& t : p.inputs) largest = std::max(largest, t.nbytes);
    for (const auto& t : p.outputs) largest = std::max(largest, t.nbytes);
    p.workspace_bytes = 2 * largest + kMiB;
  } else {
    auto ws = EvaluateInt(task.workspace, p.vars, "workspace");
    if (!ws.ok()) return ws.status().WithContext(where());
    p.workspace_bytes = static_cast<size_t>(*ws);
  }
  auto bytes = Evaluate(task.perf_bytes, p.vars);
  if (!bytes.ok()) return bytes.status().WithContext(where() + ": perf.bytes");
  if (*bytes < 0) return Error(ErrorKind::kInvalidInput, where() + ": perf.bytes is negative");
  p.perf_bytes = *bytes;
  auto factor = Evaluate(task.perf_busbw_factor, p.vars);
  if (!factor.ok()) return factor.status().WithContext(where() + ": perf.busbw_factor");
  if (*factor < 0)
    return Error(ErrorKind::kInvalidInput, where() + ": perf.busbw_factor is negative");
  p.busbw_factor = *factor;
  const std::pair<const std::string*, double*> floors[] = {
      {&task.floor.hbm_bytes, &p.floor_hbm_bytes},
      {&task.floor.link_bytes, &p.floor_link_bytes},
      {&task.floor.flops, &p.floor_flops},
      {&task.floor.sync_rounds, &p.floor_sync_rounds}};
  for (const auto& [text, dst] : floors) {
    if (text->empty()) continue;
    auto v = Evaluate(*text, p.vars);
    if (!v.ok()) return v.status().WithContext(where() + ": floor");
    if (!(*v >= 0)) return Error(ErrorKind::kInvalidInput, where() + ": a floor is negative");
    *dst = *v;
  }
  return p;
}

Status ValidateShapes(const Task& task) {
  for (int world : task.world_sizes) {
    for (Dtype dt : task.dtypes) {
      for (const auto& s : task.check_sizes)
        KF_RETURN_IF_ERROR(Instantiate(task, world, dt, s, true).status());
      for (const auto& s : task.bench_sizes)
        KF_RETURN_IF_ERROR(Instantiate(task, world, dt, s, false).status());
    }
  }
  return Status::Ok();
}

}  // namespace kforge::eval
