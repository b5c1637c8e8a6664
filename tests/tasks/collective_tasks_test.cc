// Tasks 001-008 as the harness sees them: each task.toml loads and instantiates
// at every world size, dtype and size; its oracle fills every output at every
// check size; and the reduction tolerances accept a ring-order bf16 sum while
// rejecting a sum with a rank missing or counted twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kforge/evaluator/dtype.h"
#include "kforge/evaluator/task.h"
#include "task/compare.h"
#include "task/inputs.h"
#include "transport.h"

namespace kforge::eval {
namespace {

const char* const kCollectives[] = {"001_allreduce",     "002_allgather", "003_broadcast",
                                    "004_reduce",        "005_scatter",   "006_gather",
                                    "007_reducescatter", "008_alltoall"};

Task Load(const std::string& key) {
  Result<Task> t = LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / key);
  EXPECT_TRUE(t.ok()) << key << ": " << t.status().ToString();
  return t.ok() ? *t : Task{};
}

TEST(CollectiveTasks, LoadValidateAndForbidLibraries) {
  for (const char* key : kCollectives) {
    Task t = Load(key);
    ASSERT_EQ(t.key, key);
    Status s = ValidateShapes(t);
    EXPECT_TRUE(s.ok()) << key << ": " << s.ToString();
    EXPECT_EQ(t.world_sizes, (std::vector<int>{2, 4, 8})) << key;
    EXPECT_FALSE(t.policy.harness_collectives) << key;
    EXPECT_FALSE(t.policy.nccl) << key;
    EXPECT_FALSE(t.policy.cublas) << key;
    EXPECT_FALSE(t.solutions.empty()) << key;
  }
}

// Issue 30: every collective names the best known human kernel timed beside its
// reference (a hand-written solution, with the technique it implements) or says why
// there is none, and its floor counts the synchronisation rounds no algorithm avoids.
TEST(CollectiveTasks, StateTheirExpertAndSyncRounds) {
  for (const char* key : kCollectives) {
    Task t = Load(key);
    ASSERT_TRUE(t.expert.has_value()) << key;
    if (t.expert->none.empty()) {
      EXPECT_FALSE(t.expert->technique.empty()) << key;
      EXPECT_NE(std::find(t.solutions.begin(), t.solutions.end(), t.expert->kernel),
                t.solutions.end())
          << key << ": the expert is one of the task's solutions, so the GPU checks run it";
    }
    EXPECT_FALSE(t.floor.sync_rounds.empty()) << key;
    for (int world : t.world_sizes) {
      for (const SizeSpec& size : t.bench_sizes) {
        Result<Problem> p = Instantiate(t, world, t.dtypes[0], size, false);
        ASSERT_TRUE(p.ok()) << p.status().ToString();
        // Every output depends on another rank's input: at least one round.
        EXPECT_GE(p->floor_sync_rounds, 1) << key << " W=" << world << " " << size.label;
      }
    }
  }
}

TEST(CollectiveTasks, RootedTasksUseRankOne) {
  for (const char* key : {"003_broadcast", "004_reduce", "005_scatter", "006_gather"}) {
    Task t = Load(key);
    EXPECT_EQ(t.params["root"], 1.0) << key;
  }
}

TEST(CollectiveTasks, OraclesFillEveryOutputAtEveryCheckSize) {
  for (const char* key : kCollectives) {
    Task t = Load(key);
    for (int world : t.world_sizes) {
      for (Dtype dt : t.dtypes) {
        for (const SizeSpec& size : t.check_sizes) {
          // The big sizes cost seconds of input generation and ValidateShapes
          // already instantiates them; the oracle code path is the same.
          if (size.label == "odd") continue;
          Result<Problem> p = Instantiate(t, world, dt, size, true);
          ASSERT_TRUE(p.ok()) << p.status().ToString();
          Result<OracleIo> io = BuildOracleIo(*p, /*trial_seed=*/world * 7919 + 1, {});
          ASSERT_TRUE(io.ok()) << io.status().ToString();
          Status s = RunOracle(*p, *io);
          ASSERT_TRUE(s.ok()) << key << " W=" << world << " " << size.label << ": " << s.ToString();
          for (int r = 0; r < world; ++r) {
            for (const OracleTensor& out : io->outputs[r]) {
              for (double v : out.data) {
                ASSERT_FALSE(std::isnan(v))
                    << key << " W=" << world << " " << size.label << " rank " << r;
              }
            }
          }
        }
      }
    }
  }
}

// Sums rank values in ring order starting at `start`, rounding every partial to
// bf16 as NCCL's ring reduction does; skip >= 0 leaves that rank out, twice >= 0
// adds that rank a second time.
double RingSumBf16(const OracleIo& io, size_t i, int start, int skip = -1, int twice = -1) {
  uint16_t cell = 0;
  double partial = 0;
  bool first = true;
  for (int k = 0; k < io.world; ++k) {
    const int p = (start + k) % io.world;
    if (p == skip) continue;
    const int times = p == twice ? 2 : 1;
    for (int j = 0; j < times; ++j) {
      const double v = io.in(p, "x")[i];
      StoreFromDouble(&cell, Dtype::kBF16, 0, first ? v : partial + v);
      partial = LoadAsDouble(&cell, Dtype::kBF16, 0);
      first = false;
    }
  }
  return partial;
}

TEST(CollectiveTasks, AllReduceBf16ToleranceSeparatesRightFromWrong) {
  Task t = Load("001_allreduce");
  const SizeSpec* aligned = nullptr;
  for (const SizeSpec& s : t.check_sizes) {
    if (s.label == "aligned") aligned = &s;
  }
  ASSERT_NE(aligned, nullptr);
  Result<Problem> p = Instantiate(t, 8, Dtype::kBF16, *aligned, true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  Result<OracleIo> io = BuildOracleIo(*p, 12345, {});
  ASSERT_TRUE(io.ok());
  ASSERT_TRUE(RunOracle(*p, *io).ok());

  const ConcreteTensor& y = p->outputs[0];
  auto expected = io->out(0, "y");
  std::vector<uint16_t> ring(y.numel), missing(y.numel), doubled(y.numel);
  for (size_t i = 0; i < static_cast<size_t>(y.numel); ++i) {
    const int start = static_cast<int>(i % 8);  // ring chunks start at different ranks
    StoreFromDouble(ring.data(), Dtype::kBF16, i, RingSumBf16(*io, i, start));
    StoreFromDouble(missing.data(), Dtype::kBF16, i, RingSumBf16(*io, i, start, /*skip=*/3));
    StoreFromDouble(doubled.data(), Dtype::kBF16, i, RingSumBf16(*io, i, start, -1, /*twice=*/5));
  }
  CompareContext ctx;
  ctx.world = 8;
  EXPECT_TRUE(CompareOutput(y, ring.data(), expected, ctx).passed);
  CompareReport miss = CompareOutput(y, missing.data(), expected, ctx);
  EXPECT_FALSE(miss.passed);
  EXPECT_GT(miss.bad_count, y.numel / 2);
  CompareReport dbl = CompareOutput(y, doubled.data(), expected, ctx);
  EXPECT_FALSE(dbl.passed);
  EXPECT_GT(dbl.bad_count, y.numel / 2);
}

// Which input element output element j of rank r sums, for the three
// reductions (all-reduce and reduce: the same index; reduce-scatter: rank r's
// chunk of N). -1: rank r's output is not checked.
int64_t SourceIndex(const Problem& p, int r, int64_t j) {
  const ConcreteTensor& y = p.outputs[0];
  if (y.only_rank >= 0 && y.only_rank != r) return -1;
  // Reduce: only the root holds the sum (every other rank's y is its own x).
  if (p.task->name == "reduce" && r != static_cast<int>(p.vars.at("root"))) return -1;
  if (p.task->name == "reducescatter") return r * y.NumelOf(r) + j;
  return j;
}

// A transport that ships each rank's input through `quantise` (per 128-element
// block) and sums the dequantised values in f32, rounding once to bf16.
template <typename Quantise>
std::vector<uint16_t> QuantisedSum(const Problem& p, const OracleIo& io, int r, Quantise quantise) {
  const ConcreteTensor& y = p.outputs[0];
  std::vector<uint16_t> out(static_cast<size_t>(y.NumelOf(r)));
  for (int64_t j = 0; j < y.NumelOf(r); ++j) {
    const int64_t i = SourceIndex(p, r, j);
    float acc = 0;
    for (int q = 0; q < io.world; ++q) {
      auto x = io.in(q, "x");
      const int64_t b0 = i / 128 * 128,
                    b1 = std::min<int64_t>(b0 + 128, static_cast<int64_t>(x.size()));
      double amax = 0;
      for (int64_t k = b0; k < b1; ++k) amax = std::max(amax, std::abs(x[k]));
      acc += static_cast<float>(quantise(x[i], amax));
    }
    StoreFromDouble(out.data(), Dtype::kBF16, static_cast<size_t>(j), acc);
  }
  return out;
}

// Tolerances scale with W: at every world size the sum NCCL's ring computes
// (partials rounded to bf16 at every step) passes; fp8 and int8 transport
// (block-scaled, summed in f32) fail at every W. Element-wise, int8 fails only
// at W=2; from W=4 on the ring is as far off element-wise, and the relative
// RMS bound (ring 0.0018/0.0027/0.0037 at W=2/4/8, int8 0.0065 at every W,
// fp8 0.026) refuses it.
TEST(CollectiveTasks, ReductionTolerancesScaleWithWorldSize) {
  for (const char* key :
       {"001_allreduce", "004_reduce", "007_reducescatter", "101_decode_allreduce"}) {
    Task t = Load(key);
    const SizeSpec* aligned = nullptr;
    for (const SizeSpec& s : t.check_sizes) {
      if (s.label == "aligned") aligned = &s;
    }
    ASSERT_NE(aligned, nullptr) << key;
    for (int w : {2, 4, 8}) {
      Result<Problem> p = Instantiate(t, w, Dtype::kBF16, *aligned, true);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      Result<OracleIo> io = BuildOracleIo(*p, 777 + w, {});
      ASSERT_TRUE(io.ok());
      ASSERT_TRUE(RunOracle(*p, *io).ok());
      const ConcreteTensor& y = p->outputs[0];
      for (int r = 0; r < w; ++r) {
        if (SourceIndex(*p, r, 0) < 0) continue;
        auto expected = io->outputs[r][0].data;
        std::vector<uint16_t> ring(static_cast<size_t>(y.NumelOf(r)));
        for (int64_t j = 0; j < y.NumelOf(r); ++j) {
          const int64_t i = SourceIndex(*p, r, j);
          StoreFromDouble(ring.data(), Dtype::kBF16, static_cast<size_t>(j),
                          RingSumBf16(*io, static_cast<size_t>(i), static_cast<int>(i % w)));
        }
        ConcreteTensor local = y;
        local.shape = y.ShapeOf(r);
        local.numel = y.NumelOf(r);
        local.nbytes = y.NbytesOf(r);
        local.rank_shapes.clear();
        CompareContext ctx;
        ctx.world = w;
        ctx.rank = r;
        CompareReport honest = CompareOutput(local, ring.data(), expected, ctx);
        EXPECT_TRUE(honest.passed)
            << key << " W=" << w << " ring: max abs err " << honest.max_abs_err;
        auto int8 = QuantisedSum(*p, *io, r, testing::Int8);
        CompareReport i8 = CompareOutput(local, int8.data(), expected, ctx);
        // From W=4 on, NCCL's own ring (bf16 partials) is as far from the
        // exact sum as an int8 block-scaled transport (max abs 0.039 vs 0.051
        // at W=4, 0.119 vs 0.076 at W=8), so no element-wise tolerance that
        // accepts the ring can refuse it there. At W=2 the ring rounds once
        // and the tolerance is tight enough that int8 fails.
        EXPECT_FALSE(i8.passed) << key << " W=" << w << " int8 transport passed (max abs err "
                                << i8.max_abs_err << ", rms " << i8.rms_rel_err
                                << ", tolerance atol " << y.tolerance.atol << ", rms "
                                << y.tolerance.rms << ")";
        EXPECT_LT(honest.rms_rel_err, y.tolerance.rms / 1.2) << key << " W=" << w << ": no margin";
        if (w > 2) {
          // Only the RMS bound refuses it here.
          EXPECT_EQ(i8.bad_count, 0) << key << " W=" << w;
          EXPECT_FALSE(i8.hints.empty());
        }
        // At bench sizes the timed calls meet the baseline's outputs, not the
        // exact sum: a ring started elsewhere stands in for the baseline.
        std::vector<double> baseline(static_cast<size_t>(y.NumelOf(r)));
        for (int64_t j = 0; j < y.NumelOf(r); ++j) {
          baseline[static_cast<size_t>(j)] = RingSumBf16(
              *io, static_cast<size_t>(SourceIndex(*p, r, j)), static_cast<int>((j + 1) % w));
        }
        ConcreteTensor vs_baseline = local;
        vs_baseline.tolerance = AgainstBaseline(y.tolerance);
        CompareReport ring_vs = CompareOutput(vs_baseline, ring.data(), baseline, ctx);
        EXPECT_TRUE(ring_vs.passed)
            << key << " W=" << w << " ring against the baseline's ring: rms "
            << ring_vs.rms_rel_err;
        CompareReport exact_vs =
            CompareOutput(vs_baseline, testing::ToBf16(expected).data(), baseline, ctx);
        EXPECT_TRUE(exact_vs.passed) << key << " W=" << w << " f32 sum against the baseline's ring";
        CompareReport i8_vs = CompareOutput(vs_baseline, int8.data(), baseline, ctx);
        EXPECT_FALSE(i8_vs.passed)
            << key << " W=" << w << " int8 against the baseline's ring: rms " << i8_vs.rms_rel_err
            << ", allowed " << vs_baseline.tolerance.rms;
        auto fp8 = QuantisedSum(*p, *io, r, testing::Fp8E4M3);
        EXPECT_FALSE(CompareOutput(local, fp8.data(), expected, ctx).passed)
            << key << " W=" << w << " fp8";
        CompareReport f8 = CompareOutput(local, fp8.data(), expected, ctx);
        std::printf(
            "%s W=%d rank %d: atol %.4f; max abs err ring %.4f, int8 %.4f (%lld bad); rms rel "
            "ring %.5f int8 %.5f fp8 %.5f (n %lld); against a ring: ring %.5f int8 %.5f\n",
            key, w, r, y.tolerance.atol, honest.max_abs_err, i8.max_abs_err,
            static_cast<long long>(i8.bad_count), honest.rms_rel_err, i8.rms_rel_err,
            f8.rms_rel_err, static_cast<long long>(local.numel), ring_vs.rms_rel_err,
            i8_vs.rms_rel_err);
        break;  // one checked rank per W is enough
      }
    }
  }
}

}  // namespace
}  // namespace kforge::eval
