// RL weight refit baseline, as NeMo-RL's packed broadcast does it
// (nemo_rl/utils/packed_tensor.py): the tensors, in the trainer's order, are grouped into
// buckets that close once they exceed BUCKET elements; each bucket is one NCCL broadcast
// from the root into a staging buffer, which every rank then unpacks into its weights (the
// engine's layout). The table is on the host, as NeMo-RL's metadata is.
#include <cuda_runtime.h>
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

// blockIdx.y: tensor first + y of the table; its n elements go from staging (at src - base)
// to weights + dst. 16-byte moves when both ends are aligned.
__global__ void Unpack(const uint16_t* staging, int64_t base, const int64_t* table, int first,
                       uint16_t* weights) {
  const int64_t* row = table + 3 * (first + blockIdx.y);
  const int64_t src = row[0] - base, dst = row[1], n = row[2];
  const uint16_t* from = staging + src;
  uint16_t* to = weights + dst;
  const int64_t start = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if (src % 8 == 0 && dst % 8 == 0) {
    for (int64_t i = start; i < n / 8; i += step)
      reinterpret_cast<uint4*>(to)[i] = reinterpret_cast<const uint4*>(from)[i];
    for (int64_t i = n / 8 * 8 + start; i < n; i += step) to[i] = from[i];
  } else {
    for (int64_t i = start; i < n; i += step) to[i] = from[i];
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx*) { return 0; }

extern "C" int kf_run(kf_ctx* ctx) {
  const kf_tensor& params = *kf_input(ctx, "params");
  const kf_tensor& tensors = *kf_input(ctx, "tensors");
  kf_tensor& weights = *kf_output(ctx, "weights");
  const int root = static_cast<int>(kf_param(ctx, "root", 0));
  const int64_t bucket = static_cast<int64_t>(kf_param(ctx, "BUCKET", 0));
  const int nt = static_cast<int>(tensors.shape[0]);
  if (bucket <= 0) return 1;
  std::vector<int64_t> table(static_cast<size_t>(3 * nt));
  if (cudaMemcpyAsync(table.data(), tensors.data, table.size() * sizeof(int64_t),
                      cudaMemcpyDeviceToHost, ctx->stream) != cudaSuccess)
    return 2;
  if (cudaStreamSynchronize(ctx->stream) != cudaSuccess) return 3;
  uint16_t* staging = static_cast<uint16_t*>(ctx->workspace.data);
  const int64_t capacity = static_cast<int64_t>(ctx->workspace.nbytes / 2);
  for (int first = 0; first < nt;) {
    // Tensors first .. last-1 form a bucket: rows are back to back in the trainer's buffer.
    int last = first;
    int64_t bytes = 0;
    int64_t largest = 0;
    while (last < nt && bytes <= bucket) {
      bytes += table[3 * last + 2];
      largest = table[3 * last + 2] > largest ? table[3 * last + 2] : largest;
      ++last;
    }
    const int64_t base = table[3 * first];
    if (bytes > capacity) return 4;
    if (bytes > 0) {
      if (kf_broadcast(ctx, static_cast<const uint16_t*>(params.data) + base, staging,
                       static_cast<size_t>(bytes), KF_BF16, root) != 0)
        return 5;
      const int64_t want = (largest / 8 + 255) / 256;
      const unsigned gx = static_cast<unsigned>(want < 1 ? 1 : (want > 64 ? 64 : want));
      Unpack<<<dim3(gx, static_cast<unsigned>(last - first)), 256, 0, ctx->stream>>>(
          staging, base, static_cast<const int64_t*>(tensors.data), first,
          static_cast<uint16_t*>(weights.data));
      if (cudaGetLastError() != cudaSuccess) return 6;
    }
    first = last;
  }
  return 0;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
