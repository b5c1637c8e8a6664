// Reduction kernel for the emulated collectives: reads every rank's staging
// buffer (same-GPU peer pointers) and combines them elementwise.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "collectives.h"
#include "cuda_check.h"

namespace kforge::worker {
namespace {

constexpr int kMaxIn = KF_MAX_RANKS;

struct Inputs {
  const void* p[kMaxIn];
  int n;
};

template <typename T>
struct Acc {
  using type = T;
};
template <>
struct Acc<__nv_bfloat16> {
  using type = float;
};
template <>
struct Acc<__half> {
  using type = float;
};

template <typename T>
__device__ typename Acc<T>::type ToAcc(T v) {
  return static_cast<typename Acc<T>::type>(v);
}
template <>
__device__ float ToAcc<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__device__ float ToAcc<__half>(__half v) {
  return __half2float(v);
}

template <typename T, typename A>
__device__ T FromAcc(A v) {
  return static_cast<T>(v);
}
template <>
__device__ __nv_bfloat16 FromAcc<__nv_bfloat16, float>(float v) {
  return __float2bfloat16(v);
}
template <>
__device__ __half FromAcc<__half, float>(float v) {
  return __float2half(v);
}

template <typename A>
__device__ A Combine(A a, A b, kf_redop op) {
  switch (op) {
    case KF_PROD:
      return a * b;
    case KF_MAX:
      return a > b ? a : b;
    case KF_MIN:
      return a < b ? a : b;
    default:
      return a + b;  // KF_SUM, KF_AVG (divided at the end)
  }
}

template <typename T>
__global__ void ReduceKernel(T* out, Inputs in, size_t count, kf_redop op) {
  using A = typename Acc<T>::type;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    A acc = ToAcc(static_cast<const T*>(in.p[0])[i]);
    for (int r = 1; r < in.n; ++r) acc = Combine(acc, ToAcc(static_cast<const T*>(in.p[r])[i]), op);
    if (op == KF_AVG) acc = acc / static_cast<A>(in.n);
    out[i] = FromAcc<T, A>(acc);
  }
}

template <typename T>
Status Launch(void* out, const Inputs& in, size_t count, kf_redop op, cudaStream_t s) {
  if (count == 0) return Status::Ok();
  size_t blocks = (count + 255) / 256;
  if (blocks > 1024) blocks = 1024;
  ReduceKernel<T>
      <<<static_cast<unsigned>(blocks), 256, 0, s>>>(static_cast<T*>(out), in, count, op);
  return CudaStatus(cudaGetLastError(), "emulated reduce kernel launch");
}

}  // namespace

Status LaunchReduce(void* out, const std::vector<const void*>& in, size_t count, kf_dtype dt,
                    kf_redop op, cudaStream_t s) {
  Inputs ins{};
  ins.n = static_cast<int>(in.size());
  for (size_t i = 0; i < in.size() && i < kMaxIn; ++i) ins.p[i] = in[i];
  switch (dt) {
    case KF_F64:
      return Launch<double>(out, ins, count, op, s);
    case KF_F32:
      return Launch<float>(out, ins, count, op, s);
    case KF_F16:
      return Launch<__half>(out, ins, count, op, s);
    case KF_BF16:
      return Launch<__nv_bfloat16>(out, ins, count, op, s);
    case KF_I64:
      return Launch<int64_t>(out, ins, count, op, s);
    case KF_I32:
      return Launch<int32_t>(out, ins, count, op, s);
    case KF_I8:
      return Launch<int8_t>(out, ins, count, op, s);
    case KF_U8:
    case KF_BOOL:
      return Launch<uint8_t>(out, ins, count, op, s);
    default:
      return Error(ErrorKind::kInvalidInput, "reductions on fp8 are not supported by the harness");
  }
}

}  // namespace kforge::worker
