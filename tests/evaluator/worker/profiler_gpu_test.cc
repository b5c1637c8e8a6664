// The range profiler on a kernel whose counters are known: a copy of 256 MiB
// (five times the L2) reads and writes that many bytes of DRAM, and its range
// lasts about as long as CUDA events around it say.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "profiler.h"
#include "protocol/messages.h"

cudaError_t LaunchFill(float* p, size_t n);
cudaError_t LaunchCopy(const float* src, float* dst, size_t n);

namespace kforge::worker {
namespace {

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

TEST(RangeProfilerGpuTest, CountsTheBytesAndTheTimeOfACopy) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device";
  constexpr int kPasses = eval::proto::kProfilePasses;
  constexpr size_t kBytes = size_t{256} << 20;
  const size_t n = kBytes / sizeof(float);
  float *src = nullptr, *dst = nullptr;
  ASSERT_CUDA(cudaMalloc(&src, kBytes));
  ASSERT_CUDA(cudaMalloc(&dst, kBytes));
  ASSERT_CUDA(LaunchFill(src, n));
  ASSERT_CUDA(cudaDeviceSynchronize());

  auto created = RangeProfiler::Create(eval::proto::ProfileMetricNames(), /*max_passes=*/kPasses);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  RangeProfiler& p = **created;
  ASSERT_GE(p.passes(), 1);
  ASSERT_LE(p.passes(), kPasses);
  std::printf("profiler: %zu metrics in %d passes\n", p.metrics().size(), p.passes());
  for (const auto& [name, why] : p.dropped())
    std::printf("  left out %s: %s\n", name.c_str(), why.substr(0, 160).c_str());

  cudaEvent_t a, b;
  ASSERT_CUDA(cudaEventCreate(&a));
  ASSERT_CUDA(cudaEventCreate(&b));
  double event_us = 0;
  int calls = 0;
  for (; !p.done() && calls < 2 * kPasses; ++calls) {
    ASSERT_TRUE(p.Begin().ok());
    ASSERT_CUDA(cudaEventRecord(a));
    ASSERT_CUDA(LaunchCopy(src, dst, n));
    ASSERT_CUDA(cudaEventRecord(b));
    ASSERT_CUDA(cudaDeviceSynchronize());
    Status end = p.End();
    ASSERT_TRUE(end.ok()) << end.ToString();
    float ms = 0;
    ASSERT_CUDA(cudaEventElapsedTime(&ms, a, b));
    event_us += ms * 1000.0;
  }
  ASSERT_TRUE(p.done()) << "passes not all submitted after " << calls << " calls";
  EXPECT_EQ(calls, p.passes());
  event_us /= calls;
  auto values = p.Values();
  ASSERT_TRUE(values.ok()) << values.status().ToString();
  std::map<std::string, double> v(values->begin(), values->end());
  for (const auto& [name, x] : v) std::printf("  %-66s %.4g\n", name.c_str(), x);

  ASSERT_TRUE(v.count("gpu__time_duration.sum"));
  const double range_us = v["gpu__time_duration.sum"] / 1000.0;  // ns
  std::printf("range %.1f us, CUDA events %.1f us (mean of %d calls)\n", range_us, event_us, calls);
  EXPECT_GT(range_us, 0.5 * event_us);
  EXPECT_LT(range_us, 2.0 * event_us);
  ASSERT_TRUE(v.count("dram__bytes_read.sum"));
  ASSERT_TRUE(v.count("dram__bytes_write.sum"));
  EXPECT_NEAR(v["dram__bytes_read.sum"] / kBytes, 1.0, 0.15);
  EXPECT_NEAR(v["dram__bytes_write.sum"] / kBytes, 1.0, 0.15);
  EXPECT_GT(v["dram__throughput.avg.pct_of_peak_sustained_elapsed"], 20.0);
  ASSERT_CUDA(cudaEventDestroy(a));
  ASSERT_CUDA(cudaEventDestroy(b));
  ASSERT_CUDA(cudaFree(src));
  ASSERT_CUDA(cudaFree(dst));
}

}  // namespace
}  // namespace kforge::worker
