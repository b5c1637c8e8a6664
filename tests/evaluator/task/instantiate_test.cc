#include <gtest/gtest.h>

#include <algorithm>

#include "kforge/evaluator/task.h"
#include "task_fixture.h"

namespace kforge::eval {
namespace {

using testing::LoadOrDie;
using testing::Replace;
using testing::SumToml;
using testing::TempDir;

// x[N] split into W shards: y[N/W] on every rank, checked only on `root`.
std::string ShardToml() {
  std::string t = SumToml();
  t = Replace(t, "name = \"y\"\ndtype = \"T\"\nshape = [\"N\"]",
              "name = \"y\"\ndtype = \"T\"\nshape = [\"N / W\"]\nranks = \"root\"\n\n"
              "[[outputs]]\nname = \"idx\"\ndtype = \"i32\"\nshape = [\"R\", \"C\"]");
  t = Replace(t, "root = 0", "root = 1\nrows = 3");
  t = Replace(t, R"({ label = "tiny", N = "8" })",
              R"({ label = "tiny", N = "8 * 8", R = "rows", C = "R * W" })");
  t = Replace(t, R"({ label = "odd", N = "1001" })",
              R"({ label = "odd", N = "12", R = "1", C = "W" })");
  t = Replace(t, R"({ label = "1MiB", N = "1Mi / elem" })",
              R"x({ label = "1MiB", N = "1Mi / elem", R = "2", C = "cdiv(N, 8)" })x");
  return t;
}

// The features the fused workloads need: a 2-D layout of groups, a sharded and
// a replicated input, an in-place input, a rank-dependent output and a floor.
std::string FusedToml() {
  std::string t = SumToml();
  t = Replace(
      t, "[[inputs]]\nname = \"x\"\ndtype = \"T\"\nshape = [\"N\"]\n",
      "[[groups]]\nname = \"tp\"\nsize = 2\n\n[[groups]]\nname = \"dp\"\nsize = \"W / 2\"\n"
      "layout = \"strided\"\n\n"
      "[[inputs]]\nname = \"x\"\ndtype = \"T\"\nshape = [\"N\", 4]\nshard = { dim = 0, group = "
      "\"tp\" }\n");
  t = Replace(t, "[[outputs]]",
              "[[inputs]]\nname = \"w\"\ndtype = \"f32\"\nshape = [4]\nreplicated = true\n\n"
              "[[inputs]]\nname = \"m\"\ndtype = \"f32\"\nshape = [\"N\"]\ninout = true\n"
              "tolerance = { atol = \"1e-3 * W\" }\n\n[[outputs]]");
  t = Replace(t, "shape = [\"N\"]\n\n[tolerance]", "shape = [\"N * (rank + 1)\"]\n\n[tolerance]");
  t = Replace(t, "[policy]",
              "[floor]\nhbm_bytes = \"N * elem * 2\"\nflops = \"2 * N * 4\"\n\n[policy]");
  return t;
}

TEST(Instantiate, GroupsShardsInoutRankShapesAndFloor) {
  TempDir tmp;
  Task t = LoadOrDie(tmp.path(), "001_sum", FusedToml());
  ASSERT_EQ(t.groups.size(), 2u);
  EXPECT_EQ(t.groups[1].layout, GroupSpec::Layout::kStrided);
  EXPECT_EQ(t.inputs[0].distribution.kind, Distribution::Kind::kShard);
  EXPECT_EQ(t.inputs[0].distribution.group, "tp");
  EXPECT_EQ(t.inputs[1].distribution.kind, Distribution::Kind::kReplicated);
  EXPECT_TRUE(t.inputs[2].inout);
  auto p = Instantiate(t, 4, Dtype::kF32, t.check_sizes[0], true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  ASSERT_EQ(p->groups.size(), 2u);
  EXPECT_EQ(p->groups[0].size, 2);
  EXPECT_EQ(p->groups[1].size, 2);
  // contiguous tp: {0,1} {2,3}; strided dp: {0,2} {1,3}.
  EXPECT_EQ(p->groups[0].Members(1, 4), (std::vector<int>{2, 3}));
  EXPECT_EQ(p->groups[1].Members(1, 4), (std::vector<int>{1, 3}));
  EXPECT_EQ(p->groups[1].RankIn(3, 4), 1);
  // y has N * (rank + 1) elements on each rank; the allocation is the largest.
  const ConcreteTensor& y = p->outputs[0];
  ASSERT_EQ(y.rank_shapes.size(), 4u);
  EXPECT_EQ(y.ShapeOf(0), (std::vector<int64_t>{8}));
  EXPECT_EQ(y.ShapeOf(3), (std::vector<int64_t>{32}));
  EXPECT_EQ(y.numel, 32);
  EXPECT_EQ(y.nbytes, 128u);
  // The inout input m comes back as a checked output after the task's outputs.
  ASSERT_EQ(p->outputs.size(), 2u);
  EXPECT_EQ(p->KernelOutputCount(), 1);
  EXPECT_EQ(p->outputs[1].name, "m");
  EXPECT_EQ(p->outputs[1].inout_of, 2);
  EXPECT_DOUBLE_EQ(p->outputs[1].tolerance.atol, 4e-3);
  EXPECT_TRUE(p->inputs[2].inout);
  EXPECT_DOUBLE_EQ(p->floor_hbm_bytes, 8 * 4 * 2);
  EXPECT_DOUBLE_EQ(p->floor_flops, 64);
  EXPECT_DOUBLE_EQ(p->floor_link_bytes, 0);
  // A group that does not divide W is refused at instantiation.
  Task bad = LoadOrDie(tmp.path(), "001_sum", Replace(FusedToml(), "size = 2\n", "size = 3\n"));
  auto q = Instantiate(bad, 4, Dtype::kF32, bad.check_sizes[0], true);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("groups[0] 'tp': size 3 does not divide W = 4"),
            std::string::npos)
      << q.status().message();
}

TEST(Instantiate, ResolvesShapesAtEveryWorldSize) {
  TempDir tmp;
  Task t = LoadOrDie(tmp.path(), "001_sum", ShardToml());
  for (int w : {2, 4, 8}) {
    auto p = Instantiate(t, w, Dtype::kBF16, t.check_sizes[0], true);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->world, w);
    EXPECT_EQ(p->dtype, Dtype::kBF16);
    EXPECT_EQ(p->size_label, "tiny");
    EXPECT_TRUE(p->is_check_size);
    EXPECT_EQ(p->vars.at("W"), w);
    EXPECT_EQ(p->vars.at("elem"), 2);
    EXPECT_EQ(p->vars.at("N"), 64);
    EXPECT_EQ(p->vars.at("C"), 3 * w);  // reads another size variable and W
    ASSERT_EQ(p->inputs.size(), 1u);
    EXPECT_EQ(p->inputs[0].shape, (std::vector<int64_t>{64}));
    EXPECT_EQ(p->inputs[0].nbytes, 128u);
    ASSERT_EQ(p->outputs.size(), 2u);
    EXPECT_EQ(p->outputs[0].shape, (std::vector<int64_t>{64 / w}));
    EXPECT_EQ(p->outputs[0].numel, 64 / w);
    EXPECT_EQ(p->outputs[0].only_rank, 1);
    EXPECT_EQ(p->outputs[0].tolerance.atol, 2e-2);
    EXPECT_EQ(p->outputs[1].dtype, Dtype::kI32);
    EXPECT_EQ(p->outputs[1].shape, (std::vector<int64_t>{3, 3 * w}));
    EXPECT_EQ(p->outputs[1].nbytes, static_cast<size_t>(4 * 3 * 3 * w));
    EXPECT_EQ(p->outputs[1].only_rank, -1);
    EXPECT_EQ(p->outputs[1].tolerance.atol, 0);  // integers compare exactly
    EXPECT_EQ(p->outputs[1].tolerance.rtol, 0);
    // Default: 2 x the largest tensor (x: 128 bytes, idx: 36 W bytes) + 1 MiB.
    EXPECT_EQ(p->workspace_bytes, 2 * std::max<size_t>(128, 36 * w) + (1u << 20));
    EXPECT_EQ(p->perf_bytes, 128);
    EXPECT_DOUBLE_EQ(p->busbw_factor, 2.0 * (w - 1) / w);
  }
  auto bench = Instantiate(t, 4, Dtype::kF32, t.bench_sizes[0], false);
  ASSERT_TRUE(bench.ok()) << bench.status().ToString();
  EXPECT_EQ(bench->inputs[0].numel, 262144);
  EXPECT_EQ(bench->inputs[0].nbytes, 1u << 20);
  EXPECT_EQ(bench->outputs[0].tolerance.atol, 1e-5);
  EXPECT_EQ(bench->outputs[1].shape, (std::vector<int64_t>{2, 32768}));
  EXPECT_FALSE(bench->is_check_size);
}

TEST(Instantiate, ShapeThatIsNotIntegralAtSomeWorldSizeIsAnError) {
  TempDir tmp;
  Task t = LoadOrDie(tmp.path(), "001_sum", ShardToml());
  // odd: N = 12 divides by 2 and 4, not by 8.
  EXPECT_TRUE(Instantiate(t, 2, Dtype::kF32, t.check_sizes[1], true).ok());
  EXPECT_TRUE(Instantiate(t, 4, Dtype::kF32, t.check_sizes[1], true).ok());
  auto p = Instantiate(t, 8, Dtype::kF32, t.check_sizes[1], true);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message(),
            "001_sum at W=8, f32, check size 'odd': outputs[0] 'y': shape 'N / W' = 1.5 is not an "
            "integer");
  Status all = ValidateShapes(t);
  ASSERT_FALSE(all.ok());
  EXPECT_NE(all.message().find("W=8"), std::string::npos) << all.message();
  EXPECT_NE(all.message().find("'odd'"), std::string::npos) << all.message();
}

TEST(Instantiate, ValidateShapesPassesForAGoodTask) {
  TempDir tmp;
  Task t = LoadOrDie(tmp.path(), "001_sum", SumToml());
  EXPECT_TRUE(ValidateShapes(t).ok()) << ValidateShapes(t).ToString();
}

TEST(Instantiate, RejectsUnsupportedWorldSizeAndDtype) {
  TempDir tmp;
  Task t = LoadOrDie(tmp.path(), "001_sum", SumToml());
  auto w = Instantiate(t, 3, Dtype::kF32, t.check_sizes[0], true);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.status().message(), "001_sum: world size 3 is not supported (supported: 2, 4, 8)");
  auto d = Instantiate(t, 2, Dtype::kF16, t.check_sizes[0], true);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().message(), "001_sum: dtype f16 is not supported (supported: f32, bf16)");
}

// The NCCL self-test runs every task at W = 1, which no task declares; it
// opens that one world size and no other.
TEST(Instantiate, OnlyTheSelfTestMayUseOneRank) {
  TempDir tmp;
  Task t = LoadOrDie(tmp.path(), "001_sum", SumToml());
  auto plain = Instantiate(t, 1, Dtype::kF32, t.check_sizes[0], true);
  ASSERT_FALSE(plain.ok());
  EXPECT_EQ(plain.status().message(),
            "001_sum: world size 1 is not supported (supported: 2, 4, 8)");
  auto one = Instantiate(t, 1, Dtype::kF32, t.check_sizes[0], true, /*self_test=*/true);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->world, 1);
  EXPECT_EQ(one->vars.at("W"), 1);
  EXPECT_FALSE(Instantiate(t, 3, Dtype::kF32, t.check_sizes[0], true, true).ok());
  // A task that needs two ranks fails with what needs them (here its root,
  // rank 1), not with the world size.
  TempDir other;
  Task sharded = LoadOrDie(other.path(), "001_sum", ShardToml());
  auto s = Instantiate(sharded, 1, Dtype::kF32, sharded.check_sizes[0], true, true);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "001_sum at W=1, f32, check size 'tiny': params.root = 1 is not a rank of W = 1");
  EXPECT_TRUE(Instantiate(sharded, 2, Dtype::kF32, sharded.check_sizes[0], true).ok());
}

TEST(Instantiate, OutputRankMustBeARank) {
  TempDir tmp;
  std::string toml = Replace(SumToml(), "name = \"y\"", "name = \"y\"\nranks = \"W\"");
  Task t = LoadOrDie(tmp.path(), "001_sum", toml);
  auto p = Instantiate(t, 4, Dtype::kF32, t.check_sizes[0], true);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("ranks 'W' = 4 is not a rank of W = 4"), std::string::npos)
      << p.status().message();
}

TEST(Instantiate, OutputToleranceOverridesAndWorkspaceExpression) {
  TempDir tmp;
  std::string toml = Replace(SumToml(), "name = \"y\"", "name = \"y\"\ntolerance = { atol = 0.5 }");
  toml = Replace(toml, "[params]", "workspace = \"N * elem * W + 1Ki\"\n\n[params]");
  Task t = LoadOrDie(tmp.path(), "001_sum", toml);
  auto p = Instantiate(t, 4, Dtype::kBF16, t.check_sizes[1], true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->outputs[0].tolerance.atol, 0.5);
  EXPECT_EQ(p->outputs[0].tolerance.rtol, 0);
  EXPECT_EQ(p->workspace_bytes, 1001u * 2 * 4 + 1024);
}

TEST(Instantiate, SizeVariablesResolveInDependencyOrderAndCyclesFail) {
  TempDir tmp;
  // Keys are stored sorted (A before B); A depends on B, so order must come from dependencies.
  std::string toml = Replace(SumToml(), R"({ label = "tiny", N = "8" })",
                             R"({ label = "tiny", N = "A", A = "B * 2", B = "W" })");
  Task t = LoadOrDie(tmp.path(), "001_sum", toml);
  auto p = Instantiate(t, 4, Dtype::kF32, t.check_sizes[0], true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->inputs[0].numel, 8);

  TempDir tmp2;
  toml = Replace(SumToml(), R"({ label = "tiny", N = "8" })",
                 R"({ label = "tiny", N = "A", A = "N + 1" })");
  Task c = LoadOrDie(tmp2.path(), "001_sum", toml);
  auto cyc = Instantiate(c, 4, Dtype::kF32, c.check_sizes[0], true);
  ASSERT_FALSE(cyc.ok());
  EXPECT_NE(cyc.status().message().find("cycle: A, N"), std::string::npos)
      << cyc.status().message();
}

TEST(Instantiate, NegativeOrFractionalSizeVariableFails) {
  TempDir tmp;
  std::string toml =
      Replace(SumToml(), R"({ label = "tiny", N = "8" })", R"({ label = "tiny", N = "7 / W" })");
  Task t = LoadOrDie(tmp.path(), "001_sum", toml);
  auto p = Instantiate(t, 2, Dtype::kF32, t.check_sizes[0], true);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("size variable N '7 / W' = 3.5 is not an integer"),
            std::string::npos)
      << p.status().message();
}

}  // namespace
}  // namespace kforge::eval
