// SAM 3 all-gather + IoU suppression baseline, as PKB's reference runs it:
//   1. the local masks and scores converted to fp32 (PKB's .float() before the gather),
//   2. the variable-count all-gather as one kf_broadcast per rank (how PyTorch's NCCL backend
//      all-gathers a list of tensors of different sizes), straight into masks_out / scores_out,
//   3. the binary masks (logit > 0) as fp32 [C, mh*mw] and their areas (row sums),
//   4. the intersections as one cuBLAS SGEMM, binary @ binary^T (exact: 0/1 products, sums <=
//   2^24),
//   5. IoU = inter / max(union, 1) in fp32 against 0.7f and the occlusion rule -> suppressed,
//   6. every pixel of a suppressed object's mask set to -10.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr size_t kCublasWorkspace = 32u << 20;
constexpr float kNoObjLogit = -10.0f;
constexpr float kIouThreshold = 0.7f;

struct State {
  cublasHandle_t handle = nullptr;
  void* cublas_ws = nullptr;
};

template <typename T>
__global__ void ToF32(const T* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = static_cast<float>(x[i]);
}

__global__ void Binarize(const float* masks, float* bin, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    bin[i] = masks[i] > 0.0f ? 1.0f : 0.0f;
}

// One block per object: area[a] = sum of its binary mask.
__global__ void Areas(const float* bin, float* area, int64_t hw) {
  __shared__ float part[256];
  float s = 0;
  for (int64_t i = threadIdx.x; i < hw; i += blockDim.x) s += bin[blockIdx.x * hw + i];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) area[blockIdx.x] = part[0];
}

// PKB's _suppression_mask with reverse = False, one thread per object a: suppressed if some
// b != a overlaps it (IoU >= 0.7) with last[a] > last[b] > -1.
__global__ void Suppress(const float* inter, const float* area, const int64_t* last, int c,
                         uint8_t* suppressed) {
  const int a = blockIdx.x * blockDim.x + threadIdx.x;
  if (a >= c) return;
  bool s = false;
  for (int b = 0; b < c; ++b) {
    if (b == a || !(last[a] > last[b] && last[b] > -1)) continue;
    const float i = inter[static_cast<int64_t>(a) * c + b];
    const float iou = i / fmaxf(area[a] + area[b] - i, 1.0f);
    if (iou >= kIouThreshold) s = true;
  }
  suppressed[a] = s ? 1 : 0;
}

// masks[a, :] = -10 for every suppressed object a.
__global__ void Blank(float* masks, const uint8_t* suppressed, int64_t hw) {
  if (!suppressed[blockIdx.y]) return;
  float* row = masks + blockIdx.y * hw;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < hw;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    row[i] = kNoObjLogit;
}

size_t Align(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  if (cublasCreate(&st->handle) != CUBLAS_STATUS_SUCCESS) return 1;
  if (cudaMalloc(&st->cublas_ws, kCublasWorkspace) != cudaSuccess) return 1;
  if (cublasSetWorkspace(st->handle, st->cublas_ws, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* masks = kf_input(ctx, "masks");
  const kf_tensor* scores = kf_input(ctx, "scores");
  const kf_tensor* last = kf_input(ctx, "last_occluded");
  kf_tensor* masks_out = kf_output(ctx, "masks_out");
  kf_tensor* scores_out = kf_output(ctx, "scores_out");
  kf_tensor* suppressed = kf_output(ctx, "suppressed");
  if (st == nullptr || masks == nullptr || scores == nullptr || last == nullptr ||
      masks_out == nullptr || scores_out == nullptr || suppressed == nullptr)
    return 1;
  if (masks->dtype != KF_BF16 && masks->dtype != KF_F32) return 2;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t mine = masks->shape[0], hw = masks->shape[1] * masks->shape[2];
  const int64_t m = mine - rank % 3;  // rank p has m + p % 3 objects
  const int c = static_cast<int>(masks_out->shape[0]);

  char* ws = static_cast<char*>(ctx->workspace.data);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = ws + off;
    off += Align(bytes);
    return p;
  };
  float* local = reinterpret_cast<float*>(take(mine * hw * 4));
  float* local_scores = reinterpret_cast<float*>(take(mine * 4));
  float* bin = reinterpret_cast<float*>(take(c * hw * 4));
  float* area = reinterpret_cast<float*>(take(c * 4));
  float* inter = reinterpret_cast<float*>(take(static_cast<size_t>(c) * c * 4));
  if (off > ctx->workspace.nbytes) return 3;

  // 1. fp32 copies of the local masks and scores.
  const int64_t n = mine * hw;
  const int blocks = static_cast<int>(n / 256 + 1 < 4096 ? n / 256 + 1 : 4096);
  if (masks->dtype == KF_BF16) {
    ToF32<<<blocks, 256, 0, ctx->stream>>>(static_cast<const __nv_bfloat16*>(masks->data), local,
                                           n);
    ToF32<<<1, 256, 0, ctx->stream>>>(static_cast<const __nv_bfloat16*>(scores->data), local_scores,
                                      mine);
  } else {
    ToF32<<<blocks, 256, 0, ctx->stream>>>(static_cast<const float*>(masks->data), local, n);
    ToF32<<<1, 256, 0, ctx->stream>>>(static_cast<const float*>(scores->data), local_scores, mine);
  }
  // 2. The all-gather of different counts: one broadcast per rank.
  float* g_masks = static_cast<float*>(masks_out->data);
  float* g_scores = static_cast<float*>(scores_out->data);
  int64_t at = 0;
  for (int p = 0; p < world; ++p) {
    const int64_t cp = m + p % 3;
    if (kf_broadcast(ctx, local, g_masks + at * hw, static_cast<size_t>(cp * hw), KF_F32, p) != 0)
      return 1;
    if (kf_broadcast(ctx, local_scores, g_scores + at, static_cast<size_t>(cp), KF_F32, p) != 0)
      return 1;
    at += cp;
  }
  if (at != c) return 2;
  // 3. Binary masks and areas.
  const int64_t cn = static_cast<int64_t>(c) * hw;
  Binarize<<<static_cast<int>(cn / 256 + 1 < 8192 ? cn / 256 + 1 : 8192), 256, 0, ctx->stream>>>(
      g_masks, bin, cn);
  Areas<<<c, 256, 0, ctx->stream>>>(bin, area, hw);
  // 4. inter[C, C] = bin[C, hw] @ bin^T: column-major bin is [hw, C], so inter = bin^T bin.
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS) return 1;
  const float alpha = 1.0f, beta = 0.0f;
  if (cublasSgemm(st->handle, CUBLAS_OP_T, CUBLAS_OP_N, c, c, static_cast<int>(hw), &alpha, bin,
                  static_cast<int>(hw), bin, static_cast<int>(hw), &beta, inter,
                  c) != CUBLAS_STATUS_SUCCESS)
    return 1;
  // 5. Suppression, 6. blanking.
  uint8_t* sup = static_cast<uint8_t*>(suppressed->data);
  Suppress<<<(c + 127) / 128, 128, 0, ctx->stream>>>(
      inter, area, static_cast<const int64_t*>(last->data), c, sup);
  const int row_blocks = static_cast<int>(hw / 256 + 1 < 64 ? hw / 256 + 1 : 64);
  Blank<<<dim3(row_blocks, c), 256, 0, ctx->stream>>>(g_masks, sup, hw);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = 0;
  if (st->handle != nullptr && cublasDestroy(st->handle) != CUBLAS_STATUS_SUCCESS) rc = 1;
  if (st->cublas_ws != nullptr && cudaFree(st->cublas_ws) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
