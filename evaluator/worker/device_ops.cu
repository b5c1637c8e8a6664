#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_check.h"
#include "device_ops.h"
#include "task/element_codec.h"

namespace kforge::worker {
namespace {

namespace codec = eval::codec;

constexpr int kThreads = 256;

int Blocks(uint64_t n) {
  uint64_t b = (n + kThreads - 1) / kThreads;
  if (b > 65535ull * 16) b = 65535ull * 16;  // grid-stride loops cover the rest
  return static_cast<int>(b < 1 ? 1 : b);
}

__global__ void GenerateKernel(void* dst, eval::gen::InputGen gen, uint64_t n) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    gen.Fill(dst, i);
  }
}

// One thread per row: the host's MakeRowDistinct, row by row.
__global__ void DistinctRowsKernel(void* dst, int dtype, uint64_t rows, uint64_t len) {
  for (uint64_t r = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    eval::gen::MakeRowDistinct(dst, dtype, r, len);
  }
}

__global__ void PoisonKernel(uint32_t* dst, uint64_t words, uint32_t pattern) {
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    dst[i] = pattern;
  }
}

__global__ void L2FlushKernel(const uint4* buf, uint64_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(buf + i);  // cached in L2 only
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  // The buffer is zeros, so this never stores, but the loads cannot be dropped.
  if (acc == 0x9E3779B9u) *sink = acc;
}

__device__ void Record(DeviceCheck* r, uint64_t i) {
  atomicAdd(&r->bad, 1ull);
  atomicMin(&r->first_bad, static_cast<unsigned long long>(i));
}

// Grid-stride: at most kCompareBlocks blocks, so that each block's two sums
// cost one atomic each however large the output.
constexpr int kCompareBlocks = 2048;

__device__ double BlockSum(double v, double* shared) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? shared[threadIdx.x] : 0.0;
  if (warp == 0) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  }
  __syncthreads();  // `shared` is reused by the next sum
  return v;
}

__global__ void CompareKernel(const void* got, const void* expected, int dtype, uint64_t n,
                              double atol, double rtol, DeviceCheck* r) {
  __shared__ double partial[kThreads / 32];
  double sq_diff = 0, sq_expected = 0;
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const double g = codec::Load(got, dtype, i);
    const double e = codec::Load(expected, dtype, i);
    const bool finite =
        !codec::IsNan(g) && !codec::IsInf(g) && !codec::IsNan(e) && !codec::IsInf(e);
    // Same expression as the host's Close(): |g - e| <= atol + rtol * |e|.
    const double diff = codec::Abs(codec::Add(g, -e));
    const bool close = finite && diff <= codec::Add(atol, codec::Mul(rtol, codec::Abs(e)));
    if (!close) Record(r, i);
    if (finite) {
      sq_diff += diff * diff;
      sq_expected += e * e;
    }
  }
  sq_diff = BlockSum(sq_diff, partial);
  sq_expected = BlockSum(sq_expected, partial);
  if (threadIdx.x == 0) {
    atomicAdd(&r->sq_diff, sq_diff);
    atomicAdd(&r->sq_expected, sq_expected);
  }
}

__global__ void BytesKernel(const unsigned char* a, const unsigned char* b, size_t bytes,
                            DeviceCheck* r) {
  const uint64_t words = bytes / 8;
  const uint64_t* wa = reinterpret_cast<const uint64_t*>(a);
  const uint64_t* wb = reinterpret_cast<const uint64_t*>(b);
  for (uint64_t i = blockIdx.x * static_cast<uint64_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    if (wa[i] != wb[i]) Record(r, i);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (uint64_t i = words * 8; i < bytes; ++i) {
      if (a[i] != b[i]) Record(r, words);
    }
  }
}

__global__ void NullKernel() {}

}  // namespace

Status LaunchGenerate(void* dst, const eval::gen::InputGen& gen, uint64_t numel, cudaStream_t s) {
  if (numel == 0) return Status::Ok();
  GenerateKernel<<<Blocks(numel), kThreads, 0, s>>>(dst, gen, numel);
  KF_CUDA(cudaGetLastError());
  if (gen.distinct_len > 0) {
    const uint64_t rows = numel / gen.distinct_len;
    if (rows > 0) {
      DistinctRowsKernel<<<Blocks(rows), kThreads, 0, s>>>(dst, gen.dtype, rows, gen.distinct_len);
      KF_CUDA(cudaGetLastError());
    }
  }
  return Status::Ok();
}

Status LaunchPoison(void* dst, size_t bytes, uint32_t pattern, cudaStream_t s) {
  const uint64_t words = bytes / 4;
  if (words > 0) {
    PoisonKernel<<<Blocks(words), kThreads, 0, s>>>(static_cast<uint32_t*>(dst), words, pattern);
    KF_CUDA(cudaGetLastError());
  }
  // Arena tensors are 256-byte aligned and padded, so the tail is ours to write.
  const size_t tail = bytes % 4;
  if (tail != 0) {
    KF_CUDA(cudaMemcpyAsync(static_cast<char*>(dst) + words * 4, &pattern, tail,
                            cudaMemcpyHostToDevice, s));
    KF_CUDA(cudaStreamSynchronize(s));  // `pattern` lives on this stack frame
  }
  return Status::Ok();
}

Status LaunchL2Flush(const void* buf, size_t bytes, uint32_t* sink, cudaStream_t s) {
  const uint64_t n = bytes / sizeof(uint4);
  if (n == 0) return Status::Ok();
  L2FlushKernel<<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint4*>(buf), n, sink);
  KF_CUDA(cudaGetLastError());
  return Status::Ok();
}

Status LaunchCompare(const void* got, const void* expected, int dtype, uint64_t numel, double atol,
                     double rtol, DeviceCheck* result, cudaStream_t s) {
  if (numel == 0) return Status::Ok();
  const int blocks = Blocks(numel) < kCompareBlocks ? Blocks(numel) : kCompareBlocks;
  CompareKernel<<<blocks, kThreads, 0, s>>>(got, expected, dtype, numel, atol, rtol, result);
  KF_CUDA(cudaGetLastError());
  return Status::Ok();
}

Status LaunchBytesDiffer(const void* a, const void* b, size_t bytes, DeviceCheck* result,
                         cudaStream_t s) {
  if (bytes == 0) return Status::Ok();
  BytesKernel<<<Blocks(bytes / 8 + 1), kThreads, 0, s>>>(
      static_cast<const unsigned char*>(a), static_cast<const unsigned char*>(b), bytes, result);
  KF_CUDA(cudaGetLastError());
  return Status::Ok();
}

Status LaunchNull(cudaStream_t s) {
  NullKernel<<<1, 1, 0, s>>>();
  KF_CUDA(cudaGetLastError());
  return Status::Ok();
}

namespace {

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}

// Spins until *flag == v, at most ~1 s of the global timer; false on timeout.
__device__ bool AwaitFlag(volatile unsigned int* flag, unsigned int v) {
  const uint64_t give_up = GlobalTimerNs() + 1000000000ull;
  while (*flag != v) {
    if (GlobalTimerNs() > give_up) return false;
  }
  return true;
}

// Side 0 pings `theirs` and waits for the echo in `mine`; side 1 echoes.
// Side 0 records each round's time (ns) in `times`; *failed is set on a timeout.
__global__ void PingPongKernel(volatile unsigned int* ping, volatile unsigned int* pong, int rounds,
                               int side, unsigned long long* times, int* failed) {
  if (threadIdx.x != 0) return;
  const int me = gridDim.x == 2 ? static_cast<int>(blockIdx.x) : side;
  for (int i = 1; i <= rounds; ++i) {
    const unsigned int v = static_cast<unsigned int>(i);
    if (me == 0) {
      const uint64_t t0 = GlobalTimerNs();
      *ping = v;
      __threadfence_system();
      if (!AwaitFlag(pong, v)) {
        *failed = 1;
        return;
      }
      times[i - 1] = GlobalTimerNs() - t0;
    } else {
      if (!AwaitFlag(ping, v)) {
        *failed = 1;
        return;
      }
      *pong = v;
      __threadfence_system();
    }
  }
}

}  // namespace

Status MeasureFlagRoundTrip(int a, int b, int rounds, double* median_us) {
  if (rounds < 1) return Error(ErrorKind::kInvalidInput, "no rounds to measure");
  if (a != b) {
    int ab = 0, ba = 0;
    KF_CUDA(cudaDeviceCanAccessPeer(&ab, a, b));
    KF_CUDA(cudaDeviceCanAccessPeer(&ba, b, a));
    if (!ab || !ba)
      return Error(ErrorKind::kInvalidInput, "GPUs " + std::to_string(a) + " and " +
                                                 std::to_string(b) + " have no peer access");
    for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
      KF_CUDA(cudaSetDevice(from));
      const cudaError_t e = cudaDeviceEnablePeerAccess(to, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) KF_CUDA(e);
      (void)cudaGetLastError();  // clears "already enabled"
    }
  }
  // Each side waits on a flag in its own memory; the other stores into it.
  unsigned int *ping = nullptr, *pong = nullptr;
  unsigned long long* times = nullptr;
  int* failed = nullptr;
  KF_CUDA(cudaSetDevice(b));
  KF_CUDA(cudaMalloc(&ping, sizeof(unsigned int)));
  KF_CUDA(cudaMemset(ping, 0, sizeof(unsigned int)));
  KF_CUDA(cudaSetDevice(a));
  KF_CUDA(cudaMalloc(&pong, sizeof(unsigned int)));
  KF_CUDA(cudaMemset(pong, 0, sizeof(unsigned int)));
  KF_CUDA(cudaMallocManaged(&times, sizeof(unsigned long long) * static_cast<size_t>(rounds)));
  KF_CUDA(cudaMallocManaged(&failed, sizeof(int)));
  *failed = 0;
  // The first CUDA error, kept while the rest is still freed.
  cudaError_t first = cudaSuccess;
  const char* first_what = "";
  auto ok = [&first] { return first == cudaSuccess; };
  auto check = [&](cudaError_t e, const char* what) {
    if (ok() && e != cudaSuccess) {
      first = e;
      first_what = what;
    }
  };
  if (a == b) {
    PingPongKernel<<<2, 32>>>(ping, pong, rounds, 0, times, failed);
    check(cudaGetLastError(), "PingPongKernel");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  } else {
    cudaStream_t sa = nullptr, sb = nullptr;
    check(cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking), "cudaStreamCreate");
    KF_CUDA(cudaSetDevice(b));
    check(cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking), "cudaStreamCreate");
    if (ok()) {
      PingPongKernel<<<1, 32, 0, sb>>>(ping, pong, rounds, 1, times, failed);
      check(cudaGetLastError(), "PingPongKernel");
      check(cudaSetDevice(a), "cudaSetDevice");
      PingPongKernel<<<1, 32, 0, sa>>>(ping, pong, rounds, 0, times, failed);
      check(cudaGetLastError(), "PingPongKernel");
      check(cudaStreamSynchronize(sa), "cudaStreamSynchronize");
      check(cudaSetDevice(b), "cudaSetDevice");
      check(cudaStreamSynchronize(sb), "cudaStreamSynchronize");
    }
    if (sb) check(cudaStreamDestroy(sb), "cudaStreamDestroy");
    check(cudaSetDevice(a), "cudaSetDevice");
    if (sa) check(cudaStreamDestroy(sa), "cudaStreamDestroy");
  }
  const bool timed_out = ok() && *failed != 0;
  if (ok() && !timed_out) {
    std::vector<double> us;
    // The first rounds warm the path (TLBs, the peer mapping); they are left out.
    for (int i = rounds / 8; i < rounds; ++i) us.push_back(static_cast<double>(times[i]) / 1e3);
    std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(us.size() / 2), us.end());
    *median_us = us[us.size() / 2];
  }
  check(cudaFree(times), "cudaFree");
  check(cudaFree(failed), "cudaFree");
  check(cudaFree(pong), "cudaFree");
  check(cudaSetDevice(b), "cudaSetDevice");
  check(cudaFree(ping), "cudaFree");
  check(cudaSetDevice(a), "cudaSetDevice");
  if (!ok()) return CudaStatus(first, first_what);
  if (timed_out) return Error(ErrorKind::kInternal, "a flag round trip did not complete");
  return Status::Ok();
}

}  // namespace kforge::worker
