// The values of a task's inputs: a pure function of (trial seed, source rank,
// input index, element index), compiled for both the host (the oracle's view,
// inputs.cc) and the GPU (the harness worker generates the same bytes on the
// device, worker/device_ops.cu). An InputGen is plain data so that it can be
// passed to a kernel by value.
//
// Normal values are Irwin-Hall: the sum of 12 uniform 32-bit integers, centred
// and scaled by 2^-32 (mean 0, variance 1, support [-6, 6]). That is exact
// integer arithmetic, so host and device agree bit for bit where Box-Muller's
// log and cos would not.
#pragma once

#include <cstdint>

#include "task/element_codec.h"

namespace kforge::eval::gen {

inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// The splitmix64 finaliser: a bijective 64-bit mixer.
KF_HD uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One independent stream per (seed, source rank, input).
KF_HD uint64_t StreamKey(uint64_t seed, int source_rank, int input) {
  uint64_t k = Mix(seed ^ 0x6b666f7267652d69ULL);  // domain tag: inputs
  k = Mix(k + kGolden * (static_cast<uint64_t>(source_rank) + 1));
  return Mix(k + kGolden * (static_cast<uint64_t>(input) + 0x100));
}

// The i-th draw of a stream (counter-based: no state between elements).
KF_HD uint64_t Draw(uint64_t key, uint64_t i) { return Mix(key + (i + 1) * kGolden); }
// [0, 1) with 53 random bits: exact.
KF_HD double Unit(uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

// The stream of a normal input's per-column offsets: one per (seed, input),
// shared by every rank.
KF_HD uint64_t ColumnKey(uint64_t seed, int input) {
  return Mix(StreamKey(seed, 0, input) ^ 0x636f6c756d6e7321ULL);  // domain tag: columns
}

// Irwin-Hall(12) - 6 from draws 6i .. 6i+5: exact in doubles.
KF_HD double StandardNormal(uint64_t key, uint64_t i) {
  uint64_t s = 0;
  for (uint64_t k = 0; k < 6; ++k) {
    const uint64_t h = Draw(key, 6 * i + k);
    s += (h >> 32) + (h & 0xFFFFFFFFULL);
  }
  const int64_t centred = static_cast<int64_t>(s) - (int64_t{6} << 32);
  return static_cast<double>(centred) * 0x1.0p-32;
}

// A pseudo-random permutation of [0, n): a 4-round balanced Feistel network on
// the smallest even-bit domain >= n, cycle-walking values outside [0, n).
struct Feistel {
  uint64_t n = 0;
  int half = 1;
  uint64_t mask = 1;
  uint64_t keys[4] = {0, 0, 0, 0};

  KF_HD static Feistel Make(uint64_t key, uint64_t n) {
    Feistel f;
    f.n = n;
    int bits = 2;
    while (bits < 64 && (uint64_t{1} << bits) < n) ++bits;
    f.half = (bits + 1) / 2;
    f.mask = (uint64_t{1} << f.half) - 1;
    for (int r = 0; r < 4; ++r) f.keys[r] = Draw(key, static_cast<uint64_t>(r));
    return f;
  }
  KF_HD uint64_t Round(uint64_t x) const {
    uint64_t l = x >> half, r = x & mask;
    for (int k = 0; k < 4; ++k) {
      const uint64_t next = l ^ (Mix(r ^ keys[k]) & mask);
      l = r;
      r = next;
    }
    return (l << half) | r;
  }
  KF_HD uint64_t operator()(uint64_t x) const {
    do {
      x = Round(x);
    } while (x >= n);
    return x;
  }
};

enum : int { kNormal = 0, kUniform, kInt, kPermutation };

inline constexpr int kMaxDims = 8;
inline constexpr int kMaxPieces = 8;

// Everything one element's value needs.
struct InputGen {
  int kind = kNormal;
  int dtype = codec::kF32;
  double a = 0, b = 1;  // normal: mean, std; uniform: low, high
  // Normal and uniform with pieces: global elements [until[k-1], until[k])
  // take piece_a[k], piece_b[k] instead of a, b; the last piece takes the rest.
  int pieces = 0;
  uint64_t until[kMaxPieces] = {0};
  double piece_a[kMaxPieces] = {0}, piece_b[kMaxPieces] = {0};
  int64_t int_low = 0;  // int: [int_low, int_low + int_span)
  uint64_t int_span = 1;
  uint64_t key = 0;
  // Normal: every element of column c (global index g, c = g % column_len)
  // gets column_std * N(0, 1) from (column_key, c) added.
  double column_std = 0;
  uint64_t column_key = 0, column_len = 1;
  Feistel perm;  // permutation over the global tensor
  // A shard: this rank holds slice `shard_index` (of `shard_count`) along
  // local dimension `shard_dim` of one global tensor. Not sharded: the local
  // index is the element index.
  bool sharded = false;
  // > 0: after every element is filled, each row of this many elements (the
  // last dimension) is made distinct by MakeRowDistinct.
  uint64_t distinct_len = 0;
  int ndim = 0;
  int64_t local[kMaxDims] = {0};
  int shard_dim = 0;
  int64_t shard_index = 0, shard_count = 1;

  // The element index in the global tensor of local element j.
  KF_HD uint64_t GlobalIndex(uint64_t j) const {
    if (!sharded) return j;
    // Row-major: split j into (outer, d, inner) around shard_dim.
    uint64_t inner = 1;
    for (int k = shard_dim + 1; k < ndim; ++k) inner *= static_cast<uint64_t>(local[k]);
    const uint64_t dlen = static_cast<uint64_t>(local[shard_dim]);
    const uint64_t in = j % inner;
    const uint64_t d = (j / inner) % dlen;
    const uint64_t outer = j / (inner * dlen);
    const uint64_t gd = static_cast<uint64_t>(shard_index) * dlen + d;
    return (outer * (dlen * static_cast<uint64_t>(shard_count)) + gd) * inner + in;
  }

  KF_HD double Value(uint64_t g) const {
    double pa = a, pb = b;
    for (int k = 0; k < pieces; ++k) {
      if (g < until[k] || k + 1 == pieces) {
        pa = piece_a[k];
        pb = piece_b[k];
        break;
      }
    }
    switch (kind) {
      case kNormal: {
        const double v = codec::Add(pa, codec::Mul(pb, StandardNormal(key, g)));
        if (column_std == 0) return v;
        return codec::Add(v, codec::Mul(column_std, StandardNormal(column_key, g % column_len)));
      }
      case kUniform:
        return codec::Add(pa, codec::Mul(codec::Add(pb, -pa), Unit(Draw(key, g))));
      case kInt:
        return static_cast<double>(int_low + static_cast<int64_t>(Draw(key, g) % int_span));
      default:
        return static_cast<double>(perm(g));
    }
  }

  // Writes local element j.
  KF_HD void Fill(void* dst, uint64_t j) const {
    codec::Store(dst, dtype, j, Value(GlobalIndex(j)));
  }
};

// Moves element i of a floating tensor up by one step of its dtype (the next
// larger representable value): the stored bits are an IEEE sign and magnitude,
// so a positive value's bits grow by one and a negative one's shrink (-0 and
// +0 go to the smallest positive subnormal).
KF_HD void StepUp(void* data, int dt, uint64_t i) {
  const int bytes = codec::DtypeBytes(dt);
  unsigned char* p = static_cast<unsigned char*>(data) + i * static_cast<uint64_t>(bytes);
  uint64_t bits = 0;
  for (int b = 0; b < bytes; ++b) bits |= static_cast<uint64_t>(p[b]) << (8 * b);
  const uint64_t sign = uint64_t{1} << (8 * bytes - 1);
  if ((bits & ~sign) == 0) {
    bits = 1;
  } else if ((bits & sign) == 0) {
    bits += 1;
  } else {
    bits -= 1;
  }
  for (int b = 0; b < bytes; ++b) p[b] = static_cast<unsigned char>(bits >> (8 * b));
}

// Row `row` of `len` elements: every element, in order, moves up (StepUp)
// until no earlier element of the row has its value. Deterministic and the
// same on host and device, so both sides keep producing identical bytes; it
// changes only the rare duplicates (one step of the dtype each).
KF_HD void MakeRowDistinct(void* data, int dt, uint64_t row, uint64_t len) {
  const uint64_t first = row * len;
  for (uint64_t j = 1; j < len; ++j) {
    for (;;) {
      const double v = codec::Load(data, dt, first + j);
      bool taken = false;
      for (uint64_t i = 0; i < j && !taken; ++i) taken = codec::Load(data, dt, first + i) == v;
      if (!taken) break;
      StepUp(data, dt, first + j);
    }
  }
}

}  // namespace kforge::eval::gen
