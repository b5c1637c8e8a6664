#include "task/inputs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kforge/evaluator/task_check.h"
#include "kforge/oracle.h"
#include "task_fixture.h"

// Oracles and a generator for the test tasks below (names no real task uses).
KF_ORACLE(ttsum) {
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    for (size_t i = 0; i < y.size(); ++i) {
      double s = 0;
      for (int p = 0; p < io.world; ++p) s += io.in(p, "x")[i];
      y[i] = s;
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(ttlazy) {  // writes only rank 0's output
  auto y = io.out(0, "y");
  for (size_t i = 0; i < y.size(); ++i) y[i] = io.in(0, "x")[i];
  return kforge::Status::Ok();
}

KF_ORACLE(ttgen) {
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "y");
    for (size_t i = 0; i < y.size(); ++i) y[i] = io.in(r, "x")[i];
  }
  return kforge::Status::Ok();
}

KF_INPUT_GENERATOR(ttgen) {
  auto& d = gen.tensor->data;
  for (size_t i = 0; i < d.size(); ++i) d[i] = gen.rank * 1000 + static_cast<double>(i) + 0.25;
  return kforge::Status::Ok();
}

namespace kforge::eval {
namespace {

using testing::LoadOrDie;
using testing::Replace;
using testing::SumToml;
using testing::TempDir;

std::string Named(const std::string& name) {
  return Replace(SumToml(), "name = \"sum\"", "name = \"" + name + "\"");
}

std::string WithInit(const std::string& toml, const std::string& init,
                     const std::string& dtype = "T") {
  std::string t =
      Replace(toml, R"(init = { kind = "normal", mean = 0.0, std = 1.0 })", "init = " + init);
  return Replace(t, "name = \"x\"\ndtype = \"T\"", "name = \"x\"\ndtype = \"" + dtype + "\"");
}

// A problem with N = n elements of x at W = 4.
struct Fixture {
  TempDir tmp;
  Task task;
  Problem p;
  Fixture(const std::string& toml, int64_t n, Dtype dt = Dtype::kF32,
          const std::string& name = "001_ttsum") {
    task = LoadOrDie(tmp.path(), name, toml);
    SizeSpec size{"n", {{"N", std::to_string(n)}}};
    auto r = Instantiate(task, 4, dt, size, true);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (r.ok()) p = *r;
  }
  std::vector<uint8_t> Gen(int rank, uint64_t seed, int threads = 0) {
    std::vector<uint8_t> bytes(p.inputs[0].nbytes, 0xAB);
    Status s = GenerateInput(p, 0, rank, seed, bytes.data(), threads);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return bytes;
  }
  std::vector<double> Values(const std::vector<uint8_t>& bytes) {
    std::vector<double> v(static_cast<size_t>(p.inputs[0].numel));
    for (size_t i = 0; i < v.size(); ++i) v[i] = LoadAsDouble(bytes.data(), p.inputs[0].dtype, i);
    return v;
  }
};

TEST(Inputs, DeterministicAndIndependentOfThreadCount) {
  Fixture f(Named("ttsum"), 300001);  // odd: chunks split unevenly across threads
  const auto one = f.Gen(1, 42, 1);
  EXPECT_EQ(f.Gen(1, 42, 1), one);
  EXPECT_EQ(f.Gen(1, 42, 3), one);
  EXPECT_EQ(f.Gen(1, 42, 4), one);
  EXPECT_EQ(f.Gen(1, 42, 0), one);
  EXPECT_NE(f.Gen(1, 43, 1), one);  // another seed
  EXPECT_NE(f.Gen(2, 42, 1), one);  // another rank
}

TEST(Inputs, NormalHasTheRequestedMoments) {
  Fixture f(WithInit(Named("ttsum"), R"({ kind = "normal", mean = 3.0, std = 2.0 })", "f64"),
            200000);
  const auto v = f.Values(f.Gen(0, 7));
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  const double sd = std::sqrt(var / v.size());
  EXPECT_NEAR(mean, 3.0, 0.03);
  EXPECT_NEAR(sd, 2.0, 0.03);
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); }));
}

TEST(Inputs, ValuesAreRoundedToTheDtype) {
  Fixture f(Named("ttsum"), 1000, Dtype::kBF16);
  const auto bytes = f.Gen(0, 9);
  for (size_t i = 0; i < 1000; ++i) {
    uint16_t b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    const double v = LoadAsDouble(bytes.data(), Dtype::kBF16, i);
    uint16_t again;
    StoreFromDouble(&again, Dtype::kBF16, 0, v);
    ASSERT_EQ(again, b);
  }
}

TEST(Inputs, SameOnAllRanks) {
  const std::string toml =
      Replace(Named("ttsum"), "init = {", "same_on_all_ranks = true\ninit = {");
  Fixture f(toml, 5000);
  EXPECT_EQ(f.Gen(0, 5), f.Gen(3, 5));
  EXPECT_NE(f.Gen(0, 5), f.Gen(0, 6));
}

TEST(Inputs, UniformStaysInRange) {
  Fixture f(WithInit(Named("ttsum"), R"({ kind = "uniform", low = -2.0, high = 5.0 })", "f64"),
            100000);
  const auto v = f.Values(f.Gen(0, 11));
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  EXPECT_GE(*lo, -2.0);
  EXPECT_LT(*hi, 5.0);
  EXPECT_LT(*lo, -1.99);
  EXPECT_GT(*hi, 4.99);
}

TEST(Inputs, StdIsAnExpressionOfTheSize) {
  Fixture f(
      WithInit(Named("ttsum"), R"x({ kind = "normal", mean = "W", std = "1 / sqrt(N)" })x", "f64"),
      40000);
  const auto v = f.Values(f.Gen(0, 5));
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / v.size();
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  EXPECT_NEAR(mean, 4.0, 0.001);                          // W = 4
  EXPECT_NEAR(std::sqrt(var / v.size()), 0.005, 0.0002);  // 1 / sqrt(40000)
}

// Each element range takes its own parameters; the last piece takes the rest.
TEST(Inputs, PiecesGiveEachElementRangeItsOwnDistribution) {
  Fixture f(WithInit(Named("ttsum"),
                     R"({ kind = "normal", mean = 0.0, pieces = [
  { until = "N / 4", std = 1.0 },
  { until = "N / 2", mean = 10.0, std = 0.01 },
  { std = "100" },
] })",
                     "f64"),
            40000);
  const auto v = f.Values(f.Gen(1, 5));
  auto moments = [&](size_t b, size_t e) {
    double m = 0, q = 0;
    for (size_t i = b; i < e; ++i) m += v[i];
    m /= static_cast<double>(e - b);
    for (size_t i = b; i < e; ++i) q += (v[i] - m) * (v[i] - m);
    return std::pair<double, double>(m, std::sqrt(q / static_cast<double>(e - b)));
  };
  const auto [m0, s0] = moments(0, 10000);
  const auto [m1, s1] = moments(10000, 20000);
  const auto [m2, s2] = moments(20000, 40000);
  EXPECT_NEAR(m0, 0.0, 0.05);
  EXPECT_NEAR(s0, 1.0, 0.03);
  EXPECT_NEAR(m1, 10.0, 0.001);
  EXPECT_NEAR(s1, 0.01, 0.0005);
  EXPECT_NEAR(s2, 100.0, 3.0);
  // The boundary is exact: normal values lie within 6 std of the mean, so the
  // last element of the first piece is far from 10 and the next one near it.
  EXPECT_GT(std::fabs(v[9999] - 10.0), 3.9);
  EXPECT_LT(std::fabs(v[10000] - 10.0), 0.07);
  EXPECT_LT(std::fabs(v[19999] - 10.0), 0.07);
}

// A sharded input's pieces are ranges of the global tensor: rank r's slice
// of a [4N] tensor (W = 4) holds elements r*N .. (r+1)*N.
TEST(Inputs, PiecesOfAShardedInputFollowTheGlobalIndex) {
  std::string toml = WithInit(Named("ttsum"),
                              R"({ kind = "uniform", low = 0.0, high = 1.0, pieces = [
  { until = "2 * N" },
  { low = 5.0, high = 6.0 },
] })",
                              "f64");
  toml = Replace(toml, "init = {", "shard = { dim = 0 }\ninit = {");
  Fixture f(toml, 1000);
  for (int r = 0; r < 4; ++r) {
    const auto v = f.Values(f.Gen(r, 8));
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    if (r < 2) {
      EXPECT_GE(*lo, 0.0) << r;
      EXPECT_LT(*hi, 1.0) << r;
    } else {
      EXPECT_GE(*lo, 5.0) << r;
      EXPECT_LT(*hi, 6.0) << r;
    }
  }
}

// column_std: every element of a column (last dimension) shares one offset,
// drawn per trial and the same on every rank, on top of the per-element draw.
TEST(Inputs, ColumnOffsetsAreSharedByAColumnAndByEveryRank) {
  auto toml = [](const std::string& init) {
    return Replace(WithInit(Named("ttsum"), init, "f64"),
                   "name = \"x\"\ndtype = \"f64\"\nshape = [\"N\"]",
                   "name = \"x\"\ndtype = \"f64\"\nshape = [\"N / 50\", \"50\"]");
  };
  // Only the offset: every row is the same, and so is every rank.
  Fixture only(toml(R"({ kind = "normal", std = 0.0, column_std = 2.0 })"), 50 * 400);
  const auto a = only.Values(only.Gen(0, 21));
  std::vector<double> column(a.begin(), a.begin() + 50);
  for (size_t row = 1; row < 400; ++row)
    ASSERT_TRUE(std::equal(column.begin(), column.end(), a.begin() + row * 50)) << row;
  EXPECT_EQ(only.Gen(3, 21), only.Gen(0, 21));
  EXPECT_NE(only.Gen(0, 22), only.Gen(0, 21));  // fresh every trial
  const auto [lo, hi] = std::minmax_element(column.begin(), column.end());
  EXPECT_GT(*hi - *lo, 2.0);  // 50 draws of std 2 spread well beyond it

  // With the per-element draw: column means follow the offsets, ranks differ.
  Fixture both(toml(R"({ kind = "normal", std = 1.0, column_std = 1.0 })"), 50 * 4000);
  const auto v = both.Values(both.Gen(1, 21));
  const auto o = only.Values(only.Gen(1, 21));
  EXPECT_NE(both.Gen(0, 21), both.Gen(1, 21));
  for (size_t c = 0; c < 50; ++c) {
    double mean = 0;
    for (size_t row = 0; row < 4000; ++row) mean += v[row * 50 + c];
    mean /= 4000;
    // The same stream as `only` (std 2 there, 1 here): half its offset.
    EXPECT_NEAR(mean, o[c] / 2, 0.08) << c;
  }
}

// distinct: no two values of a row (last dimension) are equal after rounding,
// and only the duplicates moved, each by a few steps of the dtype.
TEST(Inputs, DistinctRowsHaveNoTiesAndMoveOnlyTheDuplicates) {
  auto toml = [](const std::string& init) {
    return Replace(WithInit(Named("ttsum"), init, "T"),
                   "name = \"x\"\ndtype = \"T\"\nshape = [\"N\"]",
                   "name = \"x\"\ndtype = \"T\"\nshape = [\"N / 64\", \"64\"]");
  };
  Fixture plain(toml(R"({ kind = "normal", std = 1.0, column_std = 1.0 })"), 64 * 2000,
                Dtype::kBF16);
  Fixture distinct(toml(R"({ kind = "normal", std = 1.0, column_std = 1.0, distinct = true })"),
                   64 * 2000, Dtype::kBF16);
  const auto a = plain.Values(plain.Gen(2, 77));
  const auto b = distinct.Values(distinct.Gen(2, 77));
  int64_t rows_with_ties = 0, moved = 0;
  for (size_t row = 0; row < 2000; ++row) {
    std::vector<double> pa(a.begin() + row * 64, a.begin() + row * 64 + 64);
    std::vector<double> pb(b.begin() + row * 64, b.begin() + row * 64 + 64);
    std::sort(pa.begin(), pa.end());
    std::sort(pb.begin(), pb.end());
    rows_with_ties += std::adjacent_find(pa.begin(), pa.end()) != pa.end();
    ASSERT_EQ(std::adjacent_find(pb.begin(), pb.end()), pb.end()) << "row " << row;
    for (size_t j = row * 64; j < row * 64 + 64; ++j) {
      if (a[j] == b[j]) continue;
      ++moved;
      ASSERT_GT(b[j], a[j]) << j;
      ASSERT_LT(b[j] - a[j], 0.25) << j;  // a few bf16 steps at |x| < 8
    }
  }
  // bf16 rows of 64 unit normals tie often; the pass moved exactly what it had to.
  EXPECT_GT(rows_with_ties, 100);
  EXPECT_GE(moved, rows_with_ties);
  EXPECT_LT(moved, 64 * 2000 / 10);
  // The same bytes with any number of threads.
  EXPECT_EQ(distinct.Gen(2, 77, 1), distinct.Gen(2, 77, 8));
}

TEST(Inputs, DistinctIsRefusedOnIntegersAndShards) {
  TempDir tmp;
  auto integers = LoadTask(testing::WriteTask(
      tmp.path(), "001_ttsum",
      WithInit(Named("ttsum"), R"({ kind = "int", low = 0, high = 9, distinct = true })")));
  ASSERT_FALSE(integers.ok());
  EXPECT_NE(integers.status().message().find("distinct"), std::string::npos)
      << integers.status().ToString();
  TempDir tmp2;
  auto shard = LoadTask(testing::WriteTask(
      tmp2.path(), "001_ttsum",
      Replace(WithInit(Named("ttsum"), R"({ kind = "normal", distinct = true })"),
              "name = \"x\"\ndtype = \"T\"", "name = \"x\"\nshard = { dim = 0 }\ndtype = \"T\"")));
  ASSERT_FALSE(shard.ok());
  EXPECT_NE(shard.status().message().find("cannot have init.distinct"), std::string::npos)
      << shard.status().ToString();
}

TEST(Inputs, ColumnStdIsRefusedWhereItMeansNothing) {
  TempDir tmp;
  auto uniform = LoadTask(testing::WriteTask(
      tmp.path(), "001_ttsum",
      WithInit(Named("ttsum"),
               R"({ kind = "uniform", low = 0.0, high = 1.0, column_std = 1.0 })")));
  ASSERT_FALSE(uniform.ok());
  EXPECT_NE(uniform.status().message().find("column_std"), std::string::npos)
      << uniform.status().ToString();
  TempDir tmp2;
  auto negative = LoadTask(
      testing::WriteTask(tmp2.path(), "001_ttsum",
                         WithInit(Named("ttsum"), R"({ kind = "normal", column_std = -1.0 })")));
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("column_std: must be >= 0"), std::string::npos)
      << negative.status().ToString();
}

TEST(Inputs, PieceBoundsOutsideTheTensorOrOutOfOrderAreRefused) {
  TempDir tmp;
  const std::string beyond = WithInit(
      Named("ttsum"), R"({ kind = "normal", pieces = [{ until = "N + 1" }, { std = 2.0 }] })");
  Task t = testing::LoadOrDie(tmp.path(), "001_ttsum", beyond);
  auto p = Instantiate(t, 4, Dtype::kF32, SizeSpec{"n", {{"N", "10"}}}, true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  std::vector<uint8_t> bytes(p->inputs[0].nbytes);
  Status s = GenerateInput(*p, 0, 0, 1, bytes.data());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("init piece bound 11 is outside its 10 elements"), std::string::npos)
      << s.ToString();

  TempDir tmp2;
  const std::string backwards = WithInit(
      Named("ttsum"),
      R"({ kind = "normal", pieces = [{ until = "N / 2" }, { until = "N / 4" }, { std = 2.0 }] })");
  Task t2 = testing::LoadOrDie(tmp2.path(), "001_ttsum", backwards);
  auto p2 = Instantiate(t2, 4, Dtype::kF32, SizeSpec{"n", {{"N", "100"}}}, true);
  ASSERT_FALSE(p2.ok());
  EXPECT_NE(p2.status().message().find("must be above the previous one (50)"), std::string::npos)
      << p2.status().ToString();
}

TEST(Inputs, IntHitsBothInclusiveBoundsFromExpressions) {
  Fixture f(WithInit(Named("ttsum"), R"({ kind = "int", low = "-W", high = "W + 1" })", "i32"),
            20000);
  const auto v = f.Values(f.Gen(0, 3));
  std::vector<int> counts(10, 0);
  for (double x : v) {
    ASSERT_EQ(x, std::floor(x));
    ASSERT_GE(x, -4);
    ASSERT_LE(x, 5);
    ++counts[static_cast<int>(x) + 4];
  }
  for (int c : counts) EXPECT_GT(c, 1500);  // ~2000 each
}

TEST(Inputs, PermutationIsAPermutationAndDependsOnTheSeed) {
  for (int64_t n : {1, 2, 3, 1000, 70001}) {
    Fixture f(WithInit(Named("ttsum"), R"({ kind = "permutation" })", "i64"), n);
    const auto a = f.Values(f.Gen(0, 1));
    auto sorted = a;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], static_cast<double>(i)) << "n = " << n;
    if (n >= 1000) {
      EXPECT_NE(f.Values(f.Gen(0, 2)), a);
      EXPECT_EQ(f.Gen(0, 1, 1), f.Gen(0, 1, 4));
      int fixed = 0;
      for (int64_t i = 0; i < n; ++i) fixed += a[i] == static_cast<double>(i);
      EXPECT_LT(fixed, 20) << "n = " << n;  // a random permutation has ~1 fixed point
    }
  }
}

TEST(Inputs, PermutationThatDoesNotFitTheDtypeFails) {
  Fixture f(WithInit(Named("ttsum"), R"({ kind = "permutation" })"), 1000, Dtype::kBF16);
  std::vector<uint8_t> bytes(f.p.inputs[0].nbytes);
  Status s = GenerateInput(f.p, 0, 0, 1, bytes.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("a permutation of 1000 elements does not fit bf16"), std::string::npos)
      << s.message();
}

TEST(Inputs, CustomUsesTheRegisteredGenerator) {
  Fixture f(WithInit(Named("ttgen"), R"({ kind = "custom" })"), 10, Dtype::kF32, "001_ttgen");
  const auto v = f.Values(f.Gen(2, 1));
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], 2000 + static_cast<double>(i) + 0.25);

  Fixture missing(WithInit(Named("ttnogen"), R"({ kind = "custom" })"), 10, Dtype::kF32,
                  "001_ttnogen");
  std::vector<uint8_t> bytes(missing.p.inputs[0].nbytes);
  Status s = GenerateInput(missing.p, 0, 0, 1, bytes.data());
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kNotFound);
  EXPECT_NE(s.message().find("KF_INPUT_GENERATOR(ttnogen)"), std::string::npos) << s.message();
}

TEST(Inputs, OracleSeesAllRanksInputsAsDoubles) {
  Fixture f(Named("ttsum"), 1001, Dtype::kBF16);
  auto host = GenerateAllInputs(f.p, 77);
  ASSERT_TRUE(host.ok()) << host.status().ToString();
  std::vector<std::vector<const void*>> ptrs(4);
  for (int r = 0; r < 4; ++r) ptrs[r].push_back((*host)[r][0].data());
  auto io = BuildOracleIo(f.p, 77, ptrs);
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  EXPECT_EQ(io->world, 4);
  EXPECT_EQ(io->params.at("N"), 1001);
  EXPECT_EQ(io->in_shape(3, "x"), (std::vector<int64_t>{1001}));
  EXPECT_TRUE(std::isnan(io->out(0, "y")[0]));  // outputs start as NaN
  ASSERT_TRUE(RunOracle(f.p, *io).ok());
  for (size_t i = 0; i < 1001; i += 97) {
    double s = 0;
    for (int r = 0; r < 4; ++r) s += LoadAsDouble((*host)[r][0].data(), Dtype::kBF16, i);
    EXPECT_EQ(io->out(2, "y")[i], s);
  }
  // Generating inside BuildOracleIo gives the same inputs.
  auto self = BuildOracleIo(f.p, 77, {});
  ASSERT_TRUE(self.ok());
  EXPECT_EQ(self->inputs[1][0].data, io->inputs[1][0].data);
}

TEST(Inputs, RunOracleFailsWithoutAnOracle) {
  Fixture f(Named("ttnone"), 10, Dtype::kF32, "001_ttnone");
  auto io = BuildOracleIo(f.p, 1, {});
  ASSERT_TRUE(io.ok());
  Status s = RunOracle(f.p, *io);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.kind(), ErrorKind::kNotFound);
  EXPECT_NE(s.message().find("no oracle registered under 'ttnone'"), std::string::npos)
      << s.message();
}

TEST(Inputs, CheckOracleRunsEveryCheckProblemAndCatchesUnwrittenOutputs) {
  TempDir tmp;
  Task good = testing::LoadOrDie(tmp.path(), "001_ttsum", Named("ttsum"));
  auto stats = CheckOracle(good, 5);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->problems, 3 * 2 * 2);  // W x dtypes x check sizes
  int64_t values = 0;
  for (int w : {2, 4, 8}) values += 2 * w * (8 + 1001);
  EXPECT_EQ(stats->output_values, values);
  EXPECT_EQ(stats->skipped, 0);

  // A budget of 100 elements keeps tiny (x and y: 16 W elements) at W = 2 and 4 only.
  auto quick = CheckOracle(good, 5, 100);
  ASSERT_TRUE(quick.ok());
  EXPECT_EQ(quick->problems, 2 * 2);
  EXPECT_EQ(quick->skipped, 3 * 2 * 2 - 4);

  Task lazy =
      testing::LoadOrDie(tmp.path(), "002_ttlazy", Replace(Named("ttlazy"), "id = 1", "id = 2"));
  auto bad = CheckOracle(lazy, 5);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("oracle left rank 1's output 'y' element 0 = nan"),
            std::string::npos)
      << bad.status().message();

  // Checked only on rank 0: the lazy oracle is enough.
  Task rooted = testing::LoadOrDie(tmp.path(), "003_ttlazy",
                                   Replace(Replace(Named("ttlazy"), "id = 1", "id = 3"),
                                           "name = \"y\"", "name = \"y\"\nranks = \"0\""));
  EXPECT_TRUE(CheckOracle(rooted, 5).ok());
}

}  // namespace
}  // namespace kforge::eval
