// Cold versus cached compile wall time of one kernel.
//
//   compile_bench [kernel.cu] [--arch sm_90a] [--lib nccl]... [--runs N]
//
// Each cold run compiles into a fresh cache directory; each cached run looks
// the same job up again. Without a file, a small copy kernel is used.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/fs.h"
#include "kforge/evaluator/compile.h"

namespace {

constexpr const char* kCopyKernel = R"(#include <kforge/kernel.h>
__global__ void copy(const float* a, float* b, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i];
}
extern "C" int kf_run(kf_ctx* ctx) {
  int64_t n = ctx->inputs[0].numel;
  copy<<<(unsigned)((n + 255) / 256), 256, 0, ctx->stream>>>(
      (const float*)ctx->inputs[0].data, (float*)ctx->outputs[0].data, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
)";

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  using kforge::eval::CompileJob;
  CompileJob job;
  job.source = kCopyKernel;
  job.display_name = "copy.cu";
  int runs = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--arch" && i + 1 < argc) {
      job.arch = argv[++i];
    } else if (a == "--lib" && i + 1 < argc) {
      job.libraries.push_back(argv[++i]);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      kforge::Result<std::string> text = kforge::ReadFile(a);
      if (!text.ok()) {
        std::fprintf(stderr, "%s\n", text.status().ToString().c_str());
        return 2;
      }
      job.source = *text;
      job.display_name = std::filesystem::path(a).filename().string();
    }
  }
  std::vector<double> cold, cached;
  for (int r = 0; r < runs; ++r) {
    std::filesystem::path dir = kforge::MakeTempDir("kforge-compile-bench").value();
    kforge::eval::CompileOptions options;
    options.cache_dir = dir;
    kforge::eval::Compiler compiler(options);
    kforge::eval::CompileResult first = compiler.Compile(job);
    if (!first.status.ok()) {
      std::fprintf(stderr, "%s\n%s\n", first.status.ToString().c_str(), first.log.c_str());
      return 1;
    }
    cold.push_back(first.seconds);
    for (int k = 0; k < 20; ++k) cached.push_back(compiler.Compile(job).seconds);
    std::filesystem::remove_all(dir);
  }
  std::printf(
      "kernel %s arch %s: cold median %.2f s (min %.2f, %d runs); cached median %.2f ms (%zu "
      "lookups)\n",
      job.display_name.c_str(), job.arch.c_str(), Median(cold),
      *std::min_element(cold.begin(), cold.end()), runs, Median(cached) * 1e3, cached.size());
  return 0;
}
