#include "task/inputs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "parallel.h"
#include "task/expr.h"
#include "task/input_gen.h"

namespace kforge::eval {
namespace {

using internal::ParallelFor;
using internal::ThreadsFor;

// The largest integer a dtype holds exactly (and every integer below it).
double ExactIntegerLimit(Dtype dt) {
  switch (dt) {
    case Dtype::kF64:
      return 0x1.0p53;
    case Dtype::kF32:
      return 0x1.0p24;
    case Dtype::kF16:
      return 2048;
    case Dtype::kBF16:
      return 256;
    case Dtype::kFp8E4M3:
      return 16;
    case Dtype::kFp8E5M2:
      return 8;
    case Dtype::kI64:
      return 0x1.0p53;
    case Dtype::kI32:
      return 2147483647.0;
    case Dtype::kI8:
      return 127;
    case Dtype::kU8:
      return 255;
    case Dtype::kBool:
      return 1;
  }
  return 0;
}

Status GenerateCustom(const Problem& p, int index, int rank, uint64_t seed, uint64_t key, void* dst,
                      int threads) {
  const ConcreteTensor& t = p.inputs[index];
  const GeneratorFn* gen = FindGenerator(p.task_name);
  if (gen == nullptr) {
    return Error(
        ErrorKind::kNotFound,
        fmt::format("{}: input '{}' has init kind custom but the task registers no generator "
                    "(KF_INPUT_GENERATOR({}) in oracle.cpp)",
                    p.task_name, t.name, p.task_name));
  }
  const int64_t numel = t.NumelOf(rank);
  OracleTensor tensor{t.name, t.ShapeOf(rank),
                      std::vector<double>(static_cast<size_t>(numel), 0.0)};
  OracleRng rng(key);
  GeneratorIo io;
  io.world = p.world;
  io.rank = rank;
  io.input = index;
  io.input_name = t.name;
  io.params = p.vars;
  io.tensor = &tensor;
  io.rng = &rng;
  io.trial_seed = seed;
  Status s;
  try {
    s = (*gen)(io);
  } catch (const std::exception& e) {
    s = Error(ErrorKind::kInternal, fmt::format("threw: {}", e.what()));
  }
  if (!s.ok())
    return s.WithContext(fmt::format("{}: generator for input '{}'", p.task_name, t.name));
  if (tensor.data.size() != static_cast<size_t>(numel)) {
    return Error(ErrorKind::kInternal,
                 fmt::format("{}: generator resized input '{}' from {} to {} elements", p.task_name,
                             t.name, numel, tensor.data.size()));
  }
  ParallelFor(numel, ThreadsFor(numel, threads), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      StoreFromDouble(dst, t.dtype, static_cast<size_t>(i), tensor.data[i]);
  });
  return Status::Ok();
}

static_assert(gen::kMaxPieces == kMaxInitPieces, "the loader's limit is the generator's");

// A normal or uniform input's pieces, checked against its (global) element count.
Status SetPieces(const Problem& p, const ConcreteTensor& t, uint64_t global_numel,
                 gen::InputGen& g) {
  if (t.init_pieces.size() > static_cast<size_t>(gen::kMaxPieces)) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}: input '{}' has more than {} init pieces", p.task_name, t.name,
                             gen::kMaxPieces));
  }
  for (const ConcreteTensor::Piece& piece : t.init_pieces) {
    const bool rest = piece.until == ConcreteTensor::Piece::kRest;
    if (!rest && (piece.until <= 0 || static_cast<uint64_t>(piece.until) > global_numel)) {
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("{}: input '{}': init piece bound {} is outside its {} elements",
                               p.task_name, t.name, piece.until, global_numel));
    }
    g.until[g.pieces] = rest ? UINT64_MAX : static_cast<uint64_t>(piece.until);
    g.piece_a[g.pieces] = piece.a;
    g.piece_b[g.pieces] = piece.b;
    ++g.pieces;
  }
  return Status::Ok();
}

}  // namespace

Result<gen::InputGen> MakeInputGen(const Problem& p, int index, int rank, uint64_t seed) {
  if (index < 0 || index >= static_cast<int>(p.inputs.size())) {
    return Error(ErrorKind::kInternal, fmt::format("MakeInputGen: no input {}", index));
  }
  const ConcreteTensor& t = p.inputs[index];
  gen::InputGen g;
  g.dtype = static_cast<int>(t.dtype);
  g.a = t.init_a;
  g.b = t.init_b;
  int source_rank = rank;
  uint64_t global_numel = static_cast<uint64_t>(t.NumelOf(rank));
  switch (t.distribution.kind) {
    case Distribution::Kind::kPerRank:
      break;
    case Distribution::Kind::kReplicated:
      source_rank = 0;
      break;
    case Distribution::Kind::kShard: {
      source_rank = 0;  // one global tensor, the same in every group
      int count = p.world, index_in = rank;
      if (!t.distribution.group.empty()) {
        auto it = std::find_if(p.groups.begin(), p.groups.end(), [&](const ConcreteGroup& cg) {
          return cg.name == t.distribution.group;
        });
        if (it == p.groups.end()) {
          return Error(ErrorKind::kInvalidInput,
                       fmt::format("input '{}' is sharded over an unknown group '{}'", t.name,
                                   t.distribution.group));
        }
        count = it->size;
        index_in = it->RankIn(rank, p.world);
      }
      const std::vector<int64_t>& shape = t.ShapeOf(rank);
      if (t.distribution.dim < 0 || t.distribution.dim >= static_cast<int>(shape.size()) ||
          shape.size() > static_cast<size_t>(gen::kMaxDims)) {
        return Error(ErrorKind::kInvalidInput,
                     fmt::format("input '{}': shard dim {} is not a dimension of its shape", t.name,
                                 t.distribution.dim));
      }
      g.sharded = true;
      g.ndim = static_cast<int>(shape.size());
      for (int k = 0; k < g.ndim; ++k) g.local[k] = shape[k];
      g.shard_dim = t.distribution.dim;
      g.shard_index = index_in;
      g.shard_count = count;
      global_numel *= static_cast<uint64_t>(count);
      break;
    }
  }
  g.key = gen::StreamKey(seed, source_rank, index);
  switch (t.init) {
    case InitSpec::Kind::kNormal:
    case InitSpec::Kind::kUniform:
      g.kind = t.init == InitSpec::Kind::kNormal ? gen::kNormal : gen::kUniform;
      KF_RETURN_IF_ERROR(SetPieces(p, t, global_numel, g));
      if (t.init == InitSpec::Kind::kNormal && t.init_column_std > 0) {
        const std::vector<int64_t>& shape = t.ShapeOf(rank);
        int64_t columns = shape.empty() ? 1 : shape.back();
        if (g.sharded && g.shard_dim == g.ndim - 1) columns *= g.shard_count;
        g.column_std = t.init_column_std;
        g.column_key = gen::ColumnKey(seed, index);
        g.column_len = static_cast<uint64_t>(std::max<int64_t>(columns, 1));
      }
      if (t.init_distinct) {
        const std::vector<int64_t>& shape = t.ShapeOf(rank);
        g.distinct_len =
            static_cast<uint64_t>(shape.empty() ? 1 : std::max<int64_t>(shape.back(), 1));
      }
      break;
    case InitSpec::Kind::kInt: {
      g.kind = gen::kInt;
      if (std::fabs(t.init_a) > 0x1.0p62 || std::fabs(t.init_b) > 0x1.0p62) {
        return Error(ErrorKind::kInvalidInput,
                     fmt::format("{}: input '{}': int bounds [{}, {}] are too large", p.task_name,
                                 t.name, t.init_a, t.init_b));
      }
      g.int_low = static_cast<int64_t>(t.init_a);
      g.int_span = static_cast<uint64_t>(static_cast<int64_t>(t.init_b) - g.int_low) + 1;
      break;
    }
    case InitSpec::Kind::kPermutation:
      if (global_numel > 0 && static_cast<double>(global_numel - 1) > ExactIntegerLimit(t.dtype)) {
        return Error(ErrorKind::kInvalidInput,
                     fmt::format("{}: input '{}': a permutation of {} elements does not fit {}",
                                 p.task_name, t.name, global_numel, DtypeName(t.dtype)));
      }
      g.kind = gen::kPermutation;
      g.perm = gen::Feistel::Make(g.key, global_numel);
      break;
    case InitSpec::Kind::kCustom:
      return Error(ErrorKind::kInvalidInput,
                   fmt::format("input '{}' is custom: only the task's generator makes it", t.name));
  }
  return g;
}

Status GenerateInput(const Problem& p, int index, int rank, uint64_t seed, void* dst, int threads) {
  if (index < 0 || index >= static_cast<int>(p.inputs.size())) {
    return Error(ErrorKind::kInternal, fmt::format("GenerateInput: no input {}", index));
  }
  const ConcreteTensor& t = p.inputs[index];
  if (t.init == InitSpec::Kind::kCustom) {
    const int source_rank = t.distribution.kind == Distribution::Kind::kPerRank ? rank : 0;
    return GenerateCustom(p, index, source_rank, seed, gen::StreamKey(seed, source_rank, index),
                          dst, threads);
  }
  KF_ASSIGN_OR_RETURN(gen::InputGen g, MakeInputGen(p, index, rank, seed));
  const int64_t n = t.NumelOf(rank);
  ParallelFor(n, ThreadsFor(n, threads), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) g.Fill(dst, static_cast<uint64_t>(i));
  });
  if (g.distinct_len > 0) {
    const int64_t rows = n / static_cast<int64_t>(g.distinct_len);
    ParallelFor(rows, ThreadsFor(rows, threads), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r)
        gen::MakeRowDistinct(dst, g.dtype, static_cast<uint64_t>(r), g.distinct_len);
    });
  }
  return Status::Ok();
}

Status GenerateAllInputsInto(const Problem& p, uint64_t seed, HostInputs* all, int threads) {
  all->resize(static_cast<size_t>(p.world));
  for (int r = 0; r < p.world; ++r) {
    auto& mine = (*all)[static_cast<size_t>(r)];
    mine.resize(p.inputs.size());
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      // Every byte is generated: a buffer of the right size is reused as it is.
      mine[k].resize(p.inputs[k].NbytesOf(r));
      KF_RETURN_IF_ERROR(GenerateInput(p, static_cast<int>(k), r, seed, mine[k].data(), threads));
    }
  }
  return Status::Ok();
}

Result<HostInputs> GenerateAllInputs(const Problem& p, uint64_t seed, int threads) {
  HostInputs all;
  KF_RETURN_IF_ERROR(GenerateAllInputsInto(p, seed, &all, threads));
  return all;
}

Status BuildOracleIoInto(const Problem& p,
                         const std::vector<std::vector<const void*>>& inputs_by_rank,
                         OracleIo* io) {
  const auto& ptrs = inputs_by_rank;
  if (ptrs.size() != static_cast<size_t>(p.world)) {
    return Error(ErrorKind::kInternal,
                 fmt::format("BuildOracleIo: {} ranks of inputs for W = {}", ptrs.size(), p.world));
  }
  io->world = p.world;
  io->params = p.vars;
  io->inputs.resize(ptrs.size());
  io->outputs.resize(ptrs.size());
  // Reused buffers keep their capacity: resizing to the same size writes
  // nothing, and every element is written below.
  auto shape = [](OracleTensor& o, const std::string& name, std::vector<int64_t> dims,
                  int64_t numel) {
    o.name = name;
    o.shape = std::move(dims);
    o.data.resize(static_cast<size_t>(numel));
  };
  for (int r = 0; r < p.world; ++r) {
    if (ptrs[r].size() != p.inputs.size()) {
      return Error(ErrorKind::kInternal,
                   fmt::format("BuildOracleIo: rank {} has {} inputs, the task {}", r,
                               ptrs[r].size(), p.inputs.size()));
    }
    io->inputs[r].resize(p.inputs.size());
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      const ConcreteTensor& t = p.inputs[k];
      const void* src = ptrs[r][k];
      if (src == nullptr && t.NumelOf(r) > 0)
        return Error(ErrorKind::kInternal, "BuildOracleIo: null input");
      OracleTensor& o = io->inputs[r][k];
      const int64_t numel = t.NumelOf(r);
      shape(o, t.name, t.ShapeOf(r), numel);
      const size_t elem = DtypeSize(t.dtype);
      ParallelFor(numel, ThreadsFor(numel, 0), [&](int64_t b, int64_t e) {
        LoadAllAsDouble(static_cast<const unsigned char*>(src) + static_cast<size_t>(b) * elem,
                        t.dtype, static_cast<size_t>(e - b), o.data.data() + b);
      });
    }
    io->outputs[r].resize(p.outputs.size());
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      const ConcreteTensor& t = p.outputs[k];
      OracleTensor& o = io->outputs[r][k];
      shape(o, t.name, t.ShapeOf(r), t.NumelOf(r));
      std::fill(o.data.begin(), o.data.end(), std::numeric_limits<double>::quiet_NaN());
    }
  }
  return Status::Ok();
}

Result<OracleIo> BuildOracleIo(const Problem& p, uint64_t seed,
                               const std::vector<std::vector<const void*>>& inputs_by_rank) {
  HostInputs generated;
  std::vector<std::vector<const void*>> ptrs = inputs_by_rank;
  if (ptrs.empty()) {
    KF_RETURN_IF_ERROR(GenerateAllInputsInto(p, seed, &generated));
    ptrs.resize(generated.size());
    for (size_t r = 0; r < generated.size(); ++r) {
      for (const auto& bytes : generated[r]) ptrs[r].push_back(bytes.data());
    }
  }
  OracleIo io;
  KF_RETURN_IF_ERROR(BuildOracleIoInto(p, ptrs, &io));
  return io;
}

Status RunOracle(const Problem& p, OracleIo& io) {
  const OracleFn* fn = FindOracle(p.task->name);
  if (fn == nullptr) {
    return Error(
        ErrorKind::kNotFound,
        fmt::format(
            "{}: no oracle registered under '{}' (is {}/oracle.cpp built into kforge_tasks?)",
            p.task->key, p.task->name, p.task->key));
  }
  Status s;
  try {
    s = (*fn)(io);
  } catch (const std::exception& e) {
    s = Error(ErrorKind::kInternal, fmt::format("threw: {}", e.what()));
  }
  if (!s.ok()) return s.WithContext(fmt::format("{}: oracle", p.task->key));
  for (size_t r = 0; r < io.outputs.size(); ++r) {
    for (size_t k = 0; k < p.outputs.size(); ++k) {
      if (io.outputs[r].size() != p.outputs.size() ||
          io.outputs[r][k].data.size() !=
              static_cast<size_t>(p.outputs[k].NumelOf(static_cast<int>(r)))) {
        return Error(ErrorKind::kInternal, fmt::format("{}: oracle resized rank {}'s output '{}'",
                                                       p.task->key, r, p.outputs[k].name));
      }
    }
  }
  return Status::Ok();
}

}  // namespace kforge::eval
