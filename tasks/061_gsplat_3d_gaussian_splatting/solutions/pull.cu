// Distributed packed projection by pulling: every rank projects ALL ranks' Gaussians (read
// through the peer pointers) into its OWN cameras and writes the visible pairs straight into its
// outputs, in their final order. No camera all-gather, no send buffers, no split exchange, no
// host round trip (the baseline stops the stream to read the splits) and no unpack. A rank reads
// 12 bytes (the mean) of every Gaussian, the quaternion and scales of those whose centre falls
// off the image (the radius decides those) and all 56 bytes of those it keeps; the baseline
// moves 56 bytes per visible pair.
//
// Four kernels:
//   1. Barrier (one block): a flag to every peer and a wait for every peer's, so that every
//      rank's inputs are in place. Nothing else is exchanged: n_s = g + u * (s % 3) is known.
//   2. Count: block (s, k) takes Gaussians [256 k, 256 k + 256) of rank s and tests them
//      against every camera of this rank: a ballot word per (camera, warp) and a count per
//      (s, camera, k), which is the output's order.
//   3. Scan (one block): the counts' exclusive scan (where each block's rows of each camera
//      start) and n_vis.
//   4. Write: the same blocks; a Gaussian seen by some camera is read whole, its covariance
//      computed once, and each of its rows written at its block's start + its rank among the
//      block's visible Gaussians for that camera.
// No end barrier: only peers' inputs are read and only this rank's outputs written, and the
// harness changes no input until every rank's call has returned.
#include <stdint.h>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kScanThreads = 1024;
constexpr int kMaxCams = 32;

struct Cam {
  float r[9], t[3];
  float fx, fy, cx, cy;
  float lxp, lxn, lyp, lyn;
};

struct Geometry {
  float width, height, eps2d, near_plane, far_plane;
};

struct Peers {
  const float* means[KF_MAX_RANKS];
  const float* quats[KF_MAX_RANKS];
  const float* scales[KF_MAX_RANKS];
  const float* opacities[KF_MAX_RANKS];
  const float* colors[KF_MAX_RANKS];
  int n[KF_MAX_RANKS];                // Gaussians of rank s
  int offset[KF_MAX_RANKS];           // global id of rank s's first Gaussian
  int block_start[KF_MAX_RANKS + 1];  // first block of rank s; block_start[W] = all blocks
};

struct Outputs {
  int32_t* camera_ids;
  int32_t* gaussian_ids;
  int32_t* radii;
  float* means2d;
  float* depths;
  float* conics;
  float* opacities;
  float* colors;
  int32_t* count;
};

__device__ void LoadCameras(const float* __restrict__ viewmats, const float* __restrict__ ks,
                            int cams, const Geometry& g, Cam* cam) {
  for (int c = threadIdx.x; c < cams; c += blockDim.x) {
    const float* v = viewmats + 16 * c;
    const float* k = ks + 9 * c;
    Cam m;
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) m.r[3 * i + j] = v[4 * i + j];
      m.t[i] = v[4 * i + 3];
    }
    m.fx = k[0];
    m.cx = k[2];
    m.fy = k[4];
    m.cy = k[5];
    const float tan_x = 0.5f * g.width / m.fx, tan_y = 0.5f * g.height / m.fy;
    m.lxp = (g.width - m.cx) / m.fx + 0.3f * tan_x;
    m.lxn = m.cx / m.fx + 0.3f * tan_x;
    m.lyp = (g.height - m.cy) / m.fy + 0.3f * tan_y;
    m.lyn = m.cy / m.fy + 0.3f * tan_y;
    cam[c] = m;
  }
}

// The world covariance Rq diag(s)^2 Rq^T, upper triangle (xx, xy, xz, yy, yz, zz).
__device__ void Covariance(float4 q, float3 s, float* sig) {
  const float qn = rsqrtf(q.x * q.x + q.y * q.y + q.z * q.z + q.w * q.w);
  const float w = q.x * qn, x = q.y * qn, y = q.z * qn, z = q.w * qn;
  const float r[3][3] = {{1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
                         {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
                         {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)}};
  const float s2[3] = {s.x * s.x, s.y * s.y, s.z * s.z};
  int k = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = i; j < 3; ++j)
      sig[k++] = r[i][0] * s2[0] * r[j][0] + r[i][1] * s2[1] * r[j][1] + r[i][2] * s2[2] * r[j][2];
}

// The 2D covariance plus eps2d: T = J R (2 x 3), then T Sigma T^T.
__device__ void Cov2d(const Cam& cam, const float* sig, float px, float py, float pz, float eps2d,
                      float* a, float* b, float* d) {
  const float tx = pz * fminf(fmaxf(px / pz, -cam.lxn), cam.lxp);
  const float ty = pz * fminf(fmaxf(py / pz, -cam.lyn), cam.lyp);
  const float j00 = cam.fx / pz, j02 = -cam.fx * tx / (pz * pz);
  const float j11 = cam.fy / pz, j12 = -cam.fy * ty / (pz * pz);
  float t0[3], t1[3];
  for (int k = 0; k < 3; ++k) {
    t0[k] = j00 * cam.r[k] + j02 * cam.r[6 + k];
    t1[k] = j11 * cam.r[3 + k] + j12 * cam.r[6 + k];
  }
  const float s[3][3] = {
      {sig[0], sig[1], sig[2]}, {sig[1], sig[3], sig[4]}, {sig[2], sig[4], sig[5]}};
  float u0[3], u1[3];
  for (int k = 0; k < 3; ++k) {
    u0[k] = s[k][0] * t0[0] + s[k][1] * t0[1] + s[k][2] * t0[2];
    u1[k] = s[k][0] * t1[0] + s[k][1] * t1[1] + s[k][2] * t1[2];
  }
  *a = t0[0] * u0[0] + t0[1] * u0[1] + t0[2] * u0[2] + eps2d;
  *b = t0[0] * u1[0] + t0[1] * u1[1] + t0[2] * u1[2];
  *d = t1[0] * u1[0] + t1[1] * u1[1] + t1[2] * u1[2] + eps2d;
}

__device__ __forceinline__ float3 ToCamera(const Cam& cam, float3 m) {
  return make_float3(cam.r[0] * m.x + cam.r[1] * m.y + cam.r[2] * m.z + cam.t[0],
                     cam.r[3] * m.x + cam.r[4] * m.y + cam.r[5] * m.z + cam.t[1],
                     cam.r[6] * m.x + cam.r[7] * m.y + cam.r[8] * m.z + cam.t[2]);
}

__device__ __forceinline__ float3 Load3(const float* p, int i) {
  return make_float3(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
}

// Block b's source rank and the index of its first Gaussian there.
__device__ __forceinline__ void BlockOf(const Peers& p, int world, int b, int* s, int* first) {
  int r = 0;
  while (r + 1 < world && p.block_start[r + 1] <= b) ++r;
  *s = r;
  *first = (b - p.block_start[r]) * kThreads;
}

__global__ void Barrier(kf_buffer pad, int rank, int world, uint32_t* epoch) {
  const uint32_t e = *epoch + 1;
  if (threadIdx.x < world) {
    kf_signal(static_cast<uint32_t*>(pad.peers[threadIdx.x]) + rank, e);
    kf_wait(static_cast<uint32_t*>(pad.data) + threadIdx.x, e);
  }
  __syncthreads();
  if (threadIdx.x == 0) *epoch = e;
}

// The (s, camera, block) entry of the counts, in output order.
__device__ __forceinline__ int Entry(const Peers& p, int s, int cams, int c, int k) {
  return cams * p.block_start[s] + c * (p.block_start[s + 1] - p.block_start[s]) + k;
}

__global__ void __launch_bounds__(kThreads)
    Count(Peers p, int world, const float* __restrict__ viewmats, const float* __restrict__ ks,
          int cams, Geometry g, uint32_t* mask, int32_t* counts) {
  __shared__ Cam cam[kMaxCams];
  __shared__ int32_t warp_count[kMaxCams][kWarps];
  LoadCameras(viewmats, ks, cams, g, cam);
  int s, first;
  BlockOf(p, world, blockIdx.x, &s, &first);
  __syncthreads();
  const int i = first + threadIdx.x;
  const bool live = i < p.n[s];
  const float3 m = live ? Load3(p.means[s], i) : make_float3(0, 0, 0);
  bool have_sigma = false;
  float sig[6];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int blocks = p.block_start[world];
  for (int c = 0; c < cams; ++c) {
    bool vis = false;
    if (live) {
      const float3 q = ToCamera(cam[c], m);
      if (q.z > g.near_plane && q.z < g.far_plane) {
        const float u = cam[c].fx * q.x / q.z + cam[c].cx;
        const float v = cam[c].fy * q.y / q.z + cam[c].cy;
        if (u >= 0 && u < g.width && v >= 0 && v < g.height) {
          vis = true;  // the centre is inside, and every radius is >= 2 (eps2d alone gives 2)
        } else {
          if (!have_sigma) {
            const float* qs = p.quats[s] + 4 * i;
            Covariance(make_float4(qs[0], qs[1], qs[2], qs[3]), Load3(p.scales[s], i), sig);
            have_sigma = true;
          }
          float a, b, d;
          Cov2d(cam[c], sig, q.x, q.y, q.z, g.eps2d, &a, &b, &d);
          const float rx = ceilf(3.33f * sqrtf(a)), ry = ceilf(3.33f * sqrtf(d));
          vis = u + rx > 0 && u - rx < g.width && v + ry > 0 && v - ry < g.height;
        }
      }
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, vis);
    if (lane == 0) {
      mask[(static_cast<int64_t>(c) * blocks + blockIdx.x) * kWarps + warp] = ballot;
      warp_count[c][warp] = __popc(ballot);
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < cams; c += kThreads) {
    int32_t total = 0;
    for (int w = 0; w < kWarps; ++w) total += warp_count[c][w];
    counts[Entry(p, s, cams, c, blockIdx.x - p.block_start[s])] = total;
  }
}

// Exclusive scan of the counts in place (one block) and the number of rows.
__global__ void __launch_bounds__(kScanThreads) Scan(int32_t* counts, int entries, int32_t* n_vis) {
  __shared__ int32_t part[kScanThreads];
  const int per = (entries + kScanThreads - 1) / kScanThreads;
  const int lo = threadIdx.x * per, hi = min(lo + per, entries);
  int32_t s = 0;
  for (int e = lo; e < hi; ++e) s += counts[e];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = 1; o < kScanThreads; o *= 2) {
    const int32_t v = threadIdx.x >= o ? part[threadIdx.x - o] : 0;
    __syncthreads();
    part[threadIdx.x] += v;
    __syncthreads();
  }
  int32_t at = part[threadIdx.x] - s;
  for (int e = lo; e < hi; ++e) {
    const int32_t c = counts[e];
    counts[e] = at;
    at += c;
  }
  if (threadIdx.x == kScanThreads - 1) *n_vis = part[kScanThreads - 1];
}

__global__ void __launch_bounds__(kThreads)
    Write(Peers p, int world, const float* __restrict__ viewmats, const float* __restrict__ ks,
          int cams, Geometry g, const uint32_t* __restrict__ mask,
          const int32_t* __restrict__ starts, Outputs out) {
  __shared__ Cam cam[kMaxCams];
  __shared__ uint32_t words[kMaxCams][kWarps];
  LoadCameras(viewmats, ks, cams, g, cam);
  const int blocks = p.block_start[world];
  for (int k = threadIdx.x; k < cams * kWarps; k += kThreads) {
    const int c = k / kWarps, w = k % kWarps;
    words[c][w] = mask[(static_cast<int64_t>(c) * blocks + blockIdx.x) * kWarps + w];
  }
  int s, first;
  BlockOf(p, world, blockIdx.x, &s, &first);
  __syncthreads();
  const int i = first + threadIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  bool any = false;
  for (int c = 0; c < cams; ++c) any = any || ((words[c][warp] >> lane) & 1u);
  if (!any) return;
  const float3 m = Load3(p.means[s], i);
  const float* qs = p.quats[s] + 4 * i;
  float sig[6];
  Covariance(make_float4(qs[0], qs[1], qs[2], qs[3]), Load3(p.scales[s], i), sig);
  const float opacity = p.opacities[s][i];
  const float3 color = Load3(p.colors[s], i);
  const int gid = p.offset[s] + i;
  const int k = blockIdx.x - p.block_start[s];
  for (int c = 0; c < cams; ++c) {
    const uint32_t word = words[c][warp];
    if (!((word >> lane) & 1u)) continue;
    int32_t row = starts[Entry(p, s, cams, c, k)] + __popc(word & ((1u << lane) - 1));
    for (int w = 0; w < warp; ++w) row += __popc(words[c][w]);
    const float3 q = ToCamera(cam[c], m);
    float a, b, d;
    Cov2d(cam[c], sig, q.x, q.y, q.z, g.eps2d, &a, &b, &d);
    const float det = fmaxf(a * d - b * b, 1e-10f);
    out.camera_ids[row] = c;
    out.gaussian_ids[row] = gid;
    reinterpret_cast<int2*>(out.radii)[row] = make_int2(static_cast<int>(ceilf(3.33f * sqrtf(a))),
                                                        static_cast<int>(ceilf(3.33f * sqrtf(d))));
    reinterpret_cast<float2*>(out.means2d)[row] =
        make_float2(cam[c].fx * q.x / q.z + cam[c].cx, cam[c].fy * q.y / q.z + cam[c].cy);
    out.depths[row] = q.z;
    out.conics[3 * row] = d / det;
    out.conics[3 * row + 1] = -b / det;
    out.conics[3 * row + 2] = a / det;
    out.opacities[row] = opacity;
    out.colors[3 * row] = color.x;
    out.colors[3 * row + 1] = color.y;
    out.colors[3 * row + 2] = color.z;
  }
}

struct State {
  uint32_t* epoch = nullptr;
};

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  if (ctx->world_size < 1 || ctx->world_size > KF_MAX_RANKS) return 1;
  if (ctx->signal_pad.nbytes < sizeof(uint32_t) * ctx->world_size) return 1;
  State* st = new State;
  if (cudaMalloc(&st->epoch, sizeof(uint32_t)) != cudaSuccess ||
      cudaMemsetAsync(st->epoch, 0, sizeof(uint32_t), ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess) {
    cudaFree(st->epoch);
    delete st;
    return 1;
  }
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  const kf_tensor* means = kf_input(ctx, "means");
  const kf_tensor* quats = kf_input(ctx, "quats");
  const kf_tensor* scales = kf_input(ctx, "scales");
  const kf_tensor* opacities = kf_input(ctx, "opacities");
  const kf_tensor* colors = kf_input(ctx, "colors");
  const kf_tensor* viewmats = kf_input(ctx, "viewmats");
  const kf_tensor* ks = kf_input(ctx, "Ks");
  const char* names[] = {"camera_ids", "gaussian_ids",  "radii",      "means2d", "depths",
                         "conics",     "out_opacities", "out_colors", "n_vis"};
  kf_tensor* o[9];
  for (int k = 0; k < 9; ++k) o[k] = kf_output(ctx, names[k]);
  if (st == nullptr || !means || !quats || !scales || !opacities || !colors || !viewmats || !ks)
    return 1;
  for (kf_tensor* t : o)
    if (t == nullptr) return 1;
  const int world = ctx->world_size, rank = ctx->rank;
  const int cams = static_cast<int>(viewmats->shape[0]);
  if (cams < 1 || cams > kMaxCams) return 1;
  const Geometry g = {static_cast<float>(kf_param(ctx, "width", 0)),
                      static_cast<float>(kf_param(ctx, "height", 0)),
                      static_cast<float>(kf_param(ctx, "eps2d", 0.3)),
                      static_cast<float>(kf_param(ctx, "near", 0.01)),
                      static_cast<float>(kf_param(ctx, "far", 1e10))};
  // Count's shortcut (a centre inside the image is visible) needs every radius > 0.
  if (!(g.eps2d >= 0.1f)) return 1;
  const int64_t base = static_cast<int64_t>(kf_param(ctx, "g", -1));
  const int64_t step = static_cast<int64_t>(kf_param(ctx, "u", -1));
  if (base < 1 || step < 0 || base + step * (rank % 3) != means->shape[0]) return 1;

  Peers p = {};
  int64_t total = 0;
  for (int s = 0; s < world; ++s) {
    p.means[s] = static_cast<const float*>(means->peers[s]);
    p.quats[s] = static_cast<const float*>(quats->peers[s]);
    p.scales[s] = static_cast<const float*>(scales->peers[s]);
    p.opacities[s] = static_cast<const float*>(opacities->peers[s]);
    p.colors[s] = static_cast<const float*>(colors->peers[s]);
    p.n[s] = static_cast<int>(base + step * (s % 3));
    p.offset[s] = static_cast<int>(total);
    total += p.n[s];
    p.block_start[s + 1] = p.block_start[s] + (p.n[s] + kThreads - 1) / kThreads;
  }
  const int blocks = p.block_start[world];
  const int entries = cams * blocks;
  if (total * cams > o[0]->shape[0]) return 1;

  // Workspace: ballot words (camera, block, warp) | counts, then row starts (camera, ...).
  char* ws = static_cast<char*>(ctx->workspace.data);
  auto* mask = reinterpret_cast<uint32_t*>(ws);
  auto* counts = reinterpret_cast<int32_t*>(ws + Align(4 * static_cast<size_t>(entries) * kWarps));
  if (reinterpret_cast<char*>(counts + entries) > ws + ctx->workspace.nbytes) return 1;

  const Outputs out = {static_cast<int32_t*>(o[0]->data), static_cast<int32_t*>(o[1]->data),
                       static_cast<int32_t*>(o[2]->data), static_cast<float*>(o[3]->data),
                       static_cast<float*>(o[4]->data),   static_cast<float*>(o[5]->data),
                       static_cast<float*>(o[6]->data),   static_cast<float*>(o[7]->data),
                       static_cast<int32_t*>(o[8]->data)};
  const float* vm = static_cast<const float*>(viewmats->data);
  const float* kk = static_cast<const float*>(ks->data);
  Barrier<<<1, 32, 0, ctx->stream>>>(ctx->signal_pad, rank, world, st->epoch);
  Count<<<blocks, kThreads, 0, ctx->stream>>>(p, world, vm, kk, cams, g, mask, counts);
  Scan<<<1, kScanThreads, 0, ctx->stream>>>(counts, entries, out.count);
  Write<<<blocks, kThreads, 0, ctx->stream>>>(p, world, vm, kk, cams, g, mask, counts, out);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 0;
  int rc = cudaStreamSynchronize(ctx->stream) == cudaSuccess ? 0 : 1;
  if (cudaFree(st->epoch) != cudaSuccess) rc = 1;
  delete st;
  ctx->user = nullptr;
  return rc;
}
