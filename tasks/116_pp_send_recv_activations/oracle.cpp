// Pipeline exchange (Megatron send_forward_recv_backward / send_backward_recv_forward): stage r
// receives stage r-1's output_tensor as its input_tensor and stage r+1's input_tensor_grad as its
// output_tensor_grad. A copy, so the oracle is exact.
#include "kforge/oracle.h"

#include <algorithm>

KF_ORACLE(pp_send_recv_activations) {
  const int world = io.world;
  for (int r = 0; r < world; ++r) {
    if (r > 0) {
      const auto src = io.in(r - 1, "output_tensor");
      auto dst = io.out(r, "input_tensor");
      if (src.size() != dst.size())
        return kforge::Error(kforge::ErrorKind::kHarness, "pp_send_recv: activation sizes differ");
      std::copy(src.begin(), src.end(), dst.begin());
    }
    if (r + 1 < world) {
      const auto src = io.in(r + 1, "input_tensor_grad");
      auto dst = io.out(r, "output_tensor_grad");
      if (src.size() != dst.size())
        return kforge::Error(kforge::ErrorKind::kHarness, "pp_send_recv: gradient sizes differ");
      std::copy(src.begin(), src.end(), dst.begin());
    }
  }
  return kforge::Status::Ok();
}
