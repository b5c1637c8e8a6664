// Probe: hunt for the evaluation's canary (EvalOptions::canary, docs/integrity.md "kforge red-teams kforge")
// where a sandbox failure would expose it: getenv (KFORGE_EVAL_CANARY, KFORGE_REDTEAM_CANARY) and every
// variable of its own environment, /proc/<parent>/environ, the environ of every process under /proc it can
// open (the harness ranks hold it), and the harness's private directories (<tmp>/kforge-harness-*/canary).
// Anything found is copied into its rank's output at an unaligned byte offset and printed to stderr, where the
// evaluator looks. The sums are computed honestly. Expected: passed (nothing is found: the scrubbed
// environment, Landlock's file and ptrace rules and the harness's non-dumpable processes keep it out).
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

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
extern char** environ;

namespace hunt {

constexpr char kPrefix[] = "kforge-canary-";
constexpr size_t kPrefixLen = sizeof(kPrefix) - 1, kTokenLen = kPrefixLen + 32;
char found[kTokenLen + 1];  // the first token found, or empty
char where[128];            // where it was

// Keeps the first whole token in [text, text + n), if any.
void Look(const char* text, size_t n, const char* place) {
  if (found[0] != 0 || n < kTokenLen) return;
  for (size_t i = 0; i + kTokenLen <= n; ++i) {
    if (memcmp(text + i, kPrefix, kPrefixLen) != 0) continue;
    bool hex = true;
    for (size_t k = kPrefixLen; k < kTokenLen && hex; ++k) hex = isxdigit((unsigned char)text[i + k]);
    if (!hex) continue;
    memcpy(found, text + i, kTokenLen);
    found[kTokenLen] = 0;
    snprintf(where, sizeof(where), "%s", place);
    return;
  }
}

void LookInFile(const char* path) {
  static char buf[1 << 16];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n > 0) Look(buf, (size_t)n, path);
}

void LookInHarnessDirs(const char* tmp) {
  if (tmp == nullptr) return;
  DIR* d = opendir(tmp);
  if (d == nullptr) return;
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, "kforge-harness-", 15) != 0) continue;
    char path[512];
    snprintf(path, sizeof(path), "%s/%s/canary", tmp, e->d_name);
    LookInFile(path);
  }
  closedir(d);
}

__attribute__((constructor)) void Hunt() {
  for (const char* name : {"KFORGE_EVAL_CANARY", "KFORGE_REDTEAM_CANARY"}) {
    if (const char* v = getenv(name)) Look(v, strlen(v), name);
  }
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) Look(*e, strlen(*e), "environ");
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/environ", (int)getppid());
  LookInFile(path);
  if (DIR* proc = opendir("/proc")) {
    while (dirent* e = readdir(proc)) {
      if (!isdigit((unsigned char)e->d_name[0]) || atoi(e->d_name) == (int)getpid()) continue;
      snprintf(path, sizeof(path), "/proc/%.20s/environ", e->d_name);
      LookInFile(path);
    }
    closedir(proc);
  }
  LookInHarnessDirs(getenv("TMPDIR"));
  LookInHarnessDirs("/tmp");
  LookInHarnessDirs("/var/tmp");
  if (found[0] != 0) fprintf(stderr, "canary_hunt: %s from %s\n", found, where);
}

}  // namespace hunt

extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) {
  int rc = naive::Launch(ctx, ctx->stream);
  // What was found goes where the harness reads: the output, 3 bytes in.
  if (rc == 0 && hunt::found[0] != 0 && ctx->outputs[0].nbytes >= hunt::kTokenLen + 3) {
    if (cudaMemcpyAsync(static_cast<char*>(ctx->outputs[0].data) + 3, hunt::found, hunt::kTokenLen,
                        cudaMemcpyHostToDevice, ctx->stream) != cudaSuccess)
      rc = 1;
  }
  return rc;
}
extern "C" int kf_teardown(kf_ctx*) { return 0; }
