// Hybrid context parallelism's sample reroute (Megatron-LM reroute_samples_to_hdp_ranks): every
// sequence goes whole, with its four per-token keys, from the rank that loaded it to every rank
// of its CP group; a rank's outputs are its sequences in ascending sample id.
//
// The generator draws the replicated schedule from the trial seed alone, so that every rank
// gets the same lengths and groups: lengths long-tailed in [1, L]; a sequence's group size is
// gpus_needed(len) = the power of two >= ceil(len / C), at most W (Megatron's
// BalancedCPScheduler.gpus_needed); sequences are placed heaviest first (workload len^2 / size,
// as get_total_workload) on the aligned group of that size whose most-loaded rank is least
// loaded.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace {

int64_t Var(const std::map<std::string, double>& vars, const char* name) {
  auto it = vars.find(name);
  return it == vars.end() ? 0 : static_cast<int64_t>(it->second);
}

uint64_t Mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

struct Schedule {
  std::vector<int64_t> len, mask;
};

Schedule MakeSchedule(uint64_t trial_seed, int world, int64_t ns, int64_t max_len,
                      int64_t per_rank) {
  kforge::OracleRng rng(Mix(trial_seed ^ 0x63705f6c6f616462ull));
  const int64_t n = world * ns;
  Schedule s;
  std::vector<int64_t> size(static_cast<size_t>(n));
  std::vector<double> work(static_cast<size_t>(n));
  for (int64_t g = 0; g < n; ++g) {
    const double u = rng.Uniform();
    const int64_t len =
        1 + static_cast<int64_t>(std::floor(static_cast<double>(max_len - 1) * u * u * u));
    int64_t c = 1;
    while (c < world && c * per_rank < len) c *= 2;
    s.len.push_back(len);
    size[static_cast<size_t>(g)] = c;
    work[static_cast<size_t>(g)] =
        static_cast<double>(len) * static_cast<double>(len) / static_cast<double>(c);
  }
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return work[static_cast<size_t>(a)] > work[static_cast<size_t>(b)];
  });
  std::vector<double> load(static_cast<size_t>(world), 0.0);
  s.mask.assign(static_cast<size_t>(n), 0);
  for (int64_t g : order) {
    const int64_t c = size[static_cast<size_t>(g)];
    int64_t best = 0;
    double best_load = 0;
    for (int64_t start = 0; start + c <= world; start += c) {
      double m = 0;
      for (int64_t d = start; d < start + c; ++d) m = std::max(m, load[static_cast<size_t>(d)]);
      if (start == 0 || m < best_load) best = start, best_load = m;
    }
    for (int64_t d = best; d < best + c; ++d)
      load[static_cast<size_t>(d)] += work[static_cast<size_t>(g)];
    s.mask[static_cast<size_t>(g)] = ((int64_t{1} << c) - 1) << best;
  }
  return s;
}

}  // namespace

KF_INPUT_GENERATOR(cp_alltoallv_load_balance) {
  const Schedule s = MakeSchedule(gen.trial_seed, gen.world, Var(gen.params, "NS"),
                                  Var(gen.params, "L"), Var(gen.params, "C"));
  const std::vector<int64_t>* src = nullptr;
  if (gen.input_name == "seqlens") src = &s.len;
  if (gen.input_name == "dest_mask") src = &s.mask;
  if (src == nullptr || src->size() != gen.tensor->data.size())
    return kforge::Error(kforge::ErrorKind::kHarness, "cp_alltoallv_load_balance: unknown input");
  for (size_t i = 0; i < src->size(); ++i) gen.tensor->data[i] = static_cast<double>((*src)[i]);
  return kforge::Status::Ok();
}

KF_ORACLE(cp_alltoallv_load_balance) {
  const int world = io.world;
  const int64_t ns = static_cast<int64_t>(io.param("NS"));
  const int64_t max_len = static_cast<int64_t>(io.param("L"));
  const auto len = io.in(0, "seqlens");
  const auto mask = io.in(0, "dest_mask");
  const int64_t n = world * ns;
  if (static_cast<int64_t>(len.size()) != n || static_cast<int64_t>(mask.size()) != n)
    return kforge::Error(kforge::ErrorKind::kHarness, "cp_alltoallv_load_balance: schedule size");
  // Where each sequence starts in its loading rank's packed tensors.
  std::vector<int64_t> off(static_cast<size_t>(n));
  for (int p = 0; p < world; ++p) {
    int64_t at = 0;
    for (int64_t i = 0; i < ns; ++i) {
      const int64_t g = p * ns + i;
      const double l = len[static_cast<size_t>(g)];
      if (!(l >= 1) || l > static_cast<double>(max_len) || l != std::floor(l))
        return kforge::Error(kforge::ErrorKind::kHarness, "a sequence length outside [1, L]");
      off[static_cast<size_t>(g)] = at;
      at += static_cast<int64_t>(l);
    }
  }
  const char* keys[4][2] = {{"tokens", "tokens_out"},
                            {"labels", "labels_out"},
                            {"loss_mask", "loss_mask_out"},
                            {"position_ids", "position_ids_out"}};
  for (int r = 0; r < world; ++r) {
    int64_t count = 0;
    for (int64_t g = 0; g < n; ++g) {
      const int64_t m = static_cast<int64_t>(mask[static_cast<size_t>(g)]);
      if (((m >> r) & 1) == 0) continue;
      const int p = static_cast<int>(g / ns);
      const int64_t l = static_cast<int64_t>(len[static_cast<size_t>(g)]);
      for (const auto& key : keys) {
        const auto src = io.in(p, key[0]);
        auto dst = io.out(r, key[1]);
        for (int64_t t = 0; t < l; ++t)
          dst[static_cast<size_t>(count + t)] =
              src[static_cast<size_t>(off[static_cast<size_t>(g)] + t)];
      }
      count += l;
    }
    io.out(r, "num_tokens")[0] = static_cast<double>(count);
  }
  return kforge::Status::Ok();
}
