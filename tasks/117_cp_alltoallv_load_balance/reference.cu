// Hybrid-CP sample reroute baseline, as Megatron-LM's reroute_samples_to_hdp_ranks does it: the
// schedule on the host (here copied from the replicated inputs), the send plan (destination-major,
// ascending sample id) packed into staging buffers (torch.cat), then one variable-count
// all-to-all per key (all_to_all_single with token-count splits: kf_all_to_allv, NCCL grouped
// send/recv on real GPUs). The receive order (source-major, ascending id) is the output order.
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kKeys = 4;
const char* const kIn[kKeys] = {"tokens", "labels", "loss_mask", "position_ids"};
const char* const kOut[kKeys] = {"tokens_out", "labels_out", "loss_mask_out", "position_ids_out"};

struct Segment {
  int64_t src, dst, len;  // in tokens
};

struct State {
  int64_t* host_sched = nullptr;  // pinned: seqlens then dest_mask
  Segment* host_segs = nullptr;   // pinned: the pack plan
  int64_t* host_count = nullptr;  // pinned: num_tokens
  int64_t n = 0, ns = 0;
};

struct PackArgs {
  const char* src[kKeys];
  char* dst[kKeys];
  int elem[kKeys];
};

// Block s copies segment s of every key into the staging buffers.
__global__ void Pack(PackArgs a, const Segment* segs) {
  const Segment s = segs[blockIdx.x];
  for (int k = 0; k < kKeys; ++k) {
    const int e = a.elem[k];
    const char* src = a.src[k] + s.src * e;
    char* dst = a.dst[k] + s.dst * e;
    if (e == 8) {
      for (int64_t i = threadIdx.x; i < s.len; i += blockDim.x)
        reinterpret_cast<int64_t*>(dst)[i] = reinterpret_cast<const int64_t*>(src)[i];
    } else {
      for (int64_t i = threadIdx.x; i < s.len; i += blockDim.x)
        reinterpret_cast<int32_t*>(dst)[i] = reinterpret_cast<const int32_t*>(src)[i];
    }
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const double ns = kf_param(ctx, "NS", 0);
  if (ns < 1) return 1;
  State* st = new State;
  st->ns = static_cast<int64_t>(ns);
  st->n = ctx->world_size * st->ns;
  if (cudaMallocHost(&st->host_sched, sizeof(int64_t) * 2 * st->n) != cudaSuccess ||
      cudaMallocHost(&st->host_segs, sizeof(Segment) * ctx->world_size * st->n) != cudaSuccess ||
      cudaMallocHost(&st->host_count, sizeof(int64_t)) != cudaSuccess) {
    cudaFreeHost(st->host_sched);
    cudaFreeHost(st->host_segs);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t n = st->n, ns = st->ns;
  const kf_tensor* lens_t = kf_input(ctx, "seqlens");
  const kf_tensor* mask_t = kf_input(ctx, "dest_mask");
  if (lens_t == nullptr || mask_t == nullptr || lens_t->numel != n) return 1;

  // The schedule to the host (Megatron has it there already: it ran the scheduler).
  if (cudaMemcpyAsync(st->host_sched, lens_t->data, sizeof(int64_t) * n, cudaMemcpyDeviceToHost,
                      ctx->stream) != cudaSuccess ||
      cudaMemcpyAsync(st->host_sched + n, mask_t->data, sizeof(int64_t) * n, cudaMemcpyDeviceToHost,
                      ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess)
    return 1;
  const int64_t* len = st->host_sched;
  const int64_t* mask = st->host_sched + n;

  // Send plan: for each destination d, this rank's sequences with bit d, ascending.
  std::vector<int64_t> off(static_cast<size_t>(ns));
  for (int64_t i = 0, at = 0; i < ns; ++i)
    off[static_cast<size_t>(i)] = at, at += len[rank * ns + i];
  std::vector<size_t> send_counts(world), send_displs(world), recv_counts(world),
      recv_displs(world);
  int segs = 0;
  int64_t staged = 0;
  for (int d = 0; d < world; ++d) {
    send_displs[d] = static_cast<size_t>(staged);
    for (int64_t i = 0; i < ns; ++i) {
      const int64_t g = rank * ns + i;
      if (((mask[g] >> d) & 1) == 0) continue;
      st->host_segs[segs++] = Segment{off[static_cast<size_t>(i)], staged, len[g]};
      staged += len[g];
    }
    send_counts[d] = static_cast<size_t>(staged) - send_displs[d];
  }
  // Receive plan: from each source p, its sequences with bit `rank`, ascending.
  int64_t received = 0;
  for (int p = 0; p < world; ++p) {
    recv_displs[p] = static_cast<size_t>(received);
    for (int64_t i = 0; i < ns; ++i) {
      const int64_t g = p * ns + i;
      if (((mask[g] >> rank) & 1) != 0) received += len[g];
    }
    recv_counts[p] = static_cast<size_t>(received) - recv_displs[p];
  }

  // Staging: four key buffers, then the segment table.
  char* ws = static_cast<char*>(ctx->workspace.data);
  const int64_t cap =
      static_cast<int64_t>(world) * ns * static_cast<int64_t>(kf_param(ctx, "L", 0));
  PackArgs a;
  size_t at = 0;
  for (int k = 0; k < kKeys; ++k) {
    const kf_tensor* in = kf_input(ctx, kIn[k]);
    if (in == nullptr || kf_output(ctx, kOut[k]) == nullptr) return 1;
    a.src[k] = static_cast<const char*>(in->data);
    a.elem[k] = static_cast<int>(kf_dtype_size(in->dtype));
    a.dst[k] = ws + at;
    at += (static_cast<size_t>(cap) * a.elem[k] + 255) / 256 * 256;
  }
  Segment* dev_segs = reinterpret_cast<Segment*>(ws + at);
  at += sizeof(Segment) * static_cast<size_t>(world) * ns;
  if (at > ctx->workspace.nbytes) return 1;
  if (segs > 0) {
    if (cudaMemcpyAsync(dev_segs, st->host_segs, sizeof(Segment) * segs, cudaMemcpyHostToDevice,
                        ctx->stream) != cudaSuccess)
      return 1;
    Pack<<<segs, 256, 0, ctx->stream>>>(a, dev_segs);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  for (int k = 0; k < kKeys; ++k) {
    kf_tensor* out = kf_output(ctx, kOut[k]);
    const int rc = kf_all_to_allv(ctx, a.dst[k], send_counts.data(), send_displs.data(), out->data,
                                  recv_counts.data(), recv_displs.data(), out->dtype);
    if (rc != 0) return rc;
  }
  // The count, through pinned memory; the stream must be done with the previous call's copy
  // before it is overwritten, which the synchronisation above ensures.
  *st->host_count = received;
  return cudaMemcpyAsync(kf_output(ctx, "num_tokens")->data, st->host_count, sizeof(int64_t),
                         cudaMemcpyHostToDevice, ctx->stream) == cudaSuccess
             ? 0
             : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  cudaFreeHost(st->host_sched);
  cudaFreeHost(st->host_segs);
  cudaFreeHost(st->host_count);
  delete st;
  ctx->user = nullptr;
  return rc;
}
