// gsplat's distributed packed projection, as PKB's reference (and gsplat) does it:
//   1. all-gathers of the Gaussian counts and of the cameras (viewmat and K, 25 floats a camera);
//   2. a projection of this rank's Gaussians into all W * C cameras: a flag per (camera, Gaussian)
//      pair in torch.where's order (camera-major), and a count per block;
//   3. an exclusive scan of the block counts (one block), then the pack: every visible pair's row
//      (14 words: camera, global id, radii, mean2d, depth, conic, opacity, colour) at its place,
//      and the first row of every destination rank (its cameras are consecutive);
//   4. the split sizes exchanged with kf_all_to_all and copied to the host (PKB's .tolist()),
//      one kf_all_to_allv of the rows (PKB does three, of the same bytes), and an unpack of what
//      arrived (already in (source rank, camera, Gaussian) order) into the eight outputs.
#include <stdint.h>

#include <vector>

#include "kforge/kernel.h"

namespace {

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024;
constexpr int kRowWords = 14;
constexpr int kCamFloats = 25;  // viewmat (16) then K (9)

struct Geometry {
  float width, height, eps2d, near_plane, far_plane;
};

struct Row {
  int32_t radius[2];
  float u, v, depth, conic[3];
};

// gsplat's torch projection of one Gaussian into one camera (see the task card).
__device__ bool ProjectOne(const float* __restrict__ mean, const float* __restrict__ quat,
                           const float* __restrict__ scale, const float* __restrict__ cam,
                           const Geometry& g, Row* row) {
  const float* vm = cam;
  const float* k = cam + 16;
  const float px = vm[0] * mean[0] + vm[1] * mean[1] + vm[2] * mean[2] + vm[3];
  const float py = vm[4] * mean[0] + vm[5] * mean[1] + vm[6] * mean[2] + vm[7];
  const float pz = vm[8] * mean[0] + vm[9] * mean[1] + vm[10] * mean[2] + vm[11];
  if (!(pz > g.near_plane && pz < g.far_plane)) return false;
  const float fx = k[0], cx = k[2], fy = k[4], cy = k[5];
  // Covariance: Rq diag(s)^2 Rq^T, then R Sigma R^T in camera space.
  const float qn =
      rsqrtf(quat[0] * quat[0] + quat[1] * quat[1] + quat[2] * quat[2] + quat[3] * quat[3]);
  const float w = quat[0] * qn, x = quat[1] * qn, y = quat[2] * qn, z = quat[3] * qn;
  const float rq[3][3] = {{1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
                          {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
                          {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)}};
  const float s2[3] = {scale[0] * scale[0], scale[1] * scale[1], scale[2] * scale[2]};
  float sigma[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      sigma[i][j] =
          rq[i][0] * s2[0] * rq[j][0] + rq[i][1] * s2[1] * rq[j][1] + rq[i][2] * s2[2] * rq[j][2];
  float t[3][3], sc[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      t[i][j] = vm[4 * i] * sigma[0][j] + vm[4 * i + 1] * sigma[1][j] + vm[4 * i + 2] * sigma[2][j];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      sc[i][j] = t[i][0] * vm[4 * j] + t[i][1] * vm[4 * j + 1] + t[i][2] * vm[4 * j + 2];
  const float tan_x = 0.5f * g.width / fx, tan_y = 0.5f * g.height / fy;
  const float lxp = (g.width - cx) / fx + 0.3f * tan_x, lxn = cx / fx + 0.3f * tan_x;
  const float lyp = (g.height - cy) / fy + 0.3f * tan_y, lyn = cy / fy + 0.3f * tan_y;
  const float tx = pz * fminf(fmaxf(px / pz, -lxn), lxp);
  const float ty = pz * fminf(fmaxf(py / pz, -lyn), lyp);
  const float j0[3] = {fx / pz, 0.f, -fx * tx / (pz * pz)};
  const float j1[3] = {0.f, fy / pz, -fy * ty / (pz * pz)};
  float a = 0, b = 0, d = 0;
  for (int i = 0; i < 3; ++i)
    for (int l = 0; l < 3; ++l) {
      a += j0[i] * sc[i][l] * j0[l];
      b += j0[i] * sc[i][l] * j1[l];
      d += j1[i] * sc[i][l] * j1[l];
    }
  a += g.eps2d;
  d += g.eps2d;
  const float det = fmaxf(a * d - b * b, 1e-10f);
  row->u = fx * px / pz + cx;
  row->v = fy * py / pz + cy;
  row->depth = pz;
  row->conic[0] = d / det;
  row->conic[1] = -b / det;
  row->conic[2] = a / det;
  row->radius[0] = static_cast<int32_t>(ceilf(3.33f * sqrtf(a)));
  row->radius[1] = static_cast<int32_t>(ceilf(3.33f * sqrtf(d)));
  return row->u + row->radius[0] > 0 && row->u - row->radius[0] < g.width &&
         row->v + row->radius[1] > 0 && row->v - row->radius[1] < g.height;
}

struct Inputs {
  const float* means;
  const float* quats;
  const float* scales;
  const float* opacities;
  const float* colors;
};

// Camera j's 25 floats and this rank's count, the all-gathers' send buffers.
__global__ void PackCameras(const float* __restrict__ viewmats, const float* __restrict__ ks,
                            int cams, int n, float* out, int32_t* count) {
  for (int i = threadIdx.x; i < cams * kCamFloats; i += blockDim.x) {
    const int c = i / kCamFloats, e = i % kCamFloats;
    out[i] = e < 16 ? viewmats[c * 16 + e] : ks[c * 9 + e - 16];
  }
  if (threadIdx.x == 0) *count = n;
}

// Item e = j * n + i: Gaussian i in global camera j. flag[e] and this block's visible count.
__global__ void __launch_bounds__(kThreads)
    Flag(Inputs in, const float* __restrict__ cams, int n, int64_t items, Geometry g, uint8_t* flag,
         int32_t* block_count) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  bool vis = false;
  if (e < items) {
    const int64_t j = e / n, i = e % n;
    Row row;
    vis = ProjectOne(in.means + 3 * i, in.quats + 4 * i, in.scales + 3 * i, cams + kCamFloats * j,
                     g, &row);
    flag[e] = vis;
  }
  const int c = __syncthreads_count(vis);
  if (threadIdx.x == 0) block_count[blockIdx.x] = c;
}

// Exclusive scan of the block counts in place (one block); displ[W] = the total.
__global__ void __launch_bounds__(kScanThreads)
    ScanBlocks(int32_t* block_count, int blocks, int32_t* displ, int world) {
  __shared__ int32_t part[kScanThreads];
  const int per = (blocks + kScanThreads - 1) / kScanThreads;
  const int lo = threadIdx.x * per, hi = min(lo + per, blocks);
  int32_t s = 0;
  for (int b = lo; b < hi; ++b) s += block_count[b];
  part[threadIdx.x] = s;
  __syncthreads();
  for (int o = 1; o < kScanThreads; o *= 2) {
    const int32_t v = threadIdx.x >= o ? part[threadIdx.x - o] : 0;
    __syncthreads();
    part[threadIdx.x] += v;
    __syncthreads();
  }
  int32_t at = part[threadIdx.x] - s;
  for (int b = lo; b < hi; ++b) {
    const int32_t c = block_count[b];
    block_count[b] = at;
    at += c;
  }
  if (threadIdx.x == kScanThreads - 1) displ[world] = part[kScanThreads - 1];
}

// Every visible pair's row at its place in the send buffer; the first item of destination d
// (e = d * C * n) records where d's rows start.
__global__ void __launch_bounds__(kThreads)
    Pack(Inputs in, const float* __restrict__ cams, const int32_t* __restrict__ counts, int n,
         int cams_per_rank, int rank, int64_t items, Geometry g, const uint8_t* __restrict__ flag,
         const int32_t* __restrict__ block_at, int32_t* displ, uint32_t* rows) {
  __shared__ int32_t warp_sum[kThreads / 32];
  __shared__ int32_t offset;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const bool vis = e < items && flag[e];
  const unsigned ballot = __ballot_sync(0xffffffffu, vis);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_sum[warp] = __popc(ballot);
  if (threadIdx.x == 0) {
    int32_t off = 0;
    for (int r = 0; r < rank; ++r) off += counts[r];
    offset = off;
  }
  __syncthreads();
  int32_t at = block_at[blockIdx.x] + __popc(ballot & ((1u << lane) - 1));
  for (int k = 0; k < warp; ++k) at += warp_sum[k];
  if (e < items && e % (static_cast<int64_t>(cams_per_rank) * n) == 0)
    displ[e / (static_cast<int64_t>(cams_per_rank) * n)] = at;
  if (!vis) return;
  const int64_t j = e / n, i = e % n;
  Row row;
  ProjectOne(in.means + 3 * i, in.quats + 4 * i, in.scales + 3 * i, cams + kCamFloats * j, g, &row);
  uint32_t* out = rows + static_cast<int64_t>(at) * kRowWords;
  out[0] = static_cast<uint32_t>(j % cams_per_rank);  // the camera's index on its rank
  out[1] = static_cast<uint32_t>(offset + i);         // the source rank's offset (not PKB's)
  out[2] = static_cast<uint32_t>(row.radius[0]);
  out[3] = static_cast<uint32_t>(row.radius[1]);
  out[4] = __float_as_uint(row.u);
  out[5] = __float_as_uint(row.v);
  out[6] = __float_as_uint(row.depth);
  for (int k = 0; k < 3; ++k) out[7 + k] = __float_as_uint(row.conic[k]);
  out[10] = __float_as_uint(in.opacities[i]);
  for (int k = 0; k < 3; ++k) out[11 + k] = __float_as_uint(in.colors[3 * i + k]);
}

__global__ void SendCounts(const int32_t* __restrict__ displ, int world, int32_t* send_count) {
  const int d = threadIdx.x;
  if (d < world) send_count[d] = displ[d + 1] - displ[d];
}

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

__global__ void __launch_bounds__(kThreads)
    Unpack(const uint32_t* __restrict__ rows, int64_t total, Outputs out) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (r == 0) *out.count = static_cast<int32_t>(total);
  if (r >= total) return;
  const uint32_t* w = rows + r * kRowWords;
  out.camera_ids[r] = static_cast<int32_t>(w[0]);
  out.gaussian_ids[r] = static_cast<int32_t>(w[1]);
  out.radii[2 * r] = static_cast<int32_t>(w[2]);
  out.radii[2 * r + 1] = static_cast<int32_t>(w[3]);
  out.means2d[2 * r] = __uint_as_float(w[4]);
  out.means2d[2 * r + 1] = __uint_as_float(w[5]);
  out.depths[r] = __uint_as_float(w[6]);
  for (int k = 0; k < 3; ++k) out.conics[3 * r + k] = __uint_as_float(w[7 + k]);
  out.opacities[r] = __uint_as_float(w[10]);
  for (int k = 0; k < 3; ++k) out.colors[3 * r + k] = __uint_as_float(w[11 + k]);
}

size_t Align(size_t x) { return (x + 255) / 256 * 256; }

struct State {
  std::vector<int32_t> send_count, recv_count;
  std::vector<size_t> sc, sd, rc, rd;
};

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const int w = ctx->world_size;
  if (w < 1 || w > KF_MAX_RANKS) return 1;
  State* st = new State;
  st->send_count.resize(w);
  st->recv_count.resize(w);
  for (auto* v : {&st->sc, &st->sd, &st->rc, &st->rd}) v->resize(w);
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
  const int w = ctx->world_size, rank = ctx->rank;
  const int n = static_cast<int>(means->shape[0]);
  const int cams = static_cast<int>(viewmats->shape[0]);
  const Geometry g = {static_cast<float>(kf_param(ctx, "width", 0)),
                      static_cast<float>(kf_param(ctx, "height", 0)),
                      static_cast<float>(kf_param(ctx, "eps2d", 0.3)),
                      static_cast<float>(kf_param(ctx, "near", 0.01)),
                      static_cast<float>(kf_param(ctx, "far", 1e10))};
  const int64_t items = static_cast<int64_t>(w) * cams * n;
  const int blocks = static_cast<int>((items + kThreads - 1) / kThreads);
  const int64_t capacity = o[0]->shape[0];  // C * G rows

  // Workspace: counts | cameras to send | all cameras | flags | block counts | displacements and
  // split sizes | rows to send | rows received.
  char* ws = static_cast<char*>(ctx->workspace.data);
  size_t at = 0;
  auto take = [&](size_t bytes) {
    char* p = ws + at;
    at += Align(bytes);
    return p;
  };
  auto* my_count = reinterpret_cast<int32_t*>(take(4));
  auto* counts = reinterpret_cast<int32_t*>(take(4 * w));
  auto* cam_send = reinterpret_cast<float*>(take(4 * kCamFloats * cams));
  auto* cam_all = reinterpret_cast<float*>(take(4 * kCamFloats * cams * w));
  auto* flag = reinterpret_cast<uint8_t*>(take(items));
  auto* block_at = reinterpret_cast<int32_t*>(take(4 * static_cast<size_t>(blocks)));
  auto* displ = reinterpret_cast<int32_t*>(take(4 * (w + 1)));
  auto* send_count = reinterpret_cast<int32_t*>(take(4 * w));
  auto* recv_count = reinterpret_cast<int32_t*>(take(4 * w));
  auto* send_rows = reinterpret_cast<uint32_t*>(take(4 * kRowWords * static_cast<size_t>(items)));
  auto* recv_rows =
      reinterpret_cast<uint32_t*>(take(4 * kRowWords * static_cast<size_t>(capacity)));
  if (at > ctx->workspace.nbytes) return 1;

  const Inputs in = {static_cast<const float*>(means->data), static_cast<const float*>(quats->data),
                     static_cast<const float*>(scales->data),
                     static_cast<const float*>(opacities->data),
                     static_cast<const float*>(colors->data)};
  PackCameras<<<1, kThreads, 0, ctx->stream>>>(static_cast<const float*>(viewmats->data),
                                               static_cast<const float*>(ks->data), cams, n,
                                               cam_send, my_count);
  if (kf_all_gather(ctx, my_count, counts, 1, KF_I32) != 0) return 1;
  if (kf_all_gather(ctx, cam_send, cam_all, kCamFloats * cams, KF_F32) != 0) return 1;
  Flag<<<blocks, kThreads, 0, ctx->stream>>>(in, cam_all, n, items, g, flag, block_at);
  ScanBlocks<<<1, kScanThreads, 0, ctx->stream>>>(block_at, blocks, displ, w);
  Pack<<<blocks, kThreads, 0, ctx->stream>>>(in, cam_all, counts, n, cams, rank, items, g, flag,
                                             block_at, displ, send_rows);
  SendCounts<<<1, 32, 0, ctx->stream>>>(displ, w, send_count);
  if (kf_all_to_all(ctx, send_count, recv_count, 1, KF_I32) != 0) return 1;
  if (cudaMemcpyAsync(st->send_count.data(), send_count, 4 * w, cudaMemcpyDeviceToHost,
                      ctx->stream) != cudaSuccess ||
      cudaMemcpyAsync(st->recv_count.data(), recv_count, 4 * w, cudaMemcpyDeviceToHost,
                      ctx->stream) != cudaSuccess ||
      cudaStreamSynchronize(ctx->stream) != cudaSuccess)
    return 1;
  size_t sent = 0, received = 0;
  for (int p = 0; p < w; ++p) {
    st->sc[p] = kRowWords * static_cast<size_t>(st->send_count[p]);
    st->rc[p] = kRowWords * static_cast<size_t>(st->recv_count[p]);
    st->sd[p] = sent;
    st->rd[p] = received;
    sent += st->sc[p];
    received += st->rc[p];
  }
  const int64_t total = static_cast<int64_t>(received / kRowWords);
  if (total > capacity) return 1;
  if (kf_all_to_allv(ctx, send_rows, st->sc.data(), st->sd.data(), recv_rows, st->rc.data(),
                     st->rd.data(), KF_I32) != 0)
    return 1;
  const Outputs out = {static_cast<int32_t*>(o[0]->data), static_cast<int32_t*>(o[1]->data),
                       static_cast<int32_t*>(o[2]->data), static_cast<float*>(o[3]->data),
                       static_cast<float*>(o[4]->data),   static_cast<float*>(o[5]->data),
                       static_cast<float*>(o[6]->data),   static_cast<float*>(o[7]->data),
                       static_cast<int32_t*>(o[8]->data)};
  const int unpack_blocks = total > 0 ? static_cast<int>((total + kThreads - 1) / kThreads) : 1;
  Unpack<<<unpack_blocks, kThreads, 0, ctx->stream>>>(recv_rows, total, out);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return 0;
}
