// Deliberately crashing kernel: rank 1 writes through a null pointer.
#include <kforge/kernel.h>

__global__ void Poke(float* p) { *p = 1.0f; }

extern "C" int kf_run(kf_ctx* ctx) {
  float* target = ctx->rank == 1 ? nullptr : static_cast<float*>(ctx->outputs[0].data);
  Poke<<<1, 1, 0, ctx->stream>>>(target);
  return cudaGetLastError() != cudaSuccess;
}
