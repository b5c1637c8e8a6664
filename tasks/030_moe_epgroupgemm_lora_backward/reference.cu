// LoRA gradient sync baseline, as VeOmni does it: three in-place harness
// all-reduces (NCCL on real GPUs), one per gradient.
#include "kforge/kernel.h"

extern "C" int kf_setup(kf_ctx* ctx) {
  const char* names[] = {"grad_fc1_1_lora_A", "grad_fc1_2_lora_A", "grad_fc2_lora_B"};
  for (const char* n : names)
    if (kf_input(ctx, n) == nullptr) return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const char* names[] = {"grad_fc1_1_lora_A", "grad_fc1_2_lora_A", "grad_fc2_lora_B"};
  for (const char* n : names) {
    kf_tensor* t = kf_input(ctx, n);
    if (kf_all_reduce(ctx, t->data, t->data, static_cast<size_t>(t->numel), t->dtype, KF_SUM) != 0)
      return 1;
  }
  return 0;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
