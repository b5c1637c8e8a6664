// Task 064 (distributed 2-hop neighbour sampling): the oracle on a graph small
// enough to sample by hand, and the generator's graphs: one CSC per trial,
// split into contiguous ranges whose slices number the edges globally, with the
// zero-degree nodes, short neighbour lists and empty ranks the card promises.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "kforge/evaluator/task.h"
#include "kforge/oracle.h"
#include "task/inputs.h"

namespace kforge::eval {
namespace {

const Task& SamplingTask() {
  static const Task task = [] {
    auto t = LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / "064_gnn_neighbor_sampling");
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? *t : Task{};
  }();
  return task;
}

std::vector<double>& Input(OracleIo& io, int rank, const std::string& name) {
  for (OracleTensor& t : io.inputs[static_cast<size_t>(rank)])
    if (t.name == name) return t.data;
  ADD_FAILURE() << "no input " << name;
  static std::vector<double> none;
  return none;
}

std::vector<double> Prefix(std::span<const double> v, double n) {
  return {v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n)};
}

// Nodes 0..5; rank 0 owns 0..2, rank 1 owns 3..5. In-neighbours (edge ids):
//   0: 3 (e0), 1 (e1)   1: none   2: 5 (e2)
//   3: 0 (e3), 4 (e4), 4 (e5)   4: 2 (e6), 5 (e7)   5: 1 (e8)
// Fanouts [3, 2]. Rank 0's seeds [3, 0]: hop 1 finds 0 (a seed), 4, 4 again
// (a repeat) for 3, and 3 (a seed), 1 for 0: new nodes 4, 1. Hop 2 samples
// only 4 and 1: 2 and 5 for 4, nothing for 1 (degree 0). Rank 1's seeds
// [1, 5]: hop 1 finds only 1 (a seed) for 5, so hop 2 has no frontier.
TEST(NeighborSampling, OracleSamplesAHandBuiltGraphAsTheCardSays) {
  const Task& t = SamplingTask();
  auto p = Instantiate(t, 2, Dtype::kI64,
                       SizeSpec{"hand",
                                {{"S", "2"},
                                 {"k1", "3"},
                                 {"k2", "2"},
                                 {"nodes", "6"},
                                 {"deg", "1"},
                                 {"dmax", "3"},
                                 {"ecap", "6"},
                                 {"jit", "0"},
                                 {"empty", "0"}}},
                       true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  auto io = BuildOracleIo(*p, 1, {});
  ASSERT_TRUE(io.ok()) << io.status().ToString();
  const std::vector<double> owner = {0, 0, 0, 1, 1, 1};
  Input(*io, 0, "seeds") = {3, 0};
  Input(*io, 1, "seeds") = {1, 5};
  Input(*io, 0, "node_to_rank") = owner;
  Input(*io, 1, "node_to_rank") = owner;
  Input(*io, 0, "csc_colptr") = {0, 2, 2, 3, 3, 3, 3};
  Input(*io, 1, "csc_colptr") = {3, 3, 3, 3, 6, 8, 9};
  Input(*io, 0, "csc_row") = {3, 1, 5, 4, 4, 4};  // the last three belong to no node
  Input(*io, 1, "csc_row") = {0, 4, 4, 2, 5, 1};
  ASSERT_TRUE(RunOracle(*p, *io).ok());

  const double nn0 = io->out(0, "num_nodes")[0], ne0 = io->out(0, "num_edges")[0];
  ASSERT_EQ(nn0, 6);
  ASSERT_EQ(ne0, 7);
  EXPECT_EQ(Prefix(io->out(0, "node"), nn0), (std::vector<double>{3, 0, 4, 1, 2, 5}));
  EXPECT_EQ(Prefix(io->out(0, "row"), ne0), (std::vector<double>{1, 2, 2, 0, 3, 4, 5}));
  EXPECT_EQ(Prefix(io->out(0, "col"), ne0), (std::vector<double>{0, 0, 0, 1, 1, 2, 2}));
  EXPECT_EQ(Prefix(io->out(0, "edge"), ne0), (std::vector<double>{3, 4, 5, 0, 1, 6, 7}));

  const double nn1 = io->out(1, "num_nodes")[0], ne1 = io->out(1, "num_edges")[0];
  ASSERT_EQ(nn1, 2);
  ASSERT_EQ(ne1, 1);
  EXPECT_EQ(Prefix(io->out(1, "node"), nn1), (std::vector<double>{1, 5}));
  EXPECT_EQ(Prefix(io->out(1, "row"), ne1), (std::vector<double>{0}));
  EXPECT_EQ(Prefix(io->out(1, "col"), ne1), (std::vector<double>{1}));
  EXPECT_EQ(Prefix(io->out(1, "edge"), ne1), (std::vector<double>{8}));
}

TEST(NeighborSampling, GeneratorSlicesOneGraphPerTrialIntoContiguousRanges) {
  const Task& t = SamplingTask();
  for (const SizeSpec& size : t.check_sizes) {
    for (int w : {2, 4, 8}) {
      auto p = Instantiate(t, w, Dtype::kI64, size, true);
      ASSERT_TRUE(p.ok()) << p.status().ToString();
      const int64_t nodes = static_cast<int64_t>(p->vars.at("nodes"));
      const int64_t k1 = static_cast<int64_t>(p->vars.at("k1"));
      const int64_t ecap = static_cast<int64_t>(p->vars.at("ecap"));
      int64_t zero = 0, short_lists = 0, long_lists = 0, empty_ranks = 0;
      for (uint64_t seed = 1; seed <= 5; ++seed) {
        SCOPED_TRACE(size.label + " W=" + std::to_string(w) + " seed " + std::to_string(seed));
        auto io = BuildOracleIo(*p, seed, {});
        ASSERT_TRUE(io.ok()) << io.status().ToString();
        auto owner = io->in(0, "node_to_rank");
        int64_t edges_before = 0;  // global edge ids: rank o's slice follows rank o-1's
        for (int o = 0; o < w; ++o) {
          auto seeds = io->in(o, "seeds");
          std::set<double> distinct(seeds.begin(), seeds.end());
          EXPECT_EQ(distinct.size(), seeds.size()) << "repeated seeds on rank " << o;
          EXPECT_GE(*distinct.begin(), 0);
          EXPECT_LT(*distinct.rbegin(), nodes);
          auto mine = io->in(o, "node_to_rank");
          EXPECT_TRUE(std::equal(mine.begin(), mine.end(), owner.begin()))
              << "node_to_rank differs on rank " << o;
          auto colptr = io->in(o, "csc_colptr");
          EXPECT_EQ(colptr[0], edges_before) << "rank " << o;
          int64_t owned = 0;
          for (int64_t v = 0; v < nodes; ++v) {
            const double d = colptr[static_cast<size_t>(v) + 1] - colptr[static_cast<size_t>(v)];
            if (owner[static_cast<size_t>(v)] != o) {
              EXPECT_EQ(d, 0) << "rank " << o << " lists neighbours of node " << v;
              continue;
            }
            EXPECT_TRUE(v == 0 || owner[static_cast<size_t>(v) - 1] <= o)
                << "ranges not contiguous";
            EXPECT_GE(d, 0);
            ++owned;
            zero += d == 0;
            short_lists += d > 0 && d < static_cast<double>(k1);
            long_lists += d > static_cast<double>(k1);
          }
          empty_ranks += owned == 0;
          edges_before = static_cast<int64_t>(colptr[static_cast<size_t>(nodes)]);
          EXPECT_LE(edges_before - static_cast<int64_t>(colptr[0]), ecap) << "rank " << o;
        }
      }
      if (size.label == "large") {
        EXPECT_GT(zero, 0) << "no zero-degree node";
        EXPECT_GT(short_lists, 0) << "no node with fewer neighbours than the fanout";
        EXPECT_GT(long_lists, 0) << "no node with more neighbours than the fanout";
      }
      if (size.label == "empty") {
        EXPECT_EQ(empty_ranks, 5) << "the empty range is missing";
      }
    }
  }
}

}  // namespace
}  // namespace kforge::eval
