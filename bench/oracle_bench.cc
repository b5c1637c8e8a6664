// The host's share of a correctness check: for every task, world size and
// check size, the seconds the coordinator spends per trial generating every
// rank's inputs, building the oracle's view and running the oracle, then
// comparing every rank's outputs with the oracle's (a correct output, as
// from an honest kernel; RunCheckSize compares the candidate's and, where it
// measures the baseline's error, the baseline's). Not a test.
//
//   build/tests/tasks/oracle_bench [tasks_dir] [--world W ...] [--trials N]
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kforge/evaluator/task.h"
#include "run/session.h"
#include "task/inputs.h"

namespace {

using kforge::eval::Problem;
using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Every rank's outputs, encoded from the oracle's (a correct kernel's), then
// compared with the oracle's as RunCheckSize compares a candidate's: the
// seconds of the comparisons alone.
double CompareSeconds(const Problem& p, const kforge::eval::HostInputs& inputs,
                      const kforge::OracleIo& io) {
  std::vector<std::vector<std::vector<char>>> got(static_cast<size_t>(p.world));
  for (int r = 0; r < p.world; ++r) {
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      const auto& expected = io.outputs[static_cast<size_t>(r)][o].data;
      auto& bytes = got[static_cast<size_t>(r)].emplace_back(p.outputs[o].NbytesOf(r));
      const auto n = std::min(expected.size(), static_cast<size_t>(p.outputs[o].NumelOf(r)));
      for (size_t i = 0; i < n; ++i)
        kforge::eval::StoreFromDouble(bytes.data(), p.outputs[o].dtype, i, expected[i]);
    }
  }
  const auto t0 = Clock::now();
  for (int r = 0; r < p.world; ++r) {
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      if (p.outputs[o].only_rank >= 0 && p.outputs[o].only_rank != r) continue;
      (void)kforge::eval::CheckAgainstOracle(p, r, static_cast<int>(o),
                                             got[static_cast<size_t>(r)][o].data(), io, inputs,
                                             0xFFFFFFFFu);
    }
  }
  return Since(t0);
}

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path dir = KFORGE_BENCH_TASKS_DIR;
  std::vector<int> worlds;
  int trials = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--world" && i + 1 < argc) {
      worlds.push_back(std::atoi(argv[++i]));
    } else if (a == "--trials" && i + 1 < argc) {
      trials = std::atoi(argv[++i]);
    } else {
      dir = a;
    }
  }
  if (worlds.empty()) worlds = {2, 8};
  auto tasks = kforge::eval::LoadTasks(dir);
  if (!tasks.ok()) {
    std::fprintf(stderr, "%s\n", tasks.status().ToString().c_str());
    return 1;
  }
  std::printf(
      "| task | W | dtype | check sizes | generated M elements | generate s | oracle view s | "
      "oracle s | compare s "
      "| per evaluation s (%d trials) |\n",
      trials);
  std::printf("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
  double total_by_w[16] = {};
  for (const auto& t : *tasks) {
    for (int w : worlds) {
      if (std::find(t.world_sizes.begin(), t.world_sizes.end(), w) == t.world_sizes.end()) continue;
      const kforge::eval::Dtype dt = t.dtypes.front();
      double gen_s = 0, view_s = 0, oracle_s = 0, compare_s = 0, elements = 0;
      int sizes = 0;
      for (const auto& size : t.check_sizes) {
        auto p = kforge::eval::Instantiate(t, w, dt, size, true);
        if (!p.ok()) continue;
        ++sizes;
        // As RunCheckSize: the trials of a size reuse the host's buffers.
        kforge::eval::HostInputs inputs;
        kforge::OracleIo io;
        for (int trial = 0; trial < trials; ++trial) {
          const uint64_t seed = 1000 + static_cast<uint64_t>(trial);
          auto t0 = Clock::now();
          if (!kforge::eval::GenerateAllInputsInto(*p, seed, &inputs).ok()) return 1;
          for (int r = 0; r < w; ++r) {
            for (const auto& in : p->inputs) elements += static_cast<double>(in.NumelOf(r));
          }
          gen_s += Since(t0);
          t0 = Clock::now();
          std::vector<std::vector<const void*>> ptrs(static_cast<size_t>(w));
          for (int r = 0; r < w; ++r) {
            for (const auto& b : inputs[static_cast<size_t>(r)])
              ptrs[static_cast<size_t>(r)].push_back(b.data());
          }
          if (!kforge::eval::BuildOracleIoInto(*p, ptrs, &io).ok()) return 1;
          view_s += Since(t0);
          auto t1 = Clock::now();
          if (!kforge::eval::RunOracle(*p, io).ok()) return 1;
          oracle_s += Since(t1);
          compare_s += CompareSeconds(*p, inputs, io);
        }
      }
      const double all_s = gen_s + view_s + oracle_s + compare_s;
      total_by_w[w % 16] += all_s;
      std::printf("| %s | %d | %s | %d | %.1f | %.3f | %.3f | %.3f | %.3f | %.3f |\n",
                  t.key.c_str(), w, std::string(kforge::eval::DtypeName(dt)).c_str(), sizes,
                  elements / 1e6, gen_s, view_s, oracle_s, compare_s, all_s);
    }
  }
  for (int w : worlds) std::printf("total at W=%d: %.2f s\n", w, total_by_w[w % 16]);
  return 0;
}
