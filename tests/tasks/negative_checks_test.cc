// Every task's check means something: for every task under tasks/, at every
// world size, at its largest check size, each checked output must FAIL the
// harness's comparison when a kernel
//   - writes zeros (a do-nothing kernel on zeroed memory),
//   - copies one of its inputs (for an in-place input: leaves it unchanged),
//   - returns the correct output computed on another rank's inputs (a
//     rank or shard mix-up: rank r's inputs are rank r+1's), or
//   - returns the correct output for other inputs (stale or cached results).
// An output whose length depends on the data (a counted output) is compared on
// the rows its count says: a count one off fails, and garbage past the count
// is never read (the correct rows with garbage after them pass).
// A task whose check an all-zeros or do-nothing kernel passes is a task that
// measures nothing (ParallelKernelBench has several); this test keeps every
// task here from being one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kforge/evaluator/dtype.h"
#include "kforge/evaluator/task.h"
#include "task/compare.h"
#include "task/inputs.h"

namespace kforge::eval {
namespace {

constexpr uint64_t kSeed = 0x6b666f7267650001ull;
constexpr uint64_t kOtherSeed = 0x6b666f7267650002ull;

std::vector<std::string> TaskKeys() {
  std::vector<std::string> keys;
  auto tasks = LoadTasks(KFORGE_TEST_TASKS_DIR);
  if (!tasks.ok()) return {"<tasks failed to load: " + tasks.status().ToString() + ">"};
  for (const Task& t : *tasks) keys.push_back(t.key);
  return keys;
}

// The largest check size (most elements over all tensors at W = 2).
const SizeSpec& LargestCheckSize(const Task& t) {
  const SizeSpec* best = &t.check_sizes.front();
  int64_t best_numel = -1;
  for (const SizeSpec& s : t.check_sizes) {
    auto p = Instantiate(t, t.world_sizes.front(), t.dtypes.front(), s, true);
    if (!p.ok()) continue;
    int64_t n = 0;
    for (const auto& x : p->outputs) n += x.numel;
    if (n > best_numel) best_numel = n, best = &s;
  }
  return *best;
}

// `values` encoded in the output's dtype, as a kernel would have written them.
std::vector<uint8_t> Encode(const ConcreteTensor& out, int rank, std::span<const double> values) {
  const size_t n = static_cast<size_t>(out.NumelOf(rank));
  std::vector<uint8_t> bytes(std::max<size_t>(out.nbytes, 1));
  for (size_t i = 0; i < n; ++i) {
    StoreFromDouble(bytes.data(), out.dtype, i, values.empty() ? 0.0 : values[i % values.size()]);
  }
  return bytes;
}

bool Fails(const ConcreteTensor& out, int rank, std::span<const double> candidate,
           std::span<const double> expected, std::span<const double> expected_count = {}) {
  CompareContext ctx;
  ctx.rank = rank;
  const std::vector<uint8_t> got = Encode(out, rank, candidate);
  return !CompareOutputRows(out, got.data(), expected, expected_count, ctx).passed;
}

// The ranks whose value of `out` the harness checks.
std::vector<int> CheckedRanks(const ConcreteTensor& out, int world) {
  if (out.only_rank >= 0) return {out.only_rank};
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) {
    if (out.NumelOf(r) > 0) ranks.push_back(r);
  }
  return ranks;
}

// The input a "copy" kernel would copy into `out`: the in-place input itself,
// else the input whose size matches best.
std::span<const double> CopySource(const Problem& p, const OracleIo& io, const ConcreteTensor& out,
                                   int rank) {
  if (out.inout_of >= 0) return io.inputs[rank][static_cast<size_t>(out.inout_of)].data;
  const OracleTensor* best = nullptr;
  for (const OracleTensor& in : io.inputs[rank]) {
    if (best == nullptr || (in.data.size() == static_cast<size_t>(out.NumelOf(rank)) &&
                            best->data.size() != in.data.size())) {
      best = &in;
    }
  }
  (void)p;
  return best ? std::span<const double>(best->data) : std::span<const double>();
}

class NegativeChecks : public ::testing::TestWithParam<std::string> {};

TEST_P(NegativeChecks, ZerosCopiesWrongRanksAndStaleResultsFail) {
  auto task = LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / GetParam());
  ASSERT_TRUE(task.ok()) << task.status().ToString();
  const Task& t = *task;
  const SizeSpec& size = LargestCheckSize(t);
  for (int world : t.world_sizes) {
    SCOPED_TRACE(fmt::format("{} at W={}, size '{}'", t.key, world, size.label));
    auto p = Instantiate(t, world, t.dtypes.front(), size, true);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto io = BuildOracleIo(*p, kSeed, {});
    ASSERT_TRUE(io.ok()) << io.status().ToString();
    ASSERT_TRUE(RunOracle(*p, *io).ok());
    auto other = BuildOracleIo(*p, kOtherSeed, {});
    ASSERT_TRUE(other.ok()) << other.status().ToString();
    ASSERT_TRUE(RunOracle(*p, *other).ok());
    // The same inputs, rank r given rank r+1's (where the sizes allow).
    auto host = GenerateAllInputs(*p, kSeed);
    ASSERT_TRUE(host.ok()) << host.status().ToString();
    std::vector<std::vector<const void*>> rotated(static_cast<size_t>(world));
    bool can_rotate = true;
    for (int r = 0; r < world; ++r) {
      const int from = (r + 1) % world;
      for (size_t i = 0; i < p->inputs.size(); ++i) {
        can_rotate = can_rotate && p->inputs[i].NbytesOf(r) == p->inputs[i].NbytesOf(from);
        rotated[r].push_back((*host)[from][i].data());
      }
    }
    std::optional<OracleIo> shifted;
    if (can_rotate) {
      auto io2 = BuildOracleIo(*p, kSeed, rotated);
      ASSERT_TRUE(io2.ok()) << io2.status().ToString();
      ASSERT_TRUE(RunOracle(*p, *io2).ok());
      shifted = std::move(*io2);
    }

    for (size_t k = 0; k < p->outputs.size(); ++k) {
      const ConcreteTensor& out = p->outputs[k];
      SCOPED_TRACE(fmt::format("output '{}'", out.name));
      const std::vector<int> ranks = CheckedRanks(out, world);
      ASSERT_FALSE(ranks.empty()) << "no rank's value of this output is checked";
      bool zeros = false, copy = false, stale = false, wrong_rank = false;
      auto count_of = [&](const OracleIo& x, int r) {
        return out.count_output < 0 ? std::span<const double>()
                                    : std::span<const double>(
                                          x.outputs[r][static_cast<size_t>(out.count_output)].data);
      };
      for (int r : ranks) {
        std::span<const double> expected = io->outputs[r][k].data;
        const auto count = count_of(*io, r);
        // The oracle's own answer passes (else nothing below means anything).
        ASSERT_FALSE(Fails(out, r, expected, expected, count)) << "rank " << r;
        zeros = zeros || Fails(out, r, {}, expected, count);
        copy = copy || Fails(out, r, CopySource(*p, *io, out, r), expected, count);
        stale = stale || Fails(out, r, other->outputs[r][k].data, expected, count);
        if (shifted) {
          wrong_rank = wrong_rank || Fails(out, r, shifted->outputs[r][k].data, expected, count);
        }
        if (out.count_output >= 0) {
          // Rows past the count are never read: garbage there passes.
          std::vector<double> padded(expected.begin(), expected.end());
          const size_t valid = static_cast<size_t>(count[0] * static_cast<double>(out.RowElems(r)));
          for (size_t i = valid; i < padded.size(); ++i)
            padded[i] = 12345.0 + static_cast<double>(i);
          EXPECT_FALSE(Fails(out, r, padded, expected, count))
              << "rank " << r << ": garbage past the count of " << count[0] << " rows is read";
        }
      }
      // A count one off fails (its own output is compared exactly).
      const bool is_count = std::any_of(p->outputs.begin(), p->outputs.end(), [&](const auto& o) {
        return o.count_output == static_cast<int>(k);
      });
      if (is_count) {
        for (int r : ranks) {
          const double n = io->outputs[r][k].data[0];
          const std::vector<double> more = {n + 1}, fewer = {n - 1};
          EXPECT_TRUE(Fails(out, r, more, io->outputs[r][k].data)) << "a count one too high passes";
          if (n > 0) {
            EXPECT_TRUE(Fails(out, r, fewer, io->outputs[r][k].data))
                << "a count one too low passes";
          }
        }
      }
      EXPECT_TRUE(zeros) << "an all-zeros output passes the check";
      EXPECT_TRUE(copy) << "a copy of an input passes the check";
      EXPECT_TRUE(stale) << "the answer for other inputs passes the check";
      if (!shifted) continue;    // ranks' inputs differ in size: no rotation exists
      if (out.rank_symmetric) {  // declared in task.toml: a sum over ranks
        EXPECT_FALSE(wrong_rank) << "declared rank_symmetric, but rotating inputs changes it";
      } else {
        EXPECT_TRUE(wrong_rank)
            << "the output for another rank's inputs passes the check (if the output is a "
               "sum over ranks, declare rank_symmetric = true)";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryTask, NegativeChecks, ::testing::ValuesIn(TaskKeys()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return "t" + name;
                         });

}  // namespace
}  // namespace kforge::eval
