// gsplat's distributed packed projection: every rank's Gaussians projected into every rank's
// cameras (the torch path of fully_fused_projection, in fp64), the visible pairs sent to the
// camera's rank, ordered by (source rank, camera, Gaussian).
//
// The generator builds one scene per trial (the same on every rank, from the trial seed): 8
// axis-aligned boxes (objects) in a ball of radius 5, and every rank's C cameras, each aimed at
// one box. A camera is kept only if it sees every box wholly inside its image (every corner at
// least kInsidePx inside, depth >= kMinDepth), wholly off the image by more than the largest
// radius a Gaussian of that box can have, or wholly behind it; otherwise it is drawn again.
// Gaussians lie inside the boxes, so fp32 geometry can never move a pair across a culling
// threshold. The oracle checks that promise on every pair and refuses the trial if it fails.
#include "kforge/oracle.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using Vec3 = std::array<double, 3>;

constexpr int kBoxes = 8;
constexpr double kMaxScale = 0.05;  // task.toml: scales are uniform in [0.005, 0.05)
constexpr double kEps2d = 0.3;      // task.toml [params]
constexpr double kNear = 0.01;
constexpr double kFar = 1e10;
constexpr double kMinDepth = 0.5;   // a seen box's nearest corner
constexpr double kBehind = -0.1;    // a box behind the camera: its farthest corner
constexpr double kInsidePx = 1.0;   // a seen box's corners are this far inside the image
constexpr double kOutsidePx = 1.0;  // an unseen box is this far past an edge, plus the radius
constexpr int kTries = 20000;       // camera draws before giving up on a seeing camera

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double Dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
Vec3 Cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
Vec3 Normalized(const Vec3& a) {
  const double n = std::sqrt(Dot(a, a));
  return {a[0] / n, a[1] / n, a[2] / n};
}
Vec3 RandomDirection(kforge::OracleRng& rng) {
  for (;;) {
    const Vec3 v = {rng.Normal(), rng.Normal(), rng.Normal()};
    if (Dot(v, v) > 1e-6) return Normalized(v);
  }
}

struct Box {
  Vec3 center, half;
};

struct Scene {
  std::vector<Box> boxes;  // kBoxes seen ones, then (edge = 1) the box nobody sees
  int blind_rank = -1;     // edge: this rank's cameras look away from everything
  int unseen_rank = -1;    // edge: this rank's Gaussians all lie in the last box
};

struct Camera {
  double r[3][3];  // world-to-camera rotation (rows: right, down, forward)
  Vec3 t;
  double fx, fy, cx, cy;
};

Scene MakeScene(uint64_t trial_seed, int world, bool edge) {
  kforge::OracleRng rng(Mix(trial_seed ^ 0x6773706c61747363ull));
  Scene s;
  while (static_cast<int>(s.boxes.size()) < kBoxes) {
    const Vec3 c = {10 * rng.Uniform() - 5, 10 * rng.Uniform() - 5, 10 * rng.Uniform() - 5};
    if (Dot(c, c) > 25) continue;
    bool apart = true;
    for (const Box& b : s.boxes) {
      const Vec3 d = {c[0] - b.center[0], c[1] - b.center[1], c[2] - b.center[2]};
      apart = apart && Dot(d, d) >= 2.2 * 2.2;
    }
    if (!apart) continue;
    s.boxes.push_back(
        {c, {0.3 + 0.5 * rng.Uniform(), 0.3 + 0.5 * rng.Uniform(), 0.3 + 0.5 * rng.Uniform()}});
  }
  if (edge) {
    const Vec3 d = RandomDirection(rng);
    s.boxes.push_back({{60 * d[0], 60 * d[1], 60 * d[2]}, {0.5, 0.5, 0.5}});
    s.blind_rank = static_cast<int>(rng.Int(0, world - 1));
    s.unseen_rank = static_cast<int>(rng.Int(0, world - 1));
  }
  return s;
}

Vec3 ToCamera(const Camera& cam, const Vec3& p) {
  Vec3 q;
  for (int i = 0; i < 3; ++i) q[i] = Dot({cam.r[i][0], cam.r[i][1], cam.r[i][2]}, p) + cam.t[i];
  return q;
}

// gsplat's view-tangent limits (the clamp of the Jacobian).
struct Limits {
  double xp, xn, yp, yn;
};
Limits LimitsOf(const Camera& cam, double width, double height) {
  const double tan_x = 0.5 * width / cam.fx, tan_y = 0.5 * height / cam.fy;
  return {(width - cam.cx) / cam.fx + 0.3 * tan_x, cam.cx / cam.fx + 0.3 * tan_x,
          (height - cam.cy) / cam.fy + 0.3 * tan_y, cam.cy / cam.fy + 0.3 * tan_y};
}

// The largest radius (x, y) a Gaussian of scale <= kMaxScale can have at depth >= z: the
// Jacobian's row has norm^2 (f / z)^2 (1 + (tx / z)^2), tx / z within the limits, and the
// covariance's largest eigenvalue is the largest scale squared.
std::array<double, 2> MaxRadius(const Camera& cam, const Limits& lim, double z) {
  const double lx = std::max(lim.xp, lim.xn), ly = std::max(lim.yp, lim.yn);
  const double ax = (cam.fx / z) * (cam.fx / z) * (1 + lx * lx) * kMaxScale * kMaxScale;
  const double ay = (cam.fy / z) * (cam.fy / z) * (1 + ly * ly) * kMaxScale * kMaxScale;
  return {std::ceil(3.33 * std::sqrt(ax + kEps2d)) + 1,
          std::ceil(3.33 * std::sqrt(ay + kEps2d)) + 1};
}

enum class Sight { kSeen, kUnseen, kAmbiguous };

// How the camera sees the box. Under a perspective projection with every corner in front, the
// box's image is the convex hull of its corners' images, so their bounding box bounds it.
Sight SightOf(const Camera& cam, const Box& b, double width, double height) {
  double zmin = 1e300, zmax = -1e300, umin = 1e300, umax = -1e300, vmin = 1e300, vmax = -1e300;
  for (int k = 0; k < 8; ++k) {
    const Vec3 p = {b.center[0] + ((k & 1) ? b.half[0] : -b.half[0]),
                    b.center[1] + ((k & 2) ? b.half[1] : -b.half[1]),
                    b.center[2] + ((k & 4) ? b.half[2] : -b.half[2])};
    const Vec3 q = ToCamera(cam, p);
    zmin = std::min(zmin, q[2]);
    zmax = std::max(zmax, q[2]);
    if (q[2] > 0) {
      umin = std::min(umin, cam.fx * q[0] / q[2] + cam.cx);
      umax = std::max(umax, cam.fx * q[0] / q[2] + cam.cx);
      vmin = std::min(vmin, cam.fy * q[1] / q[2] + cam.cy);
      vmax = std::max(vmax, cam.fy * q[1] / q[2] + cam.cy);
    }
  }
  if (zmax <= kBehind) return Sight::kUnseen;
  if (zmin < kMinDepth) return Sight::kAmbiguous;
  if (umin >= kInsidePx && umax <= width - kInsidePx && vmin >= kInsidePx &&
      vmax <= height - kInsidePx)
    return Sight::kSeen;
  const auto r = MaxRadius(cam, LimitsOf(cam, width, height), zmin);
  if (umin >= width + r[0] + kOutsidePx || umax <= -r[0] - kOutsidePx ||
      vmin >= height + r[1] + kOutsidePx || vmax <= -r[1] - kOutsidePx)
    return Sight::kUnseen;
  return Sight::kAmbiguous;
}

// A camera at `eye` looking along `forward` (OpenCV axes: x right, y down, z forward).
Camera LookAlong(const Vec3& eye, const Vec3& forward, const Vec3& up_hint) {
  const Vec3 f = Normalized(forward);
  const Vec3 x = Normalized(Cross(f, up_hint));
  const Vec3 y = Cross(f, x);
  Camera cam{};
  for (int j = 0; j < 3; ++j) {
    cam.r[0][j] = x[j];
    cam.r[1][j] = y[j];
    cam.r[2][j] = f[j];
  }
  for (int i = 0; i < 3; ++i) cam.t[i] = -Dot({cam.r[i][0], cam.r[i][1], cam.r[i][2]}, eye);
  return cam;
}

// Camera c of rank `rank`: aimed at a random box from 2.5 .. 7 away, with a random roll and
// focal length, redrawn until every box is unambiguous. A blind rank's cameras (and, should no
// draw succeed, any camera) sit 25 away from the centre looking outwards, with every box behind
// or off the image.
kforge::Result<Camera> MakeCamera(const Scene& s, uint64_t trial_seed, int rank, int c,
                                  double width, double height) {
  kforge::OracleRng rng(Mix(
      trial_seed ^
      Mix(0x63616d6572610000ull + static_cast<uint64_t>(rank) * 4096 + static_cast<uint64_t>(c))));
  auto intrinsics = [&](Camera& cam) {
    cam.fx = width * (0.6 + 0.5 * rng.Uniform());
    cam.fy = cam.fx * (0.97 + 0.06 * rng.Uniform());
    cam.cx = width * (0.45 + 0.1 * rng.Uniform());
    cam.cy = height * (0.45 + 0.1 * rng.Uniform());
  };
  auto all = [&](const Camera& cam, bool need_target, int target) {
    for (size_t k = 0; k < s.boxes.size(); ++k) {
      const Sight sight = SightOf(cam, s.boxes[k], width, height);
      if (sight == Sight::kAmbiguous) return false;
      if (need_target && static_cast<int>(k) == target && sight != Sight::kSeen) return false;
    }
    return true;
  };
  if (rank != s.blind_rank) {
    for (int i = 0; i < kTries; ++i) {
      const int target = static_cast<int>(rng.Int(0, kBoxes - 1));
      const Box& b = s.boxes[static_cast<size_t>(target)];
      const Vec3 dir = RandomDirection(rng);
      const double dist = 2.5 + 4.5 * rng.Uniform();
      const Vec3 eye = {b.center[0] + dist * dir[0], b.center[1] + dist * dir[1],
                        b.center[2] + dist * dir[2]};
      const Vec3 aim = {b.center[0] + 0.4 * (rng.Uniform() - 0.5) - eye[0],
                        b.center[1] + 0.4 * (rng.Uniform() - 0.5) - eye[1],
                        b.center[2] + 0.4 * (rng.Uniform() - 0.5) - eye[2]};
      const Vec3 up = RandomDirection(rng);
      if (std::fabs(Dot(Normalized(aim), up)) > 0.95) continue;
      Camera cam = LookAlong(eye, aim, up);
      intrinsics(cam);
      if (all(cam, true, target)) return cam;
    }
  }
  for (int i = 0; i < kTries; ++i) {
    const Vec3 dir = RandomDirection(rng);
    const Vec3 up = RandomDirection(rng);
    if (std::fabs(Dot(dir, up)) > 0.95) continue;
    Camera cam = LookAlong({25 * dir[0], 25 * dir[1], 25 * dir[2]}, dir, up);
    intrinsics(cam);
    if (all(cam, false, -1)) return cam;
  }
  return kforge::Error(kforge::ErrorKind::kHarness, "gsplat: no camera could be placed");
}

// One (Gaussian, camera) pair, as gsplat's torch projection computes it.
struct Projected {
  bool visible;
  double depth, u, v, conic[3];
  double radius[2];
  std::string doubt;  // non-empty: the pair is near a culling threshold (a generator bug)
};

// The Gaussian's world covariance: Rq diag(s)^2 Rq^T, Rq from the normalised quaternion.
void Covariance(const double* quat, const double* scale, double sigma[3][3]) {
  const double n =
      std::sqrt(quat[0] * quat[0] + quat[1] * quat[1] + quat[2] * quat[2] + quat[3] * quat[3]);
  const double w = quat[0] / n, x = quat[1] / n, y = quat[2] / n, z = quat[3] / n;
  const double rq[3][3] = {{1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)},
                           {2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)},
                           {2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)}};
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double acc = 0;
      for (int k = 0; k < 3; ++k) acc += rq[i][k] * scale[k] * scale[k] * rq[j][k];
      sigma[i][j] = acc;
    }
}

Projected Project(const double* mean, const double sigma[3][3], const Camera& cam, double width,
                  double height) {
  const double eps2d = kEps2d, near = kNear, far = kFar;
  Projected out{};
  const Vec3 p = ToCamera(cam, {mean[0], mean[1], mean[2]});
  double sc[3][3], tmp[3][3];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double acc = 0;
      for (int k = 0; k < 3; ++k) acc += cam.r[i][k] * sigma[k][j];
      tmp[i][j] = acc;
    }
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      double acc = 0;
      for (int k = 0; k < 3; ++k) acc += tmp[i][k] * cam.r[j][k];
      sc[i][j] = acc;
    }
  const double pz = p[2];
  const Limits lim = LimitsOf(cam, width, height);
  const double tx = pz * std::clamp(p[0] / pz, -lim.xn, lim.xp);
  const double ty = pz * std::clamp(p[1] / pz, -lim.yn, lim.yp);
  const double j[2][3] = {{cam.fx / pz, 0, -cam.fx * tx / (pz * pz)},
                          {0, cam.fy / pz, -cam.fy * ty / (pz * pz)}};
  double cov[2][2];
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      double acc = 0;
      for (int k = 0; k < 3; ++k)
        for (int l = 0; l < 3; ++l) acc += j[a][k] * sc[k][l] * j[b][l];
      cov[a][b] = acc;
    }
  const double a = cov[0][0] + eps2d, b = 0.5 * (cov[0][1] + cov[1][0]), d = cov[1][1] + eps2d;
  const double det = std::max(a * d - b * b, 1e-10);
  out.depth = pz;
  out.u = cam.fx * p[0] / pz + cam.cx;
  out.v = cam.fy * p[1] / pz + cam.cy;
  out.conic[0] = d / det;
  out.conic[1] = -b / det;
  out.conic[2] = a / det;
  out.radius[0] = std::ceil(3.33 * std::sqrt(a));
  out.radius[1] = std::ceil(3.33 * std::sqrt(d));
  const bool in_depth = pz > near && pz < far;
  out.visible = in_depth && out.u + out.radius[0] > 0 && out.u - out.radius[0] < width &&
                out.v + out.radius[1] > 0 && out.v - out.radius[1] < height;
  // The generator's promise: a margin that fp32 rounding cannot cross.
  const double rx = out.radius[0] + 1, ry = out.radius[1] + 1;
  const bool clearly_in = pz >= kMinDepth / 2 && out.u >= 0.5 && out.u <= width - 0.5 &&
                          out.v >= 0.5 && out.v <= height - 0.5;
  const bool clearly_out =
      pz <= kBehind / 2 ||
      (pz >= kMinDepth / 2 && (out.u >= width + rx + 0.5 || out.u <= -rx - 0.5 ||
                               out.v >= height + ry + 0.5 || out.v <= -ry - 0.5));
  if (out.visible ? !clearly_in : !clearly_out) out.doubt = "a pair near a culling threshold";
  return out;
}

}  // namespace

KF_INPUT_GENERATOR(gsplat_3d_gaussian_splatting) {
  const bool edge = gen.params.at("edge") != 0;
  const double width = gen.params.at("width"), height = gen.params.at("height");
  const Scene scene = MakeScene(gen.trial_seed, gen.world, edge);
  auto& data = gen.tensor->data;
  if (gen.input_name == "means") {
    const size_t n = data.size() / 3;
    for (size_t i = 0; i < n; ++i) {
      const size_t k = gen.rank == scene.unseen_rank
                           ? scene.boxes.size() - 1
                           : static_cast<size_t>(gen.rng->Int(0, kBoxes - 1));
      const Box& b = scene.boxes[k];
      for (int a = 0; a < 3; ++a)
        data[3 * i + static_cast<size_t>(a)] =
            b.center[a] + b.half[a] * (2 * gen.rng->Uniform() - 1);
    }
    return kforge::Status::Ok();
  }
  if (gen.input_name != "viewmats" && gen.input_name != "Ks")
    return kforge::Error(kforge::ErrorKind::kHarness, "gsplat: unknown custom input");
  const bool view = gen.input_name == "viewmats";
  const int cameras = static_cast<int>(data.size() / (view ? 16 : 9));
  for (int c = 0; c < cameras; ++c) {
    KF_ASSIGN_OR_RETURN(Camera cam, MakeCamera(scene, gen.trial_seed, gen.rank, c, width, height));
    double* m = data.data() + static_cast<size_t>(c) * (view ? 16 : 9);
    if (view) {
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) m[4 * i + j] = cam.r[i][j];
        m[4 * i + 3] = cam.t[i];
      }
      m[12] = m[13] = m[14] = 0;
      m[15] = 1;
    } else {
      const double k[9] = {cam.fx, 0, cam.cx, 0, cam.fy, cam.cy, 0, 0, 1};
      std::copy(k, k + 9, m);
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(gsplat_3d_gaussian_splatting) {
  const int w = io.world;
  const double width = io.param("width"), height = io.param("height");
  if (io.param("eps2d") != kEps2d || io.param("near") != kNear || io.param("far") != kFar)
    return kforge::Error(kforge::ErrorKind::kHarness, "gsplat: [params] differ from oracle.cpp");
  const int cams = static_cast<int>(io.param("C"));
  // Per source rank: its Gaussians' covariances; per rank: its cameras (as given, in fp32).
  std::vector<std::vector<std::array<double, 9>>> sigma(static_cast<size_t>(w));
  std::vector<std::vector<Camera>> camera(static_cast<size_t>(w));
  std::vector<int64_t> offset(static_cast<size_t>(w) + 1, 0);
  for (int s = 0; s < w; ++s) {
    auto quats = io.in(s, "quats");
    auto scales = io.in(s, "scales");
    const size_t n = io.in(s, "means").size() / 3;
    offset[static_cast<size_t>(s) + 1] = offset[static_cast<size_t>(s)] + static_cast<int64_t>(n);
    for (size_t i = 0; i < n; ++i) {
      if (scales[3 * i] > kMaxScale || scales[3 * i + 1] > kMaxScale ||
          scales[3 * i + 2] > kMaxScale)
        return kforge::Error(kforge::ErrorKind::kHarness, "gsplat: a scale above kMaxScale");
      double sg[3][3];
      Covariance(&quats[4 * i], &scales[3 * i], sg);
      std::array<double, 9> flat;
      for (int k = 0; k < 9; ++k) flat[static_cast<size_t>(k)] = sg[k / 3][k % 3];
      sigma[static_cast<size_t>(s)].push_back(flat);
    }
    auto vm = io.in(s, "viewmats");
    auto ks = io.in(s, "Ks");
    for (int c = 0; c < cams; ++c) {
      Camera cam{};
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) cam.r[i][j] = vm[16 * c + 4 * i + j];
        cam.t[i] = vm[16 * c + 4 * i + 3];
      }
      cam.fx = ks[9 * c + 0];
      cam.cx = ks[9 * c + 2];
      cam.fy = ks[9 * c + 4];
      cam.cy = ks[9 * c + 5];
      camera[static_cast<size_t>(s)].push_back(cam);
    }
  }
  std::vector<std::string> doubt(static_cast<size_t>(w));
  kforge::OracleParallelFor(w, [&](int64_t begin, int64_t end) {
    for (int r = static_cast<int>(begin); r < end; ++r) {
      auto cam_ids = io.out(r, "camera_ids");
      auto gids = io.out(r, "gaussian_ids");
      auto radii = io.out(r, "radii");
      auto means2d = io.out(r, "means2d");
      auto depths = io.out(r, "depths");
      auto conics = io.out(r, "conics");
      auto opac = io.out(r, "out_opacities");
      auto colors = io.out(r, "out_colors");
      size_t row = 0;
      for (int s = 0; s < w; ++s) {
        auto means = io.in(s, "means");
        auto opacities = io.in(s, "opacities");
        auto col = io.in(s, "colors");
        const auto& sg = sigma[static_cast<size_t>(s)];
        for (int c = 0; c < cams; ++c) {
          const Camera& cam = camera[static_cast<size_t>(r)][static_cast<size_t>(c)];
          for (size_t i = 0; i < sg.size(); ++i) {
            double m[3][3];
            for (int k = 0; k < 9; ++k) m[k / 3][k % 3] = sg[i][static_cast<size_t>(k)];
            const Projected p = Project(&means[3 * i], m, cam, width, height);
            if (!p.doubt.empty()) doubt[static_cast<size_t>(r)] = p.doubt;
            if (!p.visible) continue;
            if (row >= cam_ids.size()) {
              doubt[static_cast<size_t>(r)] = "more rows than the capacity";
              return;
            }
            cam_ids[row] = c;
            gids[row] =
                static_cast<double>(offset[static_cast<size_t>(s)] + static_cast<int64_t>(i));
            radii[2 * row] = p.radius[0];
            radii[2 * row + 1] = p.radius[1];
            means2d[2 * row] = p.u;
            means2d[2 * row + 1] = p.v;
            depths[row] = p.depth;
            for (int k = 0; k < 3; ++k) {
              conics[3 * row + static_cast<size_t>(k)] = p.conic[k];
              colors[3 * row + static_cast<size_t>(k)] = col[3 * i + static_cast<size_t>(k)];
            }
            opac[row] = opacities[i];
            ++row;
          }
        }
      }
      io.out(r, "n_vis")[0] = static_cast<double>(row);
    }
  });
  for (const std::string& d : doubt)
    if (!d.empty()) return kforge::Error(kforge::ErrorKind::kHarness, "gsplat: " + d);
  return kforge::Status::Ok();
}
