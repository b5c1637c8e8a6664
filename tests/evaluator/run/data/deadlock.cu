// Deliberately deadlocking kernel: waits for a flag that no rank ever sets,
// with a plain volatile spin (no kf_wait, so no device-side timeout). The
// evaluator must kill the rank group at the phase deadline and name the ranks.
#include <kforge/kernel.h>

__global__ void WaitForever(volatile uint32_t* flag) {
  while (*flag != 0xC0FFEEu) {
  }
}

extern "C" int kf_run(kf_ctx* ctx) {
  auto* pad = static_cast<volatile uint32_t*>(ctx->signal_pad.data);
  WaitForever<<<1, 1, 0, ctx->stream>>>(pad);
  return cudaGetLastError() != cudaSuccess;
}
