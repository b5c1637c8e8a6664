// Three in-place all-reduces (sum over ranks) of the expert LoRA gradients.
#include "kforge/oracle.h"

#include <string>
#include <vector>

KF_ORACLE(moe_epgroupgemm_lora_backward) {
  for (const char* name : {"grad_fc1_1_lora_A", "grad_fc1_2_lora_A", "grad_fc2_lora_B"}) {
    const size_t n = io.in(0, name).size();
    std::vector<double> sum(n, 0.0);
    for (int r = 0; r < io.world; ++r) {
      auto x = io.in(r, name);
      for (size_t i = 0; i < n; ++i) sum[i] += x[i];
    }
    for (int r = 0; r < io.world; ++r) {
      auto y = io.out(r, name);
      if (y.size() != n) {
        return kforge::Error(
            kforge::ErrorKind::kHarness,
            std::string("moe_epgroupgemm_lora_backward: no inout state for ") + name);
      }
      for (size_t i = 0; i < n; ++i) y[i] = sum[i];
    }
  }
  return kforge::Status::Ok();
}
