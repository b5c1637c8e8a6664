// Hybrid-CP sample reroute as one kernel, planned on the device: every block scans the
// replicated lengths and schedule (two block-wide exclusive sums over the W * NS sequences) to
// find where each sequence starts in its loading rank's packed tensors and where each sequence
// this rank receives lands in its outputs, then the grid copies the received tokens of all four
// keys straight from the loading ranks' inputs. No host round trip for the counts, no staging
// copy, one launch instead of four all-to-alls; a peer's inputs stay unchanged until every
// rank's call has returned, so no flag is needed either.
#include <cub/block/block_scan.cuh>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 512;
constexpr int kItems = 2;
constexpr int kMaxSeqs = kThreads * kItems;

struct Args {
  const int64_t* len;   // this rank's copy of seqlens (replicated)
  const int64_t* mask;  // and of dest_mask
  const int64_t* tokens[KF_MAX_RANKS];
  const int64_t* labels[KF_MAX_RANKS];
  const int32_t* loss_mask[KF_MAX_RANKS];  // f32 bits
  const int64_t* position_ids[KF_MAX_RANKS];
  int64_t* tokens_out;
  int64_t* labels_out;
  int32_t* loss_mask_out;
  int64_t* position_ids_out;
  int64_t* num_tokens;
  int n, ns, rank;
};

__global__ void __launch_bounds__(kThreads) RerouteKernel(Args a) {
  using Scan = cub::BlockScan<int64_t, kThreads>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int64_t src_off[kMaxSeqs];
  __shared__ int64_t out_off[kMaxSeqs];
  __shared__ int64_t total;

  // Blocked arrangement: thread t holds sequences t * kItems .. t * kItems + kItems - 1.
  int64_t lens[kItems], sel[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int g = threadIdx.x * kItems + j;
    lens[j] = g < a.n ? a.len[g] : 0;
    sel[j] = g < a.n && ((a.mask[g] >> a.rank) & 1) != 0 ? lens[j] : 0;
  }
  int64_t excl[kItems];
  Scan(scan).ExclusiveSum(lens, excl);
#pragma unroll
  for (int j = 0; j < kItems; ++j) src_off[threadIdx.x * kItems + j] = excl[j];
  __syncthreads();
  int64_t seq_start[kItems];
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int g = threadIdx.x * kItems + j;
    seq_start[j] = g < a.n ? src_off[(g / a.ns) * a.ns] : 0;  // the loading rank's first sequence
  }
  int64_t sum = 0;
  Scan(scan).ExclusiveSum(sel, excl, sum);
  __syncthreads();  // every thread has read src_off above
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    const int g = threadIdx.x * kItems + j;
    src_off[g] -= seq_start[j];  // offset inside the loading rank's packed tensors
    out_off[g] = excl[j];
  }
  if (threadIdx.x == 0) {
    total = sum;
    if (blockIdx.x == 0) *a.num_tokens = sum;
  }
  __syncthreads();

  // Output token idx belongs to the last sequence whose out_off is <= idx (a sequence that is
  // not received has the same out_off as the next one, so it is never the last such).
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < total;
       idx += stride) {
    int lo = 0, hi = a.n;  // first g with out_off[g] > idx
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (out_off[mid] <= idx) lo = mid + 1; else hi = mid;
    }
    const int g = lo - 1;
    const int p = g / a.ns;
    const int64_t s = src_off[g] + (idx - out_off[g]);
    a.tokens_out[idx] = a.tokens[p][s];
    a.labels_out[idx] = a.labels[p][s];
    a.loss_mask_out[idx] = a.loss_mask[p][s];
    a.position_ids_out[idx] = a.position_ids[p][s];
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const double ns = kf_param(ctx, "NS", 0);
  if (ns < 1 || ctx->world_size > KF_MAX_RANKS) return 1;
  if (ctx->world_size * static_cast<int64_t>(ns) > kMaxSeqs) return 1;
  const char* names[] = {"seqlens", "dest_mask", "tokens", "labels", "loss_mask", "position_ids"};
  for (const char* name : names)
    if (kf_input(ctx, name) == nullptr) return 1;
  const char* outs[] = {"tokens_out", "labels_out", "loss_mask_out", "position_ids_out", "num_tokens"};
  for (const char* name : outs)
    if (kf_output(ctx, name) == nullptr) return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  const int world = ctx->world_size;
  Args a = {};
  a.ns = static_cast<int>(kf_param(ctx, "NS", 0));
  a.n = world * a.ns;
  a.rank = ctx->rank;
  a.len = static_cast<const int64_t*>(kf_input(ctx, "seqlens")->data);
  a.mask = static_cast<const int64_t*>(kf_input(ctx, "dest_mask")->data);
  const kf_tensor* tok = kf_input(ctx, "tokens");
  const kf_tensor* lab = kf_input(ctx, "labels");
  const kf_tensor* lm = kf_input(ctx, "loss_mask");
  const kf_tensor* pos = kf_input(ctx, "position_ids");
  for (int p = 0; p < world; ++p) {
    a.tokens[p] = static_cast<const int64_t*>(tok->peers[p]);
    a.labels[p] = static_cast<const int64_t*>(lab->peers[p]);
    a.loss_mask[p] = static_cast<const int32_t*>(lm->peers[p]);
    a.position_ids[p] = static_cast<const int64_t*>(pos->peers[p]);
  }
  a.tokens_out = static_cast<int64_t*>(kf_output(ctx, "tokens_out")->data);
  a.labels_out = static_cast<int64_t*>(kf_output(ctx, "labels_out")->data);
  a.loss_mask_out = static_cast<int32_t*>(kf_output(ctx, "loss_mask_out")->data);
  a.position_ids_out = static_cast<int64_t*>(kf_output(ctx, "position_ids_out")->data);
  a.num_tokens = static_cast<int64_t*>(kf_output(ctx, "num_tokens")->data);
  // Enough blocks to keep every SM busy with remote loads; the plan is recomputed per block
  // (two block scans over at most 1024 sequences), which costs less than a second launch.
  const int sms = ctx->gpu.sm_count > 0 ? ctx->gpu.sm_count : 1;
  const int blocks = ctx->emulated ? (sms / world > 0 ? sms / world : 1) : 2 * sms;
  RerouteKernel<<<blocks, kThreads, 0, ctx->stream>>>(a);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx*) { return 0; }
