// Two pipeline stages of ring attention, overlapped: micro-batches along the sequence.
//
// Causal attention lets a query row block be finished before the later rows exist, so each rank
// runs its layer in row chunks (query tiles t0 .. t0+nt-1 against every visible k/v block, then
// the chunk's output projection), and a stage-0 rank flags each chunk of its output to its
// stage-1 partner as soon as it is written. A stage-1 rank projects q, k, v of a chunk as soon as
// it has been flagged (read from the partner's out through the peer mapping, on the copy engine)
// and attends to it while stage 0 is still computing the later chunks, so the second stage
// trails the first by about one chunk instead of one whole layer. As in task 055's solution, the
// earlier CP positions' k/v are pulled from their owners' workspaces on the copy engines (no
// lockstep ring), and the online softmax's fp32 state is carried from block to block.
//
//   gemm:  [stage 1: wait chunk i, copy it in] QKV of chunk i | ... | signal "k/v ready"
//   pull:  per earlier CP position p = 0 .. c-1: wait for its signal, pull its k/v
//   main:  (chunk, block) items in the order their inputs are expected; after a chunk's last
//          one its Wo GEMM and [stage 0] the flag to stage 1
//
// Ordering: everything a peer reads (k/v, a chunk of out) is written once per call before the
// kf_signal that publishes it (epoch + 1 per call) and read only after kf_wait sees it; the
// harness starts a call only when every rank's previous call has finished.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <mma.h>
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kRows = 64;  // queries per block: 4 warps x 16
constexpr int kKeys = 64;  // keys per tile
constexpr int kThreads = 128;
constexpr int kMaxD = 128;
constexpr int kLdS = kKeys + 4;  // fp32 scores
constexpr int kLdP = kKeys + 8;  // bf16 probabilities
constexpr size_t kCublasWorkspace = 32u << 20;
constexpr int kMaxCp = 8;
constexpr int kChunks = 8;         // row chunks (micro-batches)
constexpr int kHandSlot = kMaxCp;  // pad slots: [0, kMaxCp) k/v ready, then one per chunk

constexpr int kDiagonal = 1;  // the queries' own block: causal, and the state starts here
constexpr int kLast = 2;      // the last visible block: normalise and write ctx

struct Dims {
  int64_t b, s, h, d;  // h: heads of this TP rank
  int dp;              // d rounded up to 16
};

__host__ __device__ inline size_t Align256(size_t x) { return (x + 255) / 256 * 256; }

// bf16 q, k, v tiles (row stride dp + 8), fp32 scores, bf16 probabilities, fp32 out (dp + 4).
struct Smem {
  size_t k, v, s, p, o, total;
  __host__ __device__ explicit Smem(int dp) {
    const size_t tile = Align256(static_cast<size_t>(kRows) * (dp + 8) * sizeof(bf16));
    k = tile;
    v = k + tile;
    s = v + tile;
    p = s + Align256(static_cast<size_t>(kRows) * kLdS * sizeof(float));
    o = p + Align256(static_cast<size_t>(kRows) * kLdP * sizeof(bf16));
    total = o + static_cast<size_t>(kRows) * (dp + 4) * sizeof(float);
  }
};

// Rows row0 .. row0+63 of head hh of batch b of a [B, S, H, D] tensor, zero past S and past D.
// D is a multiple of 8, so rows are 16-byte vectors.
__device__ void LoadTile(bf16* dst, const bf16* src, const Dims& dm, int64_t b, int64_t hh,
                         int64_t row0) {
  const int vecs = dm.dp / 8, ld = dm.dp + 8;
  for (int i = threadIdx.x; i < kRows * vecs; i += blockDim.x) {
    const int r = i / vecs, c = (i % vecs) * 8;
    const int64_t row = row0 + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (row < dm.s && c < dm.d)
      val = *reinterpret_cast<const uint4*>(src + ((b * dm.s + row) * dm.h + hh) * dm.d + c);
    *reinterpret_cast<uint4*>(dst + r * ld + c) = val;
  }
}

// 64 queries of (batch, head) against one k/v block; blocks cover query tiles tile0 ..
// tile0 + gridDim.x - 1. State: o [B, S, H, D] (unnormalised) and m,
// l [B, H, S]; read unless kDiagonal, written unless kLast, which writes ctx = o / l in bf16.
__global__ void __launch_bounds__(kThreads)
    FlashStep(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
              float* __restrict__ o, float* __restrict__ m, float* __restrict__ l,
              bf16* __restrict__ ctx, Dims dm, float scale, int flags, int tile0) {
  extern __shared__ __align__(256) unsigned char smem[];
  const Smem lay(dm.dp);
  const int dp = dm.dp, ldh = dp + 8, ldo = dp + 4;
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = reinterpret_cast<bf16*>(smem + lay.k);
  bf16* vs = reinterpret_cast<bf16*>(smem + lay.v);
  float* ss = reinterpret_cast<float*>(smem + lay.s);
  bf16* ps = reinterpret_cast<bf16*>(smem + lay.p);
  float* os = reinterpret_cast<float*>(smem + lay.o);

  const int64_t q0 = (tile0 + gridDim.x - 1 - blockIdx.x) * kRows;  // longest (causal) first
  const int64_t hh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wrow = warp * 16 + lane / 2, half = lane % 2;  // this lane pair's query row
  const int64_t qi = q0 + wrow;
  const bool diag = (flags & kDiagonal) != 0, valid = qi < dm.s;
  const int64_t srow = (b * dm.h + hh) * dm.s + qi;  // index into m, l
  const int64_t orow0 = ((b * dm.s + qi) * dm.h + hh) * dm.d;
  float* orow = os + wrow * ldo;
  const int c0 = half * (dp / 2), c1 = c0 + dp / 2;  // this lane's half of the row

  LoadTile(qs, q, dm, b, hh, q0);
  float mi = -INFINITY, li = 0.0f;
  for (int c = c0; c < c1; ++c) orow[c] = (!diag && valid && c < dm.d) ? o[orow0 + c] : 0.0f;
  if (!diag && valid) {
    mi = m[srow];
    li = l[srow];
  }

  const int64_t last_key = diag ? min(dm.s - 1, q0 + kRows - 1) : dm.s - 1;
  for (int64_t k0 = 0; k0 <= last_key; k0 += kKeys) {
    __syncthreads();  // the previous tile's k, v and p are no longer read
    LoadTile(ks, k, dm, b, hh, k0);
    LoadTile(vs, v, dm, b, hh, k0);
    __syncthreads();
    for (int n = 0; n < kKeys / 16; ++n) {  // the warp's 16 queries x 64 keys
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.0f);
      for (int kk = 0; kk < dp; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> fb;
        wmma::load_matrix_sync(fa, qs + warp * 16 * ldh + kk, ldh);
        wmma::load_matrix_sync(fb, ks + n * 16 * ldh + kk, ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(ss + warp * 16 * kLdS + n * 16, acc, kLdS, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax, two lanes per row (32 keys each); probabilities rounded to bf16.
    float* sr = ss + wrow * kLdS;
    bf16* pr = ps + wrow * kLdP;
    float tmax = -INFINITY;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const int64_t key = k0 + j;
      const float x = (key < dm.s && (!diag || key <= qi)) ? sr[j] * scale : -INFINITY;
      sr[j] = x;
      tmax = fmaxf(tmax, x);
    }
    tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
    const float mnew = fmaxf(mi, tmax);
    const float alpha = mnew == -INFINITY ? 1.0f : __expf(mi - mnew);
    float sum = 0.0f;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const bf16 p = __float2bfloat16(mnew == -INFINITY ? 0.0f : __expf(sr[j] - mnew));
      pr[j] = p;
      sum += __bfloat162float(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    li = li * alpha + sum;
    mi = mnew;
    for (int c = c0; c < c1; ++c) orow[c] *= alpha;
    __syncwarp();

    for (int n = 0; n < dp; n += 16) {  // o += p v for the warp's 16 rows
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, os + warp * 16 * ldo + n, ldo, wmma::mem_row_major);
      for (int kk = 0; kk < kKeys; kk += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> fb;
        wmma::load_matrix_sync(fa, ps + warp * 16 * kLdP + kk, kLdP);
        wmma::load_matrix_sync(fb, vs + kk * ldh + n, ldh);
        wmma::mma_sync(acc, fa, fb, acc);
      }
      wmma::store_matrix_sync(os + warp * 16 * ldo + n, acc, ldo, wmma::mem_row_major);
    }
    __syncwarp();
  }
  if (!valid) return;
  if (flags & kLast) {
    const float inv = li > 0.0f ? 1.0f / li : 0.0f;
    for (int c = half; c < dm.d; c += 2) ctx[orow0 + c] = __float2bfloat16(orow[c] * inv);
  } else {
    for (int c = half; c < dm.d; c += 2) o[orow0 + c] = orow[c];
    if (half == 0) {
      m[srow] = mi;
      l[srow] = li;
    }
  }
}

// Row-major c[batch][m, n] = a[batch][m, k] @ b[n, k]^T (b: PyTorch's [out, in] weight), bf16 in
// and out, fp32 accumulation: column-major c^T = b a^T. Strides in elements; b_stride 0 shares b.
cublasStatus_t GemmNT(cublasHandle_t handle, int64_t m, int64_t n, int64_t k, const bf16* a,
                      int64_t a_stride, const bf16* b, int64_t b_stride, bf16* c, int64_t c_stride,
                      int batch) {
  const float one = 1.0f, zero = 0.0f;
  return cublasGemmStridedBatchedEx(
      handle, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m),
      static_cast<int>(k), &one, b, CUDA_R_16BF, static_cast<int>(k), b_stride, a, CUDA_R_16BF,
      static_cast<int>(k), a_stride, &zero, c, CUDA_R_16BF, static_cast<int>(n), c_stride, batch,
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// Thread i < n stores `epoch` into slot[i] (pads of the peers told), after this stream's earlier
// kernels: their stores are visible to whoever observes the flag.
struct Slots {
  uint32_t* p[kMaxCp];
};
__global__ void Signal(Slots slots, int n, uint32_t epoch) {
  __threadfence_system();
  if (static_cast<int>(threadIdx.x) < n) kf_signal(slots.p[threadIdx.x], epoch);
}

// Waits until slot[i] >= epoch for every i < n.
__global__ void Wait(Slots slots, int n, uint32_t epoch) {
  if (static_cast<int>(threadIdx.x) < n) kf_wait(slots.p[threadIdx.x], epoch);
}

struct State {
  cublasHandle_t handle = nullptr, gemm_handle = nullptr;
  void* cublas_ws[2] = {};
  cudaStream_t gemm = nullptr, pull = nullptr;
  cudaEvent_t fork = nullptr, gemm_done = nullptr;
  cudaEvent_t pulled[kMaxCp] = {};
  cudaEvent_t ready[kChunks] = {};
  uint32_t epoch = 0;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  const kf_tensor* w = kf_input(ctx, "wqkv");
  if (w == nullptr || w->ndim != 3 || w->shape[1] < 8 || w->shape[1] > kMaxD ||
      w->shape[1] % 8 != 0 || ctx->world_size > 2 * kMaxCp ||
      ctx->signal_pad.nbytes < (kHandSlot + kChunks) * sizeof(uint32_t))
    return 1;
  const Smem lay(static_cast<int>((w->shape[1] + 15) / 16 * 16));
  if (lay.total > ctx->gpu.smem_per_block_optin) return 1;
  if (cudaFuncSetAttribute(FlashStep, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(lay.total)) != cudaSuccess)
    return 1;
  // Two handles with their own workspaces: the gemm stream's GEMMs run beside main's.
  cublasHandle_t* handles[] = {&st->handle, &st->gemm_handle};
  for (int i = 0; i < 2; ++i) {
    if (cublasCreate(handles[i]) != CUBLAS_STATUS_SUCCESS) return 1;
    if (cudaMalloc(&st->cublas_ws[i], kCublasWorkspace) != cudaSuccess) return 1;
    if (cublasSetWorkspace(*handles[i], st->cublas_ws[i], kCublasWorkspace) !=
        CUBLAS_STATUS_SUCCESS)
      return 1;
  }
  if (cudaStreamCreateWithFlags(&st->gemm, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&st->pull, cudaStreamNonBlocking) != cudaSuccess)
    return 1;
  cudaEvent_t* events[] = {&st->fork, &st->gemm_done};
  for (cudaEvent_t* e : events)
    if (cudaEventCreateWithFlags(e, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (cudaEvent_t& e : st->pulled)
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 1;
  for (cudaEvent_t& e : st->ready)
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor *h = kf_input(ctx, "h"), *wqkv = kf_input(ctx, "wqkv"), *wo = kf_input(ctx, "wo");
  kf_tensor* out = kf_output(ctx, "out");
  const int cpi = kf_group_index(ctx, "cp"), ppi = kf_group_index(ctx, "pp");
  if (h == nullptr || wqkv == nullptr || wo == nullptr || out == nullptr || cpi < 0 || ppi < 0 ||
      out->dtype != KF_BF16 || out->ndim != 3 || wqkv->ndim != 3)
    return 2;
  Dims dm;
  dm.b = out->shape[0];
  dm.s = out->shape[1];  // h has no rows on stage 1
  dm.h = wqkv->shape[0] / 3;
  dm.d = wqkv->shape[1];
  dm.dp = static_cast<int>((dm.d + 15) / 16 * 16);
  const int64_t hid = out->shape[2], rows = dm.b * dm.s, width = dm.h * dm.d;
  const kf_group& cp = ctx->groups[cpi];
  const kf_group& pp = ctx->groups[ppi];
  const int c = cp.rank;
  const bool first = pp.rank == 0, hand_over = pp.size > 1;
  if (cp.size > kMaxCp || pp.size > 2 || (first && h->shape[1] != dm.s)) return 2;

  // Workspace (the same offsets on every rank): q, k, v, the pulled k/v of CP positions 0 .. c-1,
  // ctx, the fp32 state (o, m, l) and stage 1's copy of its input. D % 8 == 0 keeps every tensor
  // 16-byte aligned.
  const size_t kv_elems = static_cast<size_t>(rows * width);
  const size_t act = Align256(kv_elems * sizeof(bf16));
  const size_t o_bytes = Align256(kv_elems * sizeof(float));
  const size_t ml_bytes = Align256(static_cast<size_t>(rows * dm.h) * sizeof(float));
  const size_t x_bytes = Align256(static_cast<size_t>(rows * hid) * sizeof(bf16));
  const size_t pulled_at = 3 * act, ctx_at = pulled_at + 2 * (cp.size - 1) * act;
  const size_t o_at = ctx_at + act, x_at = o_at + o_bytes + 2 * ml_bytes;
  if (ctx->workspace.nbytes < x_at + x_bytes) return 1;
  char* ws = static_cast<char*>(ctx->workspace.data);
  bf16* qkv[3] = {reinterpret_cast<bf16*>(ws), reinterpret_cast<bf16*>(ws + act),
                  reinterpret_cast<bf16*>(ws + 2 * act)};
  auto slot = [&](int p, int which) {  // k (0) or v (1) of CP position p < c
    return reinterpret_cast<bf16*>(ws + pulled_at + (2 * p + which) * act);
  };
  bf16* attn = reinterpret_cast<bf16*>(ws + ctx_at);
  float* o = reinterpret_cast<float*>(ws + o_at);
  float* m = reinterpret_cast<float*>(ws + o_at + o_bytes);
  float* l = reinterpret_cast<float*>(ws + o_at + o_bytes + ml_bytes);
  bf16* x = first ? const_cast<bf16*>(static_cast<const bf16*>(h->data))
                  : reinterpret_cast<bf16*>(ws + x_at);
  bf16* y = static_cast<bf16*>(out->data);
  const uint32_t epoch = ++st->epoch;
  auto pad_of = [&](int world_rank) {
    return static_cast<uint32_t*>(ctx->signal_pad.peers[world_rank]);
  };

  if (cudaEventRecord(st->fork, ctx->stream) != cudaSuccess ||
      cudaStreamWaitEvent(st->gemm, st->fork, 0) != cudaSuccess ||
      cudaStreamWaitEvent(st->pull, st->fork, 0) != cudaSuccess)
    return 1;
  if (cublasSetStream(st->handle, ctx->stream) != CUBLAS_STATUS_SUCCESS ||
      cublasSetStream(st->gemm_handle, st->gemm) != CUBLAS_STATUS_SUCCESS)
    return 1;

  // Row chunks: query tiles [i * per, (i + 1) * per), rows [r0(i), r1(i)) of every batch.
  const int tiles = static_cast<int>((dm.s + kRows - 1) / kRows);
  const int chunks_wanted = tiles < kChunks ? tiles : kChunks;
  const int per = (tiles + chunks_wanted - 1) / chunks_wanted;
  const int chunks = (tiles + per - 1) / per;
  auto r0 = [&](int i) { return static_cast<int64_t>(i) * per * kRows; };
  auto r1 = [&](int i) { return r0(i + 1) < dm.s ? r0(i + 1) : dm.s; };

  // gemm stream: q, k, v chunk by chunk (stage 0: all at once, its input is here), then tell the
  // later CP positions that this rank's k/v are complete.
  const bf16* wdata = static_cast<const bf16*>(wqkv->data);
  const int gemm_chunks = first ? 1 : chunks;
  for (int i = 0; i < gemm_chunks; ++i) {
    const int64_t a = first ? 0 : r0(i), e = first ? dm.s : r1(i);
    if (!first) {  // wait for the partner's chunk i, copy it in
      Slots mine{};
      mine.p[0] = pad_of(ctx->rank) + kHandSlot + i;
      Wait<<<1, 32, 0, st->gemm>>>(mine, 1, epoch);
      if (cudaGetLastError() != cudaSuccess) return 1;
      const bf16* theirs = static_cast<const bf16*>(out->peers[pp.ranks[0]]);
      const size_t pitch = static_cast<size_t>(dm.s * hid) * sizeof(bf16);
      if (cudaMemcpy2DAsync(x + a * hid, pitch, theirs + a * hid, pitch,
                            static_cast<size_t>((e - a) * hid) * sizeof(bf16),
                            static_cast<size_t>(dm.b), cudaMemcpyDeviceToDevice,
                            st->gemm) != cudaSuccess)
        return 1;
    }
    for (int j = 0; j < 3; ++j)  // q, k, v rows [a, e) of every batch
      if (GemmNT(st->gemm_handle, e - a, width, hid, x + a * hid, dm.s * hid,
                 wdata + j * width * hid, 0, qkv[j] + a * width, dm.s * width,
                 static_cast<int>(dm.b)) != CUBLAS_STATUS_SUCCESS)
        return 1;
    if (cudaEventRecord(st->ready[i], st->gemm) != cudaSuccess) return 1;
  }
  if (c + 1 < cp.size) {
    Slots later{};
    for (int p = c + 1; p < cp.size; ++p) later.p[p - c - 1] = pad_of(cp.ranks[p]) + c;
    Signal<<<1, 32, 0, st->gemm>>>(later, cp.size - c - 1, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (cudaEventRecord(st->gemm_done, st->gemm) != cudaSuccess) return 1;

  // pull stream: the earlier CP positions' k/v, each as soon as its owner has flagged it; the
  // farthest first, as the owners finish in that order (the causal work grows with the position).
  const size_t bytes = kv_elems * sizeof(bf16);
  for (int p = 0; p < c; ++p) {
    Slots from{};
    from.p[0] = pad_of(ctx->rank) + p;
    Wait<<<1, 32, 0, st->pull>>>(from, 1, epoch);
    if (cudaGetLastError() != cudaSuccess) return 1;
    const char* peer = static_cast<const char*>(ctx->workspace.peers[cp.ranks[p]]);
    if (cudaMemcpyAsync(slot(p, 0), peer + act, bytes, cudaMemcpyDeviceToDevice, st->pull) !=
            cudaSuccess ||
        cudaMemcpyAsync(slot(p, 1), peer + 2 * act, bytes, cudaMemcpyDeviceToDevice, st->pull) !=
            cudaSuccess ||
        cudaEventRecord(st->pulled[p], st->pull) != cudaSuccess)
      return 1;
  }

  // main: the (chunk, block) items in the order their inputs are expected, in units of one block
  // of attention work: query chunk i of stage 1 arrives when its partner has done (i + 1) / chunks
  // of its c + 1/2 blocks, the k/v of position p when stage-1 rank p has all of its input (its
  // partner's p + 1/2 blocks); stage 0 has everything at once, and goes chunk by chunk so that
  // its hand-over starts early. A chunk's diagonal block starts its softmax state (first), its
  // last item writes ctx, then the chunk is projected and, on stage 0, flagged to stage 1.
  struct Item {
    float key;
    int chunk, block;
  };
  Item items[kChunks * kMaxCp];
  int n_items = 0;
  for (int i = 0; i < chunks; ++i)
    for (int p = 0; p <= c; ++p) {
      const float arrive = first ? 0.0f : (i + 1) * (c + 0.5f) / chunks;
      const float avail = (first || p == c) ? 0.0f : p + 0.6f;
      items[n_items++] = {arrive > avail ? arrive : avail, i, p};
    }
  auto before = [&](const Item& a, const Item& b) {
    if (a.key != b.key) return a.key < b.key;
    if (a.chunk != b.chunk) return a.chunk < b.chunk;
    if ((a.block == c) != (b.block == c)) return a.block == c;  // the diagonal first
    return a.block < b.block;
  };
  for (int i = 1; i < n_items; ++i)  // insertion sort: at most 64 items
    for (int j = i; j > 0 && before(items[j], items[j - 1]); --j) {
      const Item t = items[j];
      items[j] = items[j - 1];
      items[j - 1] = t;
    }
  const float scale = 1.0f / sqrtf(static_cast<float>(dm.d));
  const Smem lay(dm.dp);
  const bf16* wo_data = static_cast<const bf16*>(wo->data);
  int left[kChunks];
  for (int i = 0; i < chunks; ++i) left[i] = c + 1;
  bool waited_pull[kMaxCp] = {};
  for (int k = 0; k < n_items; ++k) {
    const int i = items[k].chunk, p = items[k].block;
    const bool diag = p == c;
    if (diag && cudaStreamWaitEvent(ctx->stream, st->ready[first ? 0 : i], 0) != cudaSuccess)
      return 1;
    if (!diag && !waited_pull[p]) {
      if (cudaStreamWaitEvent(ctx->stream, st->pulled[p], 0) != cudaSuccess) return 1;
      waited_pull[p] = true;
    }
    const int t0 = i * per, nt = tiles - t0 < per ? tiles - t0 : per;
    const dim3 grid(static_cast<unsigned>(nt), static_cast<unsigned>(dm.h),
                    static_cast<unsigned>(dm.b));
    const int flags = (diag ? kDiagonal : 0) | (--left[i] == 0 ? kLast : 0);
    FlashStep<<<grid, kThreads, lay.total, ctx->stream>>>(qkv[0], diag ? qkv[1] : slot(p, 0),
                                                          diag ? qkv[2] : slot(p, 1), o, m, l, attn,
                                                          dm, scale, flags, t0);
    if (cudaGetLastError() != cudaSuccess) return 1;
    if (left[i] > 0) continue;
    if (GemmNT(st->handle, r1(i) - r0(i), hid, width, attn + r0(i) * width, dm.s * width, wo_data,
               0, y + r0(i) * hid, dm.s * hid, static_cast<int>(dm.b)) != CUBLAS_STATUS_SUCCESS)
      return 1;
    if (first && hand_over) {  // flag chunk i to the stage-1 partner
      Slots to{};
      to.p[0] = pad_of(pp.ranks[1]) + kHandSlot + i;
      Signal<<<1, 32, 0, ctx->stream>>>(to, 1, epoch);
      if (cudaGetLastError() != cudaSuccess) return 1;
    }
  }
  return cudaStreamWaitEvent(ctx->stream, st->gemm_done, 0) == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  for (cudaStream_t s : {st->gemm, st->pull})
    if (s != nullptr &&
        (cudaStreamSynchronize(s) != cudaSuccess || cudaStreamDestroy(s) != cudaSuccess))
      rc = 1;
  for (cudaEvent_t e : {st->fork, st->gemm_done})
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : st->pulled)
    if (e != nullptr) cudaEventDestroy(e);
  for (cudaEvent_t e : st->ready)
    if (e != nullptr) cudaEventDestroy(e);
  for (int i = 0; i < 2; ++i) {
    cublasHandle_t hd = i == 0 ? st->handle : st->gemm_handle;
    if (hd != nullptr && cublasDestroy(hd) != CUBLAS_STATUS_SUCCESS) rc = 1;
    if (st->cublas_ws[i] != nullptr && cudaFree(st->cublas_ws[i]) != cudaSuccess) rc = 1;
  }
  delete st;
  ctx->user = nullptr;
  return rc;
}
