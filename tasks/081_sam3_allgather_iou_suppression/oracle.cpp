// fp64 oracle for SAM 3's all-gather + IoU suppression, and the generator of the mask logits.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace {

// Objects of rank p: m + p % 3, where m = c_r - r % 3 for any rank r.
int64_t CountOf(int64_t m, int p) { return m + p % 3; }

uint64_t Mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double Unit(uint64_t x) { return static_cast<double>(x >> 11) * 0x1.0p-53; }  // [0, 1)

struct Box {
  int64_t y0, y1, x0, x1;  // [y0, y1) x [x0, x1), possibly empty after clipping
};

}  // namespace

// Mask logits: the C masks of all ranks show ~C/2 objects (boxes), so most objects appear in
// several masks, usually on different ranks (a duplicate detection: what the suppression is
// for). The objects and each mask's object, jitter and pixels are functions of the trial seed and
// the global mask index, so every rank draws its own slice of one consistent scene. Inside its box
// a mask's logit is +0.25 .. +4.25, with ~3% holes; outside it is -0.25 .. -8.25.
KF_INPUT_GENERATOR(sam3_allgather_iou_suppression) {
  if (gen.input_name != "masks") {
    return kforge::Status(kforge::ErrorKind::kInvalidInput,
                          "sam3_allgather_iou_suppression: only masks is custom");
  }
  const auto& shape = gen.tensor->shape;
  const int64_t count = shape[0], mh = shape[1], mw = shape[2];
  const int64_t m = count - gen.rank % 3;
  int64_t total = 0, off = 0;
  for (int p = 0; p < gen.world; ++p) {
    if (p == gen.rank) off = total;
    total += CountOf(m, p);
  }
  const int64_t objects = std::max<int64_t>(1, total / 2);
  const uint64_t scene = Mix(gen.trial_seed ^ 0x5a4d3353636e6521ull);
  auto box_of = [&](int64_t g) {
    const uint64_t s = Mix(scene ^ Mix(static_cast<uint64_t>(g) + 1));
    const int64_t obj = static_cast<int64_t>(Mix(s ^ 1) % static_cast<uint64_t>(objects));
    const uint64_t o = Mix(scene + 0x1000 + static_cast<uint64_t>(obj));
    // The object: a box of 15% .. 50% of each side, centred anywhere in the image.
    const double oh = mh * (0.15 + 0.35 * Unit(Mix(o ^ 1)));
    const double ow = mw * (0.15 + 0.35 * Unit(Mix(o ^ 2)));
    const double cy = mh * Unit(Mix(o ^ 3)), cx = mw * Unit(Mix(o ^ 4));
    // This mask's view of it: centre moved by up to 15% of the size, size scaled by 0.9 .. 1.1.
    const double dy = oh * (0.3 * Unit(Mix(s ^ 2)) - 0.15);
    const double dx = ow * (0.3 * Unit(Mix(s ^ 3)) - 0.15);
    const double h = oh * (0.9 + 0.2 * Unit(Mix(s ^ 4)));
    const double w = ow * (0.9 + 0.2 * Unit(Mix(s ^ 5)));
    Box b;
    b.y0 = std::clamp<int64_t>(std::llround(cy + dy - h / 2), 0, mh);
    b.y1 = std::clamp<int64_t>(std::llround(cy + dy + h / 2), 0, mh);
    b.x0 = std::clamp<int64_t>(std::llround(cx + dx - w / 2), 0, mw);
    b.x1 = std::clamp<int64_t>(std::llround(cx + dx + w / 2), 0, mw);
    return std::pair<Box, uint64_t>(b, s);
  };
  auto& data = gen.tensor->data;
  for (int64_t j = 0; j < count; ++j) {
    const auto [b, s] = box_of(off + j);
    for (int64_t y = 0; y < mh; ++y) {
      for (int64_t x = 0; x < mw; ++x) {
        const uint64_t h = Mix(s ^ (static_cast<uint64_t>(y * mw + x) << 8));
        const double u = Unit(h);
        const bool inside = y >= b.y0 && y < b.y1 && x >= b.x0 && x < b.x1;
        const bool hole = (h & 0xff) < 8;  // ~3%
        data[static_cast<size_t>((j * mh + y) * mw + x)] =
            inside && !hole ? 0.25 + 4.0 * u : -(0.25 + 8.0 * u);
      }
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(sam3_allgather_iou_suppression) {
  const int world = io.world;
  const auto& ms = io.in_shape(0, "masks");
  const int64_t m = ms[0], hw = ms[1] * ms[2];
  std::vector<double> gathered, scores;
  for (int p = 0; p < world; ++p) {
    auto mk = io.in(p, "masks");
    auto sc = io.in(p, "scores");
    if (static_cast<int64_t>(sc.size()) != CountOf(m, p) ||
        static_cast<int64_t>(mk.size()) != CountOf(m, p) * hw) {
      return kforge::Status(kforge::ErrorKind::kInvalidInput,
                            "sam3_allgather_iou_suppression: rank shapes are not m + r % 3");
    }
    gathered.insert(gathered.end(), mk.begin(), mk.end());
    scores.insert(scores.end(), sc.begin(), sc.end());
  }
  const int64_t total = static_cast<int64_t>(scores.size());
  auto last = io.in(0, "last_occluded");
  if (static_cast<int64_t>(last.size()) != total) {
    return kforge::Status(kforge::ErrorKind::kInvalidInput,
                          "sam3_allgather_iou_suppression: last_occluded is not [C]");
  }
  std::vector<uint8_t> bin(static_cast<size_t>(total * hw));
  std::vector<int64_t> area(static_cast<size_t>(total), 0);
  for (int64_t a = 0; a < total; ++a)
    for (int64_t i = 0; i < hw; ++i) {
      bin[static_cast<size_t>(a * hw + i)] = gathered[static_cast<size_t>(a * hw + i)] > 0;
      area[static_cast<size_t>(a)] += bin[static_cast<size_t>(a * hw + i)];
    }
  std::vector<uint8_t> suppressed(static_cast<size_t>(total), 0);
  kforge::OracleParallelFor(total, [&](int64_t begin, int64_t end) {
    for (int64_t a = begin; a < end; ++a) {
      for (int64_t b = 0; b < total && !suppressed[static_cast<size_t>(a)]; ++b) {
        if (b == a || !(last[a] > last[b] && last[b] > -1)) continue;
        int64_t inter = 0;
        for (int64_t i = 0; i < hw; ++i)
          inter += bin[static_cast<size_t>(a * hw + i)] & bin[static_cast<size_t>(b * hw + i)];
        const int64_t uni = std::max<int64_t>(
            area[static_cast<size_t>(a)] + area[static_cast<size_t>(b)] - inter, 1);
        if (10 * inter >= 7 * uni) suppressed[static_cast<size_t>(a)] = 1;
      }
    }
  });
  for (int r = 0; r < world; ++r) {
    auto mo = io.out(r, "masks_out");
    auto so = io.out(r, "scores_out");
    auto su = io.out(r, "suppressed");
    for (int64_t a = 0; a < total; ++a) {
      const bool s = suppressed[static_cast<size_t>(a)];
      for (int64_t i = 0; i < hw; ++i)
        mo[a * hw + i] = s ? -10.0 : gathered[static_cast<size_t>(a * hw + i)];
      so[a] = scores[static_cast<size_t>(a)];
      su[a] = s ? 1.0 : 0.0;
    }
  }
  return kforge::Status::Ok();
}
