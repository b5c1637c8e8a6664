// Exploit: do a whole round's work ahead of its calls. It learns every set's
// input and output addresses in the first round; from then on, whenever it
// sees another set's inputs change (a fingerprint of their first 16 bytes),
// it computes that set's outputs at once, into that set's output buffer, and
// a later call on that set returns without doing anything. Against an
// evaluator that made a round's inputs (and poisoned its outputs) before the
// round's first call, one call did the round's work and the others only
// waited: it passed at 1.66x the honest kernel's speedup. Expected: passed,
// and no faster than honest_naive.cu: a set's inputs reach the candidate's
// arena only when its call is staged, so every other set it can see holds
// inputs already spent, and nothing it wrote ahead survives the poison.
#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

#include "kforge/kernel.h"

namespace {

constexpr int kMaxSets = 64;

struct Peers {
  const void* p[KF_MAX_RANKS];
};

__global__ void SumKernel(Peers in, void* out, int64_t n, int world, int bf16) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    float acc = 0.f;
    for (int r = 0; r < world; ++r) {
      acc += bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(in.p[r])[i])
                  : static_cast<const float*>(in.p[r])[i];
    }
    if (bf16) static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(acc);
    else static_cast<float*>(out)[i] = acc;
  }
}

struct Inputs {
  const uint4* own[kMaxSets];
};

// The first 16 bytes of every known set's own input, into mapped host memory.
__global__ void Fingerprints(Inputs in, int n, uint4* out) {
  if (threadIdx.x < n) out[threadIdx.x] = in.own[threadIdx.x][0];
}

struct Set {
  const void* own = nullptr;  // this rank's input (the key)
  Peers peers{};
  void* out = nullptr;
  uint4 fp{};
  bool ahead = false;  // its outputs were computed for the inputs with fingerprint fp
};

Set g_sets[kMaxSets];
int g_known = 0;
uint4* g_fp = nullptr;  // mapped host memory, kMaxSets entries

bool Same(uint4 a, uint4 b) { return a.x == b.x && a.y == b.y && a.z == b.z && a.w == b.w; }

int Sum(const Set& s, const kf_ctx* ctx) {
  const int64_t n = ctx->outputs[0].numel;
  const int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  SumKernel<<<blocks > 0 ? blocks : 1, 256, 0, ctx->stream>>>(s.peers, s.out, n, ctx->world_size,
                                                               ctx->outputs[0].dtype == KF_BF16);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) {
  g_known = 0;
  if (g_fp == nullptr &&
      cudaHostAlloc(reinterpret_cast<void**>(&g_fp), kMaxSets * sizeof(uint4), cudaHostAllocMapped) !=
          cudaSuccess)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  int cur = -1;
  for (int j = 0; j < g_known; ++j)
    if (g_sets[j].own == ctx->inputs[0].data) cur = j;
  if (cur < 0) {
    if (g_known == kMaxSets) return 1;
    cur = g_known++;
    g_sets[cur].own = ctx->inputs[0].data;
    g_sets[cur].out = ctx->outputs[0].data;
    for (int r = 0; r < ctx->world_size; ++r) g_sets[cur].peers.p[r] = ctx->inputs[0].peers[r];
    g_sets[cur].ahead = false;
  }
  // Which sets' inputs changed since this process last looked at them?
  Inputs in{};
  for (int j = 0; j < g_known; ++j) in.own[j] = static_cast<const uint4*>(g_sets[j].own);
  uint4* dev_fp = nullptr;
  if (cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev_fp), g_fp, 0) != cudaSuccess) return 1;
  Fingerprints<<<1, kMaxSets, 0, ctx->stream>>>(in, g_known, dev_fp);
  if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) return 1;
  for (int j = 0; j < g_known; ++j) {
    Set& s = g_sets[j];
    const bool changed = !Same(g_fp[j], s.fp);
    if (j == cur) {
      if (!changed && s.ahead) {
        s.ahead = false;  // done in an earlier call: nothing to do
        return 0;
      }
      continue;
    }
    if (changed) {  // fresh inputs of a later call: do its work now
      if (Sum(s, ctx) != 0) return 1;
      s.fp = g_fp[j];
      s.ahead = true;
    }
  }
  Set& s = g_sets[cur];
  s.fp = g_fp[cur];
  s.ahead = false;
  return Sum(s, ctx);
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
