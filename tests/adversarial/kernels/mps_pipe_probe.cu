// Probe: reach the MPS control daemon through the pipe directory every
// client sees (CUDA_MPS_PIPE_DIRECTORY): create a file beside its sockets,
// or open any pipe or file there for writing (the control daemon takes
// commands such as `quit` or `set_default_active_thread_percentage` through
// it, which would stall or starve the baseline timed after this kernel).
// Nothing is written. On success, make it visible with a forbidden syscall.
// Expected: passed (the directory is read-only to a candidate).
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
static const long kSysFork = 57, kSysExit = 60;

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
__attribute__((constructor)) static void Probe() {
  const char* dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
  if (dir == nullptr) return;
  bool reached = false;
  char path[512];
  snprintf(path, sizeof(path), "%s/kforge-probe", dir);
  int made = open(path, O_CREAT | O_EXCL | O_WRONLY, 0600);
  if (made >= 0) {
    reached = true;
    close(made);
  }
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) {
      snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
      struct stat st;
      if (stat(path, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISREG(st.st_mode))) continue;
      int fd = open(path, O_WRONLY | O_NONBLOCK);
      if (fd >= 0) {
        reached = true;
        close(fd);
      }
    }
    closedir(d);
  }
  if (reached && RawSyscall(kSysFork) == 0) RawSyscall(kSysExit);
}
extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) { return naive::Launch(ctx, ctx->stream); }
extern "C" int kf_teardown(kf_ctx*) { return 0; }
