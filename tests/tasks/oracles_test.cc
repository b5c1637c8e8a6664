// The collective oracles (tasks 001-008) on tiny hand-computed inputs, called
// through the registry so that each task's KF_ORACLE registration is tested too.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kforge/oracle.h"

namespace kforge {
namespace {

using Rows = std::vector<std::vector<double>>;  // one row of values per rank

// An OracleIo with input x (rank r holds xs[r], shaped x_shape) and output y
// (shaped y_shape on every rank, filled with a sentinel the oracle must overwrite).
OracleIo MakeIo(const Rows& xs, std::vector<int64_t> x_shape, std::vector<int64_t> y_shape,
                double root = -1) {
  OracleIo io;
  io.world = static_cast<int>(xs.size());
  if (root >= 0) io.params["root"] = root;
  int64_t y_numel = 1;
  for (int64_t d : y_shape) y_numel *= d;
  for (const auto& x : xs) {
    io.inputs.push_back({OracleTensor{"x", x_shape, x}});
    io.outputs.push_back({OracleTensor{"y", y_shape, std::vector<double>(y_numel, -999.0)}});
  }
  return io;
}

void RunOracle(const char* name, OracleIo& io) {
  const OracleFn* fn = FindOracle(name);
  ASSERT_NE(fn, nullptr) << name << " is not registered";
  Status s = (*fn)(io);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

std::vector<double> Y(OracleIo& io, int rank) {
  auto y = io.out(rank, "y");
  return {y.begin(), y.end()};
}

TEST(CollectiveOracles, AllRegistered) {
  for (const char* name : {"allreduce", "allgather", "broadcast", "reduce", "scatter", "gather",
                           "reducescatter", "alltoall"}) {
    EXPECT_NE(FindOracle(name), nullptr) << name;
  }
}

TEST(CollectiveOracles, AllReduceSumsEveryRank) {
  OracleIo io = MakeIo({{1, 2, 3}, {10, 20, 30}}, {3}, {3});
  RunOracle("allreduce", io);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Y(io, r), (std::vector<double>{11, 22, 33}));

  OracleIo io4 = MakeIo({{1, 2, 3}, {10, 20, 30}, {100, 200, 300}, {-1, 0.5, 0}}, {3}, {3});
  RunOracle("allreduce", io4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(Y(io4, r), (std::vector<double>{110, 222.5, 333}));
}

TEST(CollectiveOracles, AllGatherStacksInRankOrder) {
  OracleIo io = MakeIo({{1, 2, 3}, {4, 5, 6}}, {3}, {2, 3});
  RunOracle("allgather", io);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Y(io, r), (std::vector<double>{1, 2, 3, 4, 5, 6}));

  OracleIo io4 = MakeIo({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}}, {3}, {4, 3});
  RunOracle("allgather", io4);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(Y(io4, r), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  }
}

TEST(CollectiveOracles, BroadcastCopiesTheRoot) {
  OracleIo io = MakeIo({{1, 2, 3}, {4, 5, 6}}, {3}, {3}, /*root=*/1);
  RunOracle("broadcast", io);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(Y(io, r), (std::vector<double>{4, 5, 6}));

  OracleIo io4 = MakeIo({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}}, {3}, {3}, /*root=*/2);
  RunOracle("broadcast", io4);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(Y(io4, r), (std::vector<double>{7, 8, 9}));
}

TEST(CollectiveOracles, ReduceSumsOnTheRootAndKeepsInputsElsewhere) {
  OracleIo io = MakeIo({{1, 2, 3}, {10, 20, 30}}, {3}, {3}, /*root=*/1);
  RunOracle("reduce", io);
  EXPECT_EQ(Y(io, 1), (std::vector<double>{11, 22, 33}));
  EXPECT_EQ(Y(io, 0), (std::vector<double>{1, 2, 3}));  // a non-root rank's y is its x

  OracleIo io4 = MakeIo({{1, 2, 3}, {10, 20, 30}, {100, 200, 300}, {1000, 2000, 3000}}, {3}, {3},
                        /*root=*/1);
  RunOracle("reduce", io4);
  EXPECT_EQ(Y(io4, 1), (std::vector<double>{1111, 2222, 3333}));
}

TEST(CollectiveOracles, ScatterSendsRowRFromTheRoot) {
  // Rank 0's x must be ignored: only the root's rows matter.
  OracleIo io = MakeIo({{-1, -1, -1, -1, -1, -1}, {1, 2, 3, 4, 5, 6}}, {2, 3}, {3}, /*root=*/1);
  RunOracle("scatter", io);
  EXPECT_EQ(Y(io, 0), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(Y(io, 1), (std::vector<double>{4, 5, 6}));

  std::vector<double> root_x(12);
  for (int i = 0; i < 12; ++i) root_x[i] = i + 1;
  std::vector<double> junk(12, -1);
  OracleIo io4 = MakeIo({junk, root_x, junk, junk}, {4, 3}, {3}, /*root=*/1);
  RunOracle("scatter", io4);
  EXPECT_EQ(Y(io4, 0), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(Y(io4, 1), (std::vector<double>{4, 5, 6}));
  EXPECT_EQ(Y(io4, 2), (std::vector<double>{7, 8, 9}));
  EXPECT_EQ(Y(io4, 3), (std::vector<double>{10, 11, 12}));
}

// The root's y is [W, N]; every other rank's is [1, N] and holds its own x.
void ShapeNonRootRows(OracleIo& io, int root) {
  for (int r = 0; r < io.world; ++r) {
    if (r == root) continue;
    OracleTensor& y = io.outputs[r][0];
    y.shape = {1, y.shape[1]};
    y.data.assign(static_cast<size_t>(y.shape[1]), -999.0);
  }
}

TEST(CollectiveOracles, GatherStacksOnTheRootAndKeepsInputsElsewhere) {
  OracleIo io = MakeIo({{1, 2, 3}, {4, 5, 6}}, {3}, {2, 3}, /*root=*/1);
  ShapeNonRootRows(io, 1);
  RunOracle("gather", io);
  EXPECT_EQ(Y(io, 1), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(Y(io, 0), (std::vector<double>{1, 2, 3}));

  OracleIo io4 = MakeIo({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}}, {3}, {4, 3}, /*root=*/1);
  ShapeNonRootRows(io4, 1);
  RunOracle("gather", io4);
  EXPECT_EQ(Y(io4, 1), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(Y(io4, 3), (std::vector<double>{10, 11, 12}));
}

TEST(CollectiveOracles, ReduceScatterSumsRankRsChunk) {
  // W = 2, N = 3: x is [W * N].
  OracleIo io = MakeIo({{1, 2, 3, 4, 5, 6}, {10, 20, 30, 40, 50, 60}}, {6}, {3});
  RunOracle("reducescatter", io);
  EXPECT_EQ(Y(io, 0), (std::vector<double>{11, 22, 33}));
  EXPECT_EQ(Y(io, 1), (std::vector<double>{44, 55, 66}));

  // W = 4, N = 3: rank p's x[i] = (p + 1) * 100 + i, so chunk r sums to 1000 + 4 * (3r + j).
  Rows xs(4, std::vector<double>(12));
  for (int p = 0; p < 4; ++p) {
    for (int i = 0; i < 12; ++i) xs[p][i] = (p + 1) * 100 + i;
  }
  OracleIo io4 = MakeIo(xs, {12}, {3});
  RunOracle("reducescatter", io4);
  for (int r = 0; r < 4; ++r) {
    std::vector<double> want;
    for (int j = 0; j < 3; ++j) want.push_back(1000 + 4 * (3 * r + j));
    EXPECT_EQ(Y(io4, r), want) << "rank " << r;
  }
}

TEST(CollectiveOracles, AllToAllTransposesChunks) {
  // W = 2, N = 3: y_r[p] = x_p[r].
  OracleIo io = MakeIo({{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}}, {2, 3}, {2, 3});
  RunOracle("alltoall", io);
  EXPECT_EQ(Y(io, 0), (std::vector<double>{1, 2, 3, 7, 8, 9}));
  EXPECT_EQ(Y(io, 1), (std::vector<double>{4, 5, 6, 10, 11, 12}));

  // W = 4, N = 3: rank p's x[d][j] = 100p + 10d + j.
  Rows xs(4, std::vector<double>(12));
  for (int p = 0; p < 4; ++p) {
    for (int d = 0; d < 4; ++d) {
      for (int j = 0; j < 3; ++j) xs[p][d * 3 + j] = 100 * p + 10 * d + j;
    }
  }
  OracleIo io4 = MakeIo(xs, {4, 3}, {4, 3});
  RunOracle("alltoall", io4);
  for (int r = 0; r < 4; ++r) {
    std::vector<double> want;
    for (int p = 0; p < 4; ++p) {
      for (int j = 0; j < 3; ++j) want.push_back(100 * p + 10 * r + j);
    }
    EXPECT_EQ(Y(io4, r), want) << "rank " << r;
  }
}

}  // namespace
}  // namespace kforge
