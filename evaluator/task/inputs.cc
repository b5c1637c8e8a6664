#include "task/inputs.h"

#include <fmt/format.h>

#include <cmath>
#include <exception>
#include <limits>

#include "parallel.h"
#include "task/expr.h"

namespace kforge::eval {
namespace {

using internal::ParallelFor;
using internal::ThreadsFor;

// The splitmix64 finaliser: a bijective 64-bit mixer.
inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// One independent stream per (seed, rank, input).
uint64_t StreamKey(uint64_t seed, int rank, int input) {
  uint64_t k = Mix(seed ^ 0x6b666f7267652d69ULL);  // domain tag: inputs
  k = Mix(k + kGolden * (static_cast<uint64_t>(rank) + 1));
  return Mix(k + kGolden * (static_cast<uint64_t>(input) + 0x100));
}

// The i-th draw of a stream (counter-based: no state between elements).
inline uint64_t Draw(uint64_t key, uint64_t i) { return Mix(key + (i + 1) * kGolden); }
inline double Unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }  // [0, 1)

// A pseudo-random permutation of [0, n): a 4-round balanced Feistel network
// on the smallest even-bit domain >= n, cycle-walking values that fall
// outside [0, n). Bijective and computable per element, so it parallelises.
class Permutation {
 public:
  Permutation(uint64_t key, uint64_t n) : n_(n) {
    int bits = 2;
    while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
    half_ = (bits + 1) / 2;
    mask_ = (uint64_t{1} << half_) - 1;
    for (int r = 0; r < 4; ++r) keys_[r] = Draw(key, static_cast<uint64_t>(r));
  }
  uint64_t operator()(uint64_t x) const {
    do {
      x = Round(x);
    } while (x >= n_);
    return x;
  }

 private:
  uint64_t Round(uint64_t x) const {
    uint64_t l = x >> half_, r = x & mask_;
    for (uint64_t k : keys_) {
      const uint64_t next = l ^ (Mix(r ^ k) & mask_);
      l = r;
      r = next;
    }
    return (l << half_) | r;
  }
  uint64_t n_;
  int half_;
  uint64_t mask_;
  uint64_t keys_[4];
};

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
  const GeneratorFn* gen = FindGenerator(p.task->name);
  if (gen == nullptr) {
    return Error(
        ErrorKind::kNotFound,
        fmt::format("{}: input '{}' has init kind custom but the task registers no generator "
                    "(KF_INPUT_GENERATOR({}) in oracle.cpp)",
                    p.task->key, t.name, p.task->name));
  }
  OracleTensor tensor{t.name, t.shape, std::vector<double>(static_cast<size_t>(t.numel), 0.0)};
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
    return s.WithContext(fmt::format("{}: generator for input '{}'", p.task->key, t.name));
  if (tensor.data.size() != static_cast<size_t>(t.numel)) {
    return Error(ErrorKind::kInternal,
                 fmt::format("{}: generator resized input '{}' from {} to {} elements", p.task->key,
                             t.name, t.numel, tensor.data.size()));
  }
  ParallelFor(t.numel, ThreadsFor(t.numel, threads), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      StoreFromDouble(dst, t.dtype, static_cast<size_t>(i), tensor.data[i]);
  });
  return Status::Ok();
}

}  // namespace

Status GenerateInput(const Problem& p, int index, int rank, uint64_t seed, void* dst, int threads) {
  if (p.task == nullptr || index < 0 || index >= static_cast<int>(p.inputs.size()) ||
      index >= static_cast<int>(p.task->inputs.size())) {
    return Error(ErrorKind::kInternal, fmt::format("GenerateInput: no input {}", index));
  }
  const TensorSpec& spec = p.task->inputs[index];
  const ConcreteTensor& t = p.inputs[index];
  const int source_rank = spec.same_on_all_ranks ? 0 : rank;
  const uint64_t key = StreamKey(seed, source_rank, index);
  const int n_threads = ThreadsFor(t.numel, threads);
  const Dtype dt = t.dtype;
  const InitSpec& init = spec.init;

  switch (init.kind) {
    case InitSpec::Kind::kNormal: {
      // Box-Muller on pairs (2j, 2j+1): both outputs are used; chunks keep pairs whole.
      ParallelFor(
          t.numel, n_threads,
          [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; i += 2) {
              const uint64_t j = static_cast<uint64_t>(i);
              const double u1 = 1.0 - Unit(Draw(key, j));  // (0, 1]: log is finite
              const double u2 = Unit(Draw(key, j + 1));
              const double r = std::sqrt(-2.0 * std::log(u1)) * init.std;
              const double theta = 6.283185307179586 * u2;
              StoreFromDouble(dst, dt, j, init.mean + r * std::cos(theta));
              if (i + 1 < e) StoreFromDouble(dst, dt, j + 1, init.mean + r * std::sin(theta));
            }
          },
          2);
      return Status::Ok();
    }
    case InitSpec::Kind::kUniform:
      ParallelFor(t.numel, n_threads, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const double u = Unit(Draw(key, static_cast<uint64_t>(i)));
          StoreFromDouble(dst, dt, static_cast<size_t>(i), init.low + (init.high - init.low) * u);
        }
      });
      return Status::Ok();
    case InitSpec::Kind::kInt: {
      auto lo = Evaluate(init.int_low, p.vars);
      auto hi = Evaluate(init.int_high, p.vars);
      if (!lo.ok())
        return lo.status().WithContext(fmt::format("{}: input '{}' init.low", p.task->key, t.name));
      if (!hi.ok())
        return hi.status().WithContext(
            fmt::format("{}: input '{}' init.high", p.task->key, t.name));
      if (*lo != std::floor(*lo) || *hi != std::floor(*hi) || *lo > *hi ||
          std::fabs(*lo) > 0x1.0p62 || std::fabs(*hi) > 0x1.0p62) {
        return Error(
            ErrorKind::kInvalidInput,
            fmt::format("{}: input '{}': int bounds [{}, {}] must be integers with low <= high",
                        p.task->key, t.name, *lo, *hi));
      }
      const auto low = static_cast<int64_t>(*lo);
      const uint64_t span = static_cast<uint64_t>(static_cast<int64_t>(*hi) - low) + 1;
      ParallelFor(t.numel, n_threads, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const uint64_t h = Draw(key, static_cast<uint64_t>(i));
          StoreFromDouble(dst, dt, static_cast<size_t>(i),
                          static_cast<double>(low + static_cast<int64_t>(h % span)));
        }
      });
      return Status::Ok();
    }
    case InitSpec::Kind::kPermutation: {
      if (t.numel > 0 && static_cast<double>(t.numel - 1) > ExactIntegerLimit(dt)) {
        return Error(ErrorKind::kInvalidInput,
                     fmt::format("{}: input '{}': a permutation of {} elements does not fit {}",
                                 p.task->key, t.name, t.numel, DtypeName(dt)));
      }
      const Permutation perm(key, static_cast<uint64_t>(t.numel));
      ParallelFor(t.numel, n_threads, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          StoreFromDouble(dst, dt, static_cast<size_t>(i),
                          static_cast<double>(perm(static_cast<uint64_t>(i))));
        }
      });
      return Status::Ok();
    }
    case InitSpec::Kind::kCustom:
      return GenerateCustom(p, index, source_rank, seed, key, dst, threads);
  }
  return Error(ErrorKind::kInternal, "unknown init kind");
}

Result<HostInputs> GenerateAllInputs(const Problem& p, uint64_t seed, int threads) {
  HostInputs all(static_cast<size_t>(p.world));
  for (int r = 0; r < p.world; ++r) {
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      all[r].emplace_back(p.inputs[k].nbytes);
      KF_RETURN_IF_ERROR(
          GenerateInput(p, static_cast<int>(k), r, seed, all[r].back().data(), threads));
    }
  }
  return all;
}

Result<OracleIo> BuildOracleIo(const Problem& p, uint64_t seed,
                               const std::vector<std::vector<const void*>>& inputs_by_rank) {
  HostInputs generated;
  std::vector<std::vector<const void*>> ptrs = inputs_by_rank;
  if (ptrs.empty()) {
    KF_ASSIGN_OR_RETURN(generated, GenerateAllInputs(p, seed));
    ptrs.resize(generated.size());
    for (size_t r = 0; r < generated.size(); ++r) {
      for (const auto& bytes : generated[r]) ptrs[r].push_back(bytes.data());
    }
  }
  if (ptrs.size() != static_cast<size_t>(p.world)) {
    return Error(ErrorKind::kInternal,
                 fmt::format("BuildOracleIo: {} ranks of inputs for W = {}", ptrs.size(), p.world));
  }
  OracleIo io;
  io.world = p.world;
  io.params = p.vars;
  io.inputs.resize(ptrs.size());
  io.outputs.resize(ptrs.size());
  for (int r = 0; r < p.world; ++r) {
    if (ptrs[r].size() != p.inputs.size()) {
      return Error(ErrorKind::kInternal,
                   fmt::format("BuildOracleIo: rank {} has {} inputs, the task {}", r,
                               ptrs[r].size(), p.inputs.size()));
    }
    for (size_t k = 0; k < p.inputs.size(); ++k) {
      const ConcreteTensor& t = p.inputs[k];
      const void* src = ptrs[r][k];
      if (src == nullptr && t.numel > 0)
        return Error(ErrorKind::kInternal, "BuildOracleIo: null input");
      OracleTensor& o = io.inputs[r].emplace_back(OracleTensor{t.name, t.shape, {}});
      o.data.resize(static_cast<size_t>(t.numel));
      ParallelFor(t.numel, ThreadsFor(t.numel, 0), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          o.data[i] = LoadAsDouble(src, t.dtype, static_cast<size_t>(i));
      });
    }
    for (const ConcreteTensor& t : p.outputs) {
      io.outputs[r].push_back(
          OracleTensor{t.name, t.shape,
                       std::vector<double>(static_cast<size_t>(t.numel),
                                           std::numeric_limits<double>::quiet_NaN())});
    }
  }
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
          io.outputs[r][k].data.size() != static_cast<size_t>(p.outputs[k].numel)) {
        return Error(ErrorKind::kInternal, fmt::format("{}: oracle resized rank {}'s output '{}'",
                                                       p.task->key, r, p.outputs[k].name));
      }
    }
  }
  return Status::Ok();
}

}  // namespace kforge::eval
