#include "test_kernels.h"

namespace kforge::eval::testing {

const char* const kGoodKernel = R"(#include <kforge/kernel.h>
__global__ void copy(const float* a, float* b, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i];
}
extern "C" int kf_setup(kf_ctx*) { return 0; }
extern "C" int kf_run(kf_ctx* ctx) {
  int64_t n = ctx->inputs[0].numel;
  copy<<<(unsigned)((n + 255) / 256), 256, 0, ctx->stream>>>(
      (const float*)ctx->inputs[0].data, (float*)ctx->outputs[0].data, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
extern "C" int kf_teardown(kf_ctx*) { return 0; }
)";

const char* const kSyntaxErrorKernel = R"(#include <kforge/kernel.h>
__global__ void copy(const float* a, float* b, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] + undefined_x;
}
extern "C" int kf_run(kf_ctx* ctx) { return 0 }
)";

const char* const kNoRunKernel = R"(#include <kforge/kernel.h>
extern "C" int kf_setup(kf_ctx*) { return 0; }
)";

const char* const kLinkErrorKernel = R"(#include <kforge/kernel.h>
extern "C" int helper_nobody_defines(int);
extern "C" int kf_run(kf_ctx* ctx) { return helper_nobody_defines(ctx->rank); }
)";

const char* const kNcclKernel = R"(#include <kforge/kernel.h>
#include <nccl.h>
extern "C" int kf_run(kf_ctx* ctx) {
  ncclComm_t comm = (ncclComm_t)ctx->user;
  return ncclAllReduce(ctx->inputs[0].data, ctx->outputs[0].data, (size_t)ctx->inputs[0].numel, ncclFloat,
                       ncclSum, comm, ctx->stream) != ncclSuccess;
}
)";

const char* const kBadActorKernel = R"(#include <kforge/kernel.h>
#include <dlfcn.h>
__global__ void sum(float* multicast, float* out) {
  float v;
  asm volatile("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];" : "=f"(v) : "l"(multicast) : "memory");
  out[threadIdx.x] = v;
}
extern "C" int kf_run(kf_ctx* ctx) {
  void* h = dlopen("libnccl.so.2", RTLD_NOW);
  sum<<<1, 32, 0, ctx->stream>>>((float*)ctx->inputs[0].data, (float*)ctx->outputs[0].data);
  return h == nullptr;
}
)";

const char* const kCollectivesKernel = R"(#include <kforge/kernel.h>
extern "C" int kf_run(kf_ctx* c) {
  return kf_all_reduce(c, c->inputs[0].data, c->outputs[0].data, (size_t)c->inputs[0].numel, KF_F32, KF_SUM);
}
)";

CompileJob JobFor(const char* source) {
  CompileJob job;
  job.source = source;
  job.display_name = "candidate.cu";
  if (source == kNcclKernel) job.libraries = {"nccl"};
  return job;
}

bool HaveNvcc() { return SharedCompiler().Nvcc().ok(); }

Compiler& SharedCompiler() {
  static Compiler* compiler = [] {
    CompileOptions options;
    options.cache_dir = KFORGE_TEST_COMPILE_CACHE;
    return new Compiler(options);
  }();
  return *compiler;
}

const CompiledKernels& Kernels() {
  static const CompiledKernels* kernels = [] {
    std::vector<CompileResult> r = SharedCompiler().CompileAll(
        {JobFor(kGoodKernel), JobFor(kSyntaxErrorKernel), JobFor(kNoRunKernel),
         JobFor(kLinkErrorKernel), JobFor(kNcclKernel), JobFor(kBadActorKernel),
         JobFor(kCollectivesKernel)});
    return new CompiledKernels{r[0], r[1], r[2], r[3], r[4], r[5], r[6]};
  }();
  return *kernels;
}

}  // namespace kforge::eval::testing
