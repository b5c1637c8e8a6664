// Task 058 (SigLIP loss over a ring of text shards) checks the communication.
// PKB's version of the task returns the loss in bf16, where each remote shard
// (~B * e^-10 ~ 0.012 at a loss of ~10) is below half an ulp, so a kernel that
// never exchanges anything passes. Here, at every world size, at every check
// size but the single pair and at PKB's own point, a kernel that leaves out
// any one remote shard fails the harness's comparison; at the small-D and
// zero-bias check sizes, so does one that scores its own text in place of the
// remote shards; and the bf16 accumulation PKB's reference does is shown to
// drop every remote shard.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kforge/evaluator/dtype.h"
#include "kforge/evaluator/task.h"
#include "kforge/oracle.h"
#include "kforge/oracle_math.h"
#include "task/compare.h"
#include "task/inputs.h"

namespace kforge::eval {
namespace {

constexpr uint64_t kSeed = 0x5349474c49500001ull;

const Task& SigLipTask() {
  static const Task task = [] {
    auto t =
        LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / "058_openclip_contrastive_loss");
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : Task{};
  }();
  return task;
}

double Softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

// terms[r][j]: the sum of rank r's loss terms against rank j's text (labels on the own shard's
// diagonal); own_negative[r]: rank r's images against its own text, negative-only.
struct Terms {
  std::vector<std::vector<double>> terms;
  std::vector<double> own_negative;
};

Terms ComputeShardTerms(const Problem& p, const OracleIo& io) {
  const int64_t b = io.in_shape(0, "image_features")[0], d = io.in_shape(0, "image_features")[1];
  const double scale = p.vars.at("logit_scale"), bias = -p.vars.at("neg_bias");
  Terms t{std::vector<std::vector<double>>(p.world, std::vector<double>(p.world)),
          std::vector<double>(p.world)};
  OracleParallelFor(p.world, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      auto img = io.in(static_cast<int>(r), "image_features");
      for (int j = 0; j < p.world; ++j) {
        auto txt = io.in(j, "text_features");
        double sum = 0, negative = 0;
        for (int64_t i = 0; i < b; ++i)
          for (int64_t k = 0; k < b; ++k) {
            double dot = 0;
            for (int64_t c = 0; c < d; ++c) dot += img[i * d + c] * txt[k * d + c];
            const double z = scale * dot + bias;
            sum += Softplus(j == r && i == k ? -z : z);
            negative += Softplus(z);
          }
        t.terms[r][j] = sum;
        if (j == r) t.own_negative[r] = negative;
      }
    }
  });
  return t;
}

// The same (size, W) twice (PKB's point, in two tests) is computed once.
const Terms& ShardTerms(const Problem& p, const OracleIo& io) {
  static std::map<std::pair<std::string, int>, Terms> cache;
  const auto key = std::make_pair(p.size_label, p.world);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, ComputeShardTerms(p, io)).first;
  return it->second;
}

// Whether the harness refuses `loss` as rank r's output when `expected` is right.
bool Fails(const Problem& p, int r, double loss, double expected) {
  const ConcreteTensor& out = p.outputs.at(0);
  std::vector<uint8_t> bytes(out.nbytes);
  StoreFromDouble(bytes.data(), out.dtype, 0, loss);
  CompareContext ctx;
  ctx.rank = r;
  ctx.world = p.world;
  const std::vector<double> want = {expected};
  return !CompareOutputRows(out, bytes.data(), want, {}, ctx).passed;
}

std::vector<std::pair<SizeSpec, bool>> SizesSeeingEveryShard(const Task& t) {
  std::vector<std::pair<SizeSpec, bool>> sizes;
  // One pair in D = 1: a remote logit 10 * x * y - 10 with x, y ~ N(0, 1) can be -30, so a
  // remote shard may add ~1e-13 there; every other size sees each shard.
  for (const SizeSpec& s : t.check_sizes)
    if (s.label != "one_pair") sizes.emplace_back(s, true);
  for (const SizeSpec& s : t.bench_sizes)
    if (s.label == "pkb") sizes.emplace_back(s, false);
  return sizes;
}

TEST(ContrastiveLoss, AKernelSkippingAnyRemoteShardFails) {
  const Task& t = SigLipTask();
  for (const auto& [size, is_check] : SizesSeeingEveryShard(t)) {
    for (int world : t.world_sizes) {
      SCOPED_TRACE(fmt::format("size '{}' at W={}", size.label, world));
      auto p = Instantiate(t, world, Dtype::kBF16, size, is_check);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      auto io = BuildOracleIo(*p, kSeed, {});
      ASSERT_TRUE(io.ok()) << io.status().ToString();
      const Terms terms = ShardTerms(*p, *io);
      const double b = static_cast<double>(p->vars.at("B"));
      if (is_check) {
        ASSERT_TRUE(RunOracle(*p, *io).ok());
      }
      for (int r = 0; r < world; ++r) {
        double all = 0;
        for (int j = 0; j < world; ++j) all += terms.terms[r][j];
        const double expected = all / b;
        if (is_check) {
          EXPECT_NEAR(io->out(r, "loss")[0], expected, 1e-12 * expected);
        }
        ASSERT_FALSE(Fails(*p, r, expected, expected));
        EXPECT_TRUE(Fails(*p, r, terms.terms[r][r] / b, expected))
            << "rank " << r << ": the local-only loss passes";
        for (int j = 0; j < world; ++j) {
          if (j == r) continue;
          EXPECT_TRUE(Fails(*p, r, (all - terms.terms[r][j]) / b, expected))
              << "rank " << r << ": leaving out rank " << j << "'s shard passes";
        }
      }
    }
  }
}

// Where the logits spread over several units (D = 33 at scale 10, or bias 0), the remote
// shards' terms depend on their contents, not only on how many there are: a kernel that scores
// its own text W - 1 times instead fails on every rank. (At D >= 200 and bias -10 the negative
// terms are ~e^-10 each with little spread, so such a kernel can come within the tolerance;
// skipping a shard still fails there, above.)
TEST(ContrastiveLoss, AKernelScoringItsOwnTextInPlaceOfTheRemoteShardsFails) {
  const Task& t = SigLipTask();
  for (const SizeSpec& size : t.check_sizes) {
    if (size.label != "odd" && size.label != "zero_bias") continue;
    for (int world : t.world_sizes) {
      SCOPED_TRACE(fmt::format("size '{}' at W={}", size.label, world));
      auto p = Instantiate(t, world, Dtype::kBF16, size, true);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      auto io = BuildOracleIo(*p, kSeed, {});
      ASSERT_TRUE(io.ok()) << io.status().ToString();
      const Terms terms = ShardTerms(*p, *io);
      const double b = static_cast<double>(p->vars.at("B"));
      for (int r = 0; r < world; ++r) {
        double all = 0;
        for (int j = 0; j < world; ++j) all += terms.terms[r][j];
        const double cheat = (terms.terms[r][r] + (world - 1) * terms.own_negative[r]) / b;
        EXPECT_TRUE(Fails(*p, r, cheat, all / b)) << "rank " << r;
      }
    }
  }
}

// PKB's reference adds each remote shard's loss to a bf16 loss of ~10: at its point every shard
// is below half an ulp there (1/32), so its output is the local-only loss whatever the remote
// shards hold. This is why task 058 returns fp32.
TEST(ContrastiveLoss, ABf16LossAsPkbAccumulatesItDropsEveryRemoteShard) {
  const Task& t = SigLipTask();
  const auto pkb = std::find_if(t.bench_sizes.begin(), t.bench_sizes.end(),
                                [](const SizeSpec& s) { return s.label == "pkb"; });
  ASSERT_NE(pkb, t.bench_sizes.end());
  for (int world : t.world_sizes) {
    SCOPED_TRACE(fmt::format("W={}", world));
    auto p = Instantiate(t, world, Dtype::kBF16, *pkb, false);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto io = BuildOracleIo(*p, kSeed, {});
    ASSERT_TRUE(io.ok()) << io.status().ToString();
    const Terms terms = ShardTerms(*p, *io);
    const double b = static_cast<double>(p->vars.at("B"));
    for (int r = 0; r < world; ++r) {
      const double local = om::RoundToBf16(terms.terms[r][r] / b);
      double loss = local;
      for (int j = 0; j < world; ++j) {
        if (j == r) continue;
        EXPECT_LT(terms.terms[r][j] / b, 1.0 / 32);
        loss = om::RoundToBf16(loss + om::RoundToBf16(terms.terms[r][j] / b));
      }
      EXPECT_EQ(loss, local) << "rank " << r;
    }
  }
}

}  // namespace
}  // namespace kforge::eval
