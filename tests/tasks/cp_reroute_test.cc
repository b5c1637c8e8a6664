// Task 117 (hybrid context parallelism's sample reroute): the generator's schedule is the same on
// every rank, gives every sequence a length in [1, L] and an aligned power-of-two group of the
// size Megatron's gpus_needed asks for, and spans several ranks at the sizes meant to; the oracle
// on a schedule small enough to apply by hand.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "kforge/evaluator/task.h"
#include "kforge/oracle.h"
#include "oracle_io.h"

namespace kforge::eval {
namespace {

const char kName[] = "cp_alltoallv_load_balance";

std::vector<double> Generate(const std::map<std::string, double>& vars, int world, int rank,
                             const std::string& input, int64_t n, uint64_t seed) {
  const GeneratorFn* fn = FindGenerator(kName);
  EXPECT_NE(fn, nullptr);
  if (fn == nullptr) return {};
  OracleTensor t;
  t.name = input;
  t.shape = {n};
  t.data.assign(static_cast<size_t>(n), 0.0);
  OracleRng rng(seed * 31 + static_cast<uint64_t>(rank));
  GeneratorIo gen;
  gen.world = world;
  gen.rank = rank;
  gen.input_name = input;
  gen.params = vars;
  gen.tensor = &t;
  gen.rng = &rng;
  gen.trial_seed = seed;
  Status s = (*fn)(gen);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return t.data;
}

TEST(CpReroute, ScheduleIsReplicatedAndGivesEachSequenceItsAlignedGroup) {
  auto task =
      LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / "117_cp_alltoallv_load_balance");
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  std::vector<SizeSpec> sizes = task->check_sizes;
  sizes.insert(sizes.end(), task->bench_sizes.begin(), task->bench_sizes.end());
  for (const SizeSpec& size : sizes) {
    for (int w : {2, 4, 8}) {
      auto p = Instantiate(*task, w, Dtype::kI64, size, true);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      const int64_t ns = static_cast<int64_t>(p->vars.at("NS"));
      const int64_t max_len = static_cast<int64_t>(p->vars.at("L"));
      const int64_t per_rank = static_cast<int64_t>(p->vars.at("C"));
      int spanning = 0;
      for (uint64_t seed : {1u, 2u, 3u}) {
        SCOPED_TRACE(size.label + " W=" + std::to_string(w) + " seed " + std::to_string(seed));
        const auto len = Generate(p->vars, w, 0, "seqlens", w * ns, seed);
        const auto mask = Generate(p->vars, w, 0, "dest_mask", w * ns, seed);
        EXPECT_EQ(len, Generate(p->vars, w, w - 1, "seqlens", w * ns, seed));
        EXPECT_EQ(mask, Generate(p->vars, w, w - 1, "dest_mask", w * ns, seed));
        for (size_t g = 0; g < len.size(); ++g) {
          const int64_t l = static_cast<int64_t>(len[g]);
          ASSERT_GE(l, 1);
          ASSERT_LE(l, max_len);
          int64_t c = 1;  // gpus_needed, capped at W
          while (c < w && c * per_rank < l) c *= 2;
          const int64_t m = static_cast<int64_t>(mask[g]);
          ASSERT_GT(m, 0);
          int64_t first = 0;
          while (((m >> first) & 1) == 0) ++first;
          EXPECT_EQ(m, ((int64_t{1} << c) - 1) << first) << "sequence " << g;
          EXPECT_EQ(first % c, 0) << "sequence " << g << ": group not aligned";
          spanning += c > 1;
        }
      }
      // The sizes whose lengths reach past C put some sequences on several ranks.
      if (size.label == "odd" || size.label == "groups" || size.label == "hybrid_cp_32k") {
        EXPECT_GT(spanning, 0) << size.label << " W=" << w;
      }
      if (size.label == "short_docs") {
        EXPECT_EQ(spanning, 0);
      }
    }
  }
}

TEST(CpReroute, OracleSendsEachSequenceToItsGroupInAscendingId) {
  using oracle_test::MakeIo;
  using oracle_test::Out;
  // W = 2, NS = 2, L = 4: rank 0 loaded g0 (2 tokens) and g1 (3), rank 1 g2 (1) and g3 (4).
  // g0 -> rank 0, g1 -> ranks 0 and 1, g2 -> rank 1, g3 -> rank 0.
  const std::vector<double> len = {2, 3, 1, 4}, mask = {1, 3, 2, 1};
  const std::vector<double> tok0 = {10, 11, 20, 21, 22, -1, -1, -1};
  const std::vector<double> tok1 = {30, 40, 41, 42, 43, -1, -1, -1};
  auto plus = [](std::vector<double> v, double d) {
    for (double& x : v) x += d;
    return v;
  };
  OracleIo io =
      MakeIo(2,
             {{"seqlens", {4}, {len, len}},
              {"dest_mask", {4}, {mask, mask}},
              {"tokens", {8}, {tok0, tok1}},
              {"labels", {8}, {plus(tok0, 100), plus(tok1, 100)}},
              {"loss_mask", {8}, {{1, 0, 1, 0, 1, 0, 1, 0}, {0, 1, 1, 0, 0, 1, 1, 0}}},
              {"position_ids", {8}, {{0, 1, 0, 1, 2, 5, 6, 7}, {0, 0, 1, 2, 3, 5, 6, 7}}}},
             {{"tokens_out", {16}},
              {"labels_out", {16}},
              {"loss_mask_out", {16}},
              {"position_ids_out", {16}},
              {"num_tokens", {1}}},
             {{"NS", 2}, {"L", 4}, {"C", 2}});
  oracle_test::RunOracle(kName, io);
  auto head = [](std::vector<double> v, size_t n) {
    return std::vector<double>(v.begin(), v.begin() + n);
  };
  EXPECT_EQ(Out(io, 0, "num_tokens"), std::vector<double>{9});
  EXPECT_EQ(Out(io, 1, "num_tokens"), std::vector<double>{4});
  EXPECT_EQ(head(Out(io, 0, "tokens_out"), 9),
            (std::vector<double>{10, 11, 20, 21, 22, 40, 41, 42, 43}));
  EXPECT_EQ(head(Out(io, 1, "tokens_out"), 4), (std::vector<double>{20, 21, 22, 30}));
  EXPECT_EQ(head(Out(io, 1, "labels_out"), 4), (std::vector<double>{120, 121, 122, 130}));
  EXPECT_EQ(head(Out(io, 0, "loss_mask_out"), 9), (std::vector<double>{1, 0, 1, 0, 1, 1, 1, 0, 0}));
  EXPECT_EQ(head(Out(io, 0, "position_ids_out"), 9),
            (std::vector<double>{0, 1, 0, 1, 2, 0, 1, 2, 3}));
  EXPECT_EQ(head(Out(io, 1, "position_ids_out"), 4), (std::vector<double>{0, 1, 2, 0}));
}

}  // namespace
}  // namespace kforge::eval
