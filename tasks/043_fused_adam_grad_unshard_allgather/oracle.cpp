// Sharded Adam + all-gather: every rank updates its shard (master, m, v in
// place) and every rank's params is the concatenation of all updated shards.
#include "kforge/oracle.h"

#include <algorithm>
#include <vector>

#include "kforge/oracle_math.h"

KF_ORACLE(fused_adam_grad_unshard_allgather) {
  const size_t p = io.in(0, "grad").size();
  kforge::om::AdamConfig cfg;
  cfg.lr = io.param("lr");
  cfg.beta1 = io.param("beta1");
  cfg.beta2 = io.param("beta2");
  cfg.eps = io.param("eps");
  cfg.weight_decay = 0.0;
  cfg.step = static_cast<int64_t>(io.in(0, "step")[0]);
  if (cfg.step < 1) {
    return kforge::Error(kforge::ErrorKind::kHarness, "fused_adam: step must be >= 1");
  }
  std::vector<double> gathered(p * io.world);
  for (int r = 0; r < io.world; ++r) {
    auto master = io.out(r, "master");
    auto m = io.out(r, "exp_avg");
    auto v = io.out(r, "exp_avg_sq");
    auto in_master = io.in(r, "master");
    auto in_m = io.in(r, "exp_avg");
    auto in_v = io.in(r, "exp_avg_sq");
    if (master.size() != p || m.size() != p || v.size() != p || io.in(r, "grad").size() != p) {
      return kforge::Error(kforge::ErrorKind::kHarness, "fused_adam: shard sizes differ");
    }
    std::copy(in_master.begin(), in_master.end(), master.begin());
    std::copy(in_m.begin(), in_m.end(), m.begin());
    std::copy(in_v.begin(), in_v.end(), v.begin());
    kforge::om::AdamStep(master, io.in(r, "grad"), m, v, cfg);
    std::copy(master.begin(), master.end(), gathered.begin() + r * p);
  }
  for (int r = 0; r < io.world; ++r) {
    auto y = io.out(r, "params");
    if (y.size() != gathered.size()) {
      return kforge::Error(kforge::ErrorKind::kHarness, "fused_adam: params is not W * P long");
    }
    std::copy(gathered.begin(), gathered.end(), y.begin());
  }
  return kforge::Status::Ok();
}
