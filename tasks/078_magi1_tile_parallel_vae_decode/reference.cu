// Tile-parallel VAE decode baseline, PKB's algorithm (MAGI-1's tile-parallel decode with a
// trilinear stand-in decoder):
//   1. cut the latent into overlapping tiles, sort them by latent size (descending, stable) and
//      deal them round-robin: rank r decodes sorted[r::W] (host, once per shape);
//   2. decode this rank's tiles (trilinear upsampling of each tile alone, fp32, rounded to bf16)
//      back to back into a send buffer;
//   3. kf_all_to_allv used as an all-gather: every rank sends all its decoded tiles to every rank
//      (one send buffer for every peer), so every rank holds every decoded tile;
//   4. blend the seams of this rank's tiles with their decoded neighbours (t, then h, then v; bf16
//      arithmetic as PyTorch rounds it) and keep each tile's first stride * up positions per axis;
//   5. a second kf_all_to_allv gathers every rank's kept parts, and a kernel stitches them into y.
// PKB's all_gather_object of the tile shapes is not needed: every rank derives every tile's shape
// from the latent's shape and the tiling.
#include <cuda_bf16.h>

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "kforge/kernel.h"

namespace {

struct Tile {
  int it, ih, iv;
  int lt, lh, lv;              // latent extent
  int dt, dh, dv;              // decoded extent (up * latent)
  int kt, kh, kv;              // kept extent
  int et, eh, ev;              // blend extent with the previous tile along t, h, v (0: none)
  int prev_t, prev_h, prev_v;  // that tile's index, or -1
  long long dec_off;           // offset of the decoded tile in the gathered decoded tiles
  long long kept_off;          // offset of the kept part in the gathered kept parts
  long long send_dec;          // offset in this rank's decode send buffer (own tiles only)
  long long send_kept;         // offset in this rank's kept send buffer (own tiles only)
};

struct Geometry {
  int c, t, h, v;
  int tile_t, stride_t, tile_s, stride_s, up_t, up_s;
};

struct State {
  Geometry g{};
  int num_tiles = 0, num_local = 0;
  Tile* tiles = nullptr;  // device, by tile index
  int* local = nullptr;   // device, this rank's tile indices
  __nv_bfloat16 *send_dec = nullptr, *all_dec = nullptr, *send_kept = nullptr, *all_kept = nullptr;
  std::vector<size_t> dec_send_counts, dec_send_displs, dec_recv_counts, dec_recv_displs;
  std::vector<size_t> kept_send_counts, kept_send_displs, kept_recv_counts, kept_recv_displs;
  long long max_local_dec = 0, max_local_kept = 0, max_tile_dec = 0, max_tile_kept = 0;
  long long total_dec = 0, total_kept = 0;
};

int Param(kf_ctx* ctx, const char* name) { return static_cast<int>(kf_param(ctx, name, -1)); }

bool GeometryOf(kf_ctx* ctx, Geometry* g) {
  const kf_tensor* z = kf_input(ctx, "z");
  const kf_tensor* y = kf_output(ctx, "y");
  if (z == nullptr || y == nullptr || z->dtype != KF_BF16 || z->ndim != 5) return false;
  g->c = static_cast<int>(z->shape[1]);
  g->t = static_cast<int>(z->shape[2]);
  g->h = static_cast<int>(z->shape[3]);
  g->v = static_cast<int>(z->shape[4]);
  g->tile_t = Param(ctx, "tile_t");
  g->stride_t = Param(ctx, "stride_t");
  g->tile_s = Param(ctx, "tile_s");
  g->stride_s = Param(ctx, "stride_s");
  g->up_t = Param(ctx, "up_t");
  g->up_s = Param(ctx, "up_s");
  return g->stride_t >= 1 && g->stride_t <= g->tile_t && g->stride_s >= 1 &&
         g->stride_s <= g->tile_s && g->up_t >= 1 && g->up_s >= 1;
}

// Fills every tile's geometry, assigns tiles to ranks as PKB does and lays out the buffers.
void Plan(State* st, int rank, int world, std::vector<Tile>* tiles_out,
          std::vector<int>* local_out) {
  const Geometry& g = st->g;
  const int nt = (g.t + g.stride_t - 1) / g.stride_t;
  const int nh = (g.h + g.stride_s - 1) / g.stride_s;
  const int nv = (g.v + g.stride_s - 1) / g.stride_s;
  std::vector<Tile> tiles(static_cast<size_t>(nt) * nh * nv);
  auto extent = [](int prev_len, int len, int tile, int stride, int up) {
    return std::min({up * prev_len, up * len, up * (tile - stride)});
  };
  for (int it = 0; it < nt; ++it)
    for (int ih = 0; ih < nh; ++ih)
      for (int iv = 0; iv < nv; ++iv) {
        Tile& x = tiles[(static_cast<size_t>(it) * nh + ih) * nv + iv];
        x.it = it;
        x.ih = ih;
        x.iv = iv;
        x.lt = std::min(g.tile_t, g.t - it * g.stride_t);
        x.lh = std::min(g.tile_s, g.h - ih * g.stride_s);
        x.lv = std::min(g.tile_s, g.v - iv * g.stride_s);
        x.dt = g.up_t * x.lt;
        x.dh = g.up_s * x.lh;
        x.dv = g.up_s * x.lv;
        x.kt = std::min(g.up_t * g.stride_t, x.dt);
        x.kh = std::min(g.up_s * g.stride_s, x.dh);
        x.kv = std::min(g.up_s * g.stride_s, x.dv);
      }
  for (Tile& x : tiles) {
    x.prev_t = x.it > 0 ? ((x.it - 1) * nh + x.ih) * nv + x.iv : -1;
    x.prev_h = x.ih > 0 ? (x.it * nh + x.ih - 1) * nv + x.iv : -1;
    x.prev_v = x.iv > 0 ? (x.it * nh + x.ih) * nv + x.iv - 1 : -1;
    x.et = x.prev_t < 0 ? 0 : extent(tiles[x.prev_t].lt, x.lt, g.tile_t, g.stride_t, g.up_t);
    x.eh = x.prev_h < 0 ? 0 : extent(tiles[x.prev_h].lh, x.lh, g.tile_s, g.stride_s, g.up_s);
    x.ev = x.prev_v < 0 ? 0 : extent(tiles[x.prev_v].lv, x.lv, g.tile_s, g.stride_s, g.up_s);
  }
  // PKB's split: sorted by latent numel, descending; Python's sort is stable.
  std::vector<int> sorted(tiles.size());
  std::iota(sorted.begin(), sorted.end(), 0);
  auto numel = [&](int i) {
    return static_cast<long long>(tiles[i].lt) * tiles[i].lh * tiles[i].lv;
  };
  std::stable_sort(sorted.begin(), sorted.end(), [&](int a, int b) { return numel(a) > numel(b); });
  std::vector<int> local;
  st->dec_recv_counts.assign(world, 0);
  st->kept_recv_counts.assign(world, 0);
  st->dec_recv_displs.assign(world, 0);
  st->kept_recv_displs.assign(world, 0);
  long long dec = 0, kept = 0;
  for (int r = 0; r < world; ++r) {
    st->dec_recv_displs[r] = static_cast<size_t>(dec);
    st->kept_recv_displs[r] = static_cast<size_t>(kept);
    long long rank_dec = 0, rank_kept = 0;
    for (size_t j = static_cast<size_t>(r); j < sorted.size(); j += static_cast<size_t>(world)) {
      Tile& x = tiles[sorted[j]];
      const long long nd = 3LL * x.dt * x.dh * x.dv, nk = 3LL * x.kt * x.kh * x.kv;
      x.dec_off = dec;
      x.kept_off = kept;
      x.send_dec = rank_dec;
      x.send_kept = rank_kept;
      dec += nd;
      kept += nk;
      rank_dec += nd;
      rank_kept += nk;
      st->max_tile_dec = std::max(st->max_tile_dec, nd);
      st->max_tile_kept = std::max(st->max_tile_kept, nk);
      if (r == rank) local.push_back(sorted[j]);
    }
    st->dec_recv_counts[r] = static_cast<size_t>(rank_dec);
    st->kept_recv_counts[r] = static_cast<size_t>(rank_kept);
    st->max_local_dec = std::max(st->max_local_dec, rank_dec);
    st->max_local_kept = std::max(st->max_local_kept, rank_kept);
  }
  // Every peer gets this rank's whole buffer (PKB repeats it W times; one buffer serves all).
  st->dec_send_counts.assign(world, st->dec_recv_counts[rank]);
  st->kept_send_counts.assign(world, st->kept_recv_counts[rank]);
  st->dec_send_displs.assign(world, 0);
  st->kept_send_displs.assign(world, 0);
  st->num_tiles = static_cast<int>(tiles.size());
  st->num_local = static_cast<int>(local.size());
  st->total_dec = dec;
  st->total_kept = kept;
  *tiles_out = std::move(tiles);
  *local_out = std::move(local);
}

// Trilinear taps of output index o in a tile of len samples, as PyTorch's upsample_trilinear3d
// computes them in fp32 (align_corners = False, scale_factor = up: source scale 1 / up).
struct Taps {
  int i0, step;
  float l0, l1;
};
__device__ Taps TapsOf(int o, int len, int up) {
  const float scale = 1.0f / static_cast<float>(up);
  float q = scale * (static_cast<float>(o) + 0.5f) - 0.5f;
  if (q < 0.f) q = 0.f;
  Taps t;
  t.i0 = static_cast<int>(q);
  t.step = t.i0 < len - 1 ? 1 : 0;
  t.l1 = q - static_cast<float>(t.i0);
  t.l0 = 1.0f - t.l1;
  return t;
}

// The decoded (bf16-rounded) value of tile x, channel k, local output position (ot, oh, ov).
__device__ float DecodeAt(const __nv_bfloat16* __restrict__ z, const Geometry& g, const Tile& x,
                          int k, int ot, int oh, int ov) {
  const Taps tt = TapsOf(ot, x.lt, g.up_t), th = TapsOf(oh, x.lh, g.up_s),
             tv = TapsOf(ov, x.lv, g.up_s);
  const long long sh = g.v, st = static_cast<long long>(g.h) * g.v;
  const __nv_bfloat16* base =
      z + (k % g.c) * st * g.t + static_cast<long long>(x.it * g.stride_t + tt.i0) * st +
      static_cast<long long>(x.ih * g.stride_s + th.i0) * sh + x.iv * g.stride_s + tv.i0;
  auto at = [&](int a, int b, int d) {
    return __bfloat162float(base[a * tt.step * st + b * th.step * sh + d * tv.step]);
  };
  const float val = tt.l0 * (th.l0 * (tv.l0 * at(0, 0, 0) + tv.l1 * at(0, 0, 1)) +
                             th.l1 * (tv.l0 * at(0, 1, 0) + tv.l1 * at(0, 1, 1))) +
                    tt.l1 * (th.l0 * (tv.l0 * at(1, 0, 0) + tv.l1 * at(1, 0, 1)) +
                             th.l1 * (tv.l0 * at(1, 1, 0) + tv.l1 * at(1, 1, 1)));
  return __bfloat162float(__float2bfloat16_rn(val));
}

// PyTorch's bf16 blend step: rn(rn(prev * (1 - r)) + rn(cur * r)), r = p / e.
__device__ float Blend(float prev, float cur, int p, int e) {
  const double r = static_cast<double>(p) / static_cast<double>(e);
  const float a = __bfloat162float(__float2bfloat16_rn(prev * static_cast<float>(1.0 - r)));
  const float b = __bfloat162float(__float2bfloat16_rn(cur * static_cast<float>(r)));
  return __bfloat162float(__float2bfloat16_rn(a + b));
}

// Decodes tile local[blockIdx.y] into this rank's send buffer.
__global__ void DecodeTiles(const __nv_bfloat16* __restrict__ z, Geometry g,
                            const Tile* __restrict__ tiles, const int* __restrict__ local,
                            __nv_bfloat16* __restrict__ out) {
  const Tile x = tiles[local[blockIdx.y]];
  const long long plane = static_cast<long long>(x.dh) * x.dv, n = 3LL * x.dt * plane;
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int ov = static_cast<int>(e % x.dv), oh = static_cast<int>(e / x.dv % x.dh);
    const int ot = static_cast<int>(e / plane % x.dt), k = static_cast<int>(e / (plane * x.dt));
    out[x.send_dec + e] = __float2bfloat16_rn(DecodeAt(z, g, x, k, ot, oh, ov));
  }
}

// Blends tile local[blockIdx.y] with its decoded neighbours (all gathered in dec) and writes its
// kept part into this rank's send buffer.
__global__ void BlendTiles(const __nv_bfloat16* __restrict__ dec, const Tile* __restrict__ tiles,
                           const int* __restrict__ local, __nv_bfloat16* __restrict__ out) {
  const Tile x = tiles[local[blockIdx.y]];
  const long long plane = static_cast<long long>(x.kh) * x.kv, n = 3LL * x.kt * plane;
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const int pv = static_cast<int>(e % x.kv), ph = static_cast<int>(e / x.kv % x.kh);
    const int pt = static_cast<int>(e / plane % x.kt), k = static_cast<int>(e / (plane * x.kt));
    auto at = [&](const Tile& y, int a, int b, int d) {
      return __bfloat162float(
          dec[y.dec_off + ((static_cast<long long>(k) * y.dt + a) * y.dh + b) * y.dv + d]);
    };
    float cur = at(x, pt, ph, pv);
    if (pt < x.et) {
      const Tile& p = tiles[x.prev_t];
      cur = Blend(at(p, p.dt - x.et + pt, ph, pv), cur, pt, x.et);
    }
    if (ph < x.eh) {
      const Tile& p = tiles[x.prev_h];
      cur = Blend(at(p, pt, p.dh - x.eh + ph, pv), cur, ph, x.eh);
    }
    if (pv < x.ev) {
      const Tile& p = tiles[x.prev_v];
      cur = Blend(at(p, pt, ph, p.dv - x.ev + pv), cur, pv, x.ev);
    }
    out[x.send_kept + e] = __float2bfloat16_rn(cur);
  }
}

// Copies the kept part of tile blockIdx.y from the gathered kept parts into its place in y.
__global__ void Stitch(const __nv_bfloat16* __restrict__ kept, Geometry g,
                       const Tile* __restrict__ tiles, __nv_bfloat16* __restrict__ y) {
  const Tile x = tiles[blockIdx.y];
  const long long yt = static_cast<long long>(g.up_t) * g.t,
                  yh = static_cast<long long>(g.up_s) * g.h,
                  yv = static_cast<long long>(g.up_s) * g.v;
  const long long t0 = static_cast<long long>(x.it) * g.up_t * g.stride_t,
                  h0 = static_cast<long long>(x.ih) * g.up_s * g.stride_s,
                  v0 = static_cast<long long>(x.iv) * g.up_s * g.stride_s;
  const long long plane = static_cast<long long>(x.kh) * x.kv, n = 3LL * x.kt * plane;
  for (long long e = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<long long>(gridDim.x) * blockDim.x) {
    const long long pv = e % x.kv, ph = e / x.kv % x.kh, pt = e / plane % x.kt,
                    k = e / (plane * x.kt);
    y[((k * yt + t0 + pt) * yh + h0 + ph) * yv + v0 + pv] = kept[x.kept_off + e];
  }
}

unsigned BlocksFor(long long n) {
  const long long b = (n + 255) / 256;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 4096 ? 4096 : b));
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  State* st = new State;
  ctx->user = st;
  if (!GeometryOf(ctx, &st->g)) return 2;
  std::vector<Tile> tiles;
  std::vector<int> local;
  Plan(st, ctx->rank, ctx->world_size, &tiles, &local);
  auto alloc = [](void** p, size_t bytes) {
    return cudaMalloc(p, bytes > 0 ? bytes : 256) == cudaSuccess;
  };
  const size_t e = sizeof(__nv_bfloat16);
  if (!alloc(reinterpret_cast<void**>(&st->tiles), tiles.size() * sizeof(Tile)) ||
      !alloc(reinterpret_cast<void**>(&st->local), local.size() * sizeof(int)) ||
      !alloc(reinterpret_cast<void**>(&st->send_dec), st->dec_recv_counts[ctx->rank] * e) ||
      !alloc(reinterpret_cast<void**>(&st->all_dec), static_cast<size_t>(st->total_dec) * e) ||
      !alloc(reinterpret_cast<void**>(&st->send_kept), st->kept_recv_counts[ctx->rank] * e) ||
      !alloc(reinterpret_cast<void**>(&st->all_kept), static_cast<size_t>(st->total_kept) * e))
    return 1;
  if (cudaMemcpy(st->tiles, tiles.data(), tiles.size() * sizeof(Tile), cudaMemcpyHostToDevice) !=
      cudaSuccess)
    return 1;
  if (!local.empty() && cudaMemcpy(st->local, local.data(), local.size() * sizeof(int),
                                   cudaMemcpyHostToDevice) != cudaSuccess)
    return 1;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 2;
  const kf_tensor* z = kf_input(ctx, "z");
  kf_tensor* y = kf_output(ctx, "y");
  if (z == nullptr || y == nullptr || y->numel != st->total_kept) return 2;
  const auto* zd = static_cast<const __nv_bfloat16*>(z->data);
  if (st->num_local > 0) {
    DecodeTiles<<<dim3(BlocksFor(st->max_tile_dec), st->num_local), 256, 0, ctx->stream>>>(
        zd, st->g, st->tiles, st->local, st->send_dec);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (kf_all_to_allv(ctx, st->send_dec, st->dec_send_counts.data(), st->dec_send_displs.data(),
                     st->all_dec, st->dec_recv_counts.data(), st->dec_recv_displs.data(),
                     KF_BF16) != 0)
    return 1;
  if (st->num_local > 0) {
    BlendTiles<<<dim3(BlocksFor(st->max_tile_kept), st->num_local), 256, 0, ctx->stream>>>(
        st->all_dec, st->tiles, st->local, st->send_kept);
    if (cudaGetLastError() != cudaSuccess) return 1;
  }
  if (kf_all_to_allv(ctx, st->send_kept, st->kept_send_counts.data(), st->kept_send_displs.data(),
                     st->all_kept, st->kept_recv_counts.data(), st->kept_recv_displs.data(),
                     KF_BF16) != 0)
    return 1;
  Stitch<<<dim3(BlocksFor(st->max_tile_kept), st->num_tiles), 256, 0, ctx->stream>>>(
      st->all_kept, st->g, st->tiles, static_cast<__nv_bfloat16*>(y->data));
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = 0;
  for (void* p : {static_cast<void*>(st->tiles), static_cast<void*>(st->local),
                  static_cast<void*>(st->send_dec), static_cast<void*>(st->all_dec),
                  static_cast<void*>(st->send_kept), static_cast<void*>(st->all_kept)})
    if (p != nullptr && cudaFree(p) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
