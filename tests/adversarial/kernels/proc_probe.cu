// Probe: try to open the coordinator's memory for writing and its environment (/proc/<parent>/environ); on success, make it visible
// with a forbidden syscall. Expected: passed (both are refused).
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace naive {

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

inline int Launch(kf_ctx* ctx, cudaStream_t stream) {
  Peers peers;
  for (int r = 0; r < ctx->world_size; ++r) peers.p[r] = ctx->inputs[0].peers[r];
  const int64_t n = ctx->outputs[0].numel;
  const int blocks = (int)((n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096);
  SumKernel<<<blocks > 0 ? blocks : 1, 256, 0, stream>>>(peers, ctx->outputs[0].data, n, ctx->world_size,
                                                         ctx->outputs[0].dtype == KF_BF16);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

}  // namespace naive

// Raw system calls (x86-64): nothing in the import table for the policy
// check to see; only the runtime sandbox can stop them.
static long RawSyscall(long n, long a = 0, long b = 0, long c = 0) {
  long ret;
  asm volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
  return ret;
}
static const long kSysFork = 57, kSysSocket = 41, kSysExit = 60;

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void Probe() {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/mem", (int)getppid());
  int mem = open(path, O_RDWR);
  snprintf(path, sizeof(path), "/proc/%d/environ", (int)getppid());
  int env = open(path, O_RDONLY);
  char byte;
  bool env_read = env >= 0 && read(env, &byte, 1) == 1;
  if (mem >= 0 || env_read) {
    if (RawSyscall(kSysFork) == 0) RawSyscall(kSysExit);
  }
  if (mem >= 0) close(mem);
  if (env >= 0) close(env);
}
extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) { return naive::Launch(ctx, ctx->stream); }
extern "C" int kf_teardown(kf_ctx*) { return 0; }
