// TorchRec KJTAllToAll (table-wise sharded sparse features): rank r receives
// the features it owns (F_r of them, consecutive in feature order) from every
// rank's KeyedJaggedTensor, recat to (feature, source rank, sample) order, with
// the global batch's strides. The generator makes each trial's KJTs: every
// rank's batch size (drawn once per trial, so that batch_size and lengths
// agree), lengths padded to their capacity with -1, and, with edge = 1, an
// empty batch, a rank receiving no ids and a feature with only zero lengths.
#include "kforge/oracle.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace {

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Table-wise key splits: rank d owns F_d consecutive features (task.toml).
struct Split {
  std::vector<int64_t> count;   // F_d
  std::vector<int64_t> offset;  // off_d; offset[W] = F
  std::vector<int> owner;       // owner[f]: the rank that owns feature f
};

Split MakeSplit(int world, int64_t nf, int64_t u) {
  Split s;
  s.offset.push_back(0);
  for (int d = 0; d < world; ++d) {
    const int64_t f = nf / world + (d < nf % world ? 1 : 0) + u * (d % 3);
    s.count.push_back(f);
    s.offset.push_back(s.offset.back() + f);
    for (int64_t k = 0; k < f; ++k) s.owner.push_back(d);
  }
  return s;
}

int64_t Var(const std::map<std::string, double>& vars, const char* name) {
  return static_cast<int64_t>(vars.at(name));
}

// What a trial decides for all ranks at once.
struct Plan {
  std::vector<int64_t> batch;  // b_s
  int silent = -1;             // edge: the rank whose features have no ids on any rank
  int64_t zero_feature = -1;   // edge: one more feature with only zero lengths
};

Plan MakePlan(uint64_t trial_seed, int world, const Split& split,
              const std::map<std::string, double>& vars) {
  kforge::OracleRng rng(Mix(trial_seed ^ 0x6b6a745f706c616eull));
  const int64_t big = Var(vars, "B"), vb = Var(vars, "vb");
  Plan p;
  for (int s = 0; s < world; ++s) p.batch.push_back(big - rng.Int(0, vb));
  if (Var(vars, "edge") != 0) {
    p.batch[static_cast<size_t>(rng.Int(0, world - 1))] = 0;
    p.silent = static_cast<int>(rng.Int(0, world - 1));
    std::vector<int64_t> candidates;  // features of another rank that owns at least two
    for (size_t f = 0; f < split.owner.size(); ++f) {
      const int d = split.owner[f];
      if (d != p.silent && split.count[static_cast<size_t>(d)] >= 2)
        candidates.push_back(static_cast<int64_t>(f));
    }
    if (!candidates.empty())
      p.zero_feature =
          candidates[static_cast<size_t>(rng.Int(0, static_cast<int64_t>(candidates.size()) - 1))];
  }
  return p;
}

}  // namespace

KF_INPUT_GENERATOR(torchrec_kjt_all2all) {
  const Split split = MakeSplit(gen.world, Var(gen.params, "nf"), Var(gen.params, "u"));
  const Plan plan = MakePlan(gen.trial_seed, gen.world, split, gen.params);
  const int64_t b = plan.batch[static_cast<size_t>(gen.rank)];
  auto& v = gen.tensor->data;
  if (gen.input_name == "batch_size") {
    v[0] = static_cast<double>(b);
  } else if (gen.input_name == "lengths") {
    const int64_t lmin = Var(gen.params, "lmin"), lmax = Var(gen.params, "lmax");
    const int64_t features = split.offset.back();
    if (static_cast<int64_t>(v.size()) < features * b)
      return kforge::Error(kforge::ErrorKind::kHarness, "lengths: capacity below F * batch");
    for (int64_t f = 0; f < features; ++f) {
      const bool empty =
          split.owner[static_cast<size_t>(f)] == plan.silent || f == plan.zero_feature;
      for (int64_t i = 0; i < b; ++i)
        v[static_cast<size_t>(f * b + i)] =
            empty ? 0.0 : static_cast<double>(gen.rng->Int(lmin, lmax));
    }
    for (size_t i = static_cast<size_t>(features * b); i < v.size(); ++i) v[i] = -1.0;
  } else {
    return kforge::Error(kforge::ErrorKind::kHarness, "torchrec_kjt_all2all: unknown input");
  }
  return kforge::Status::Ok();
}

KF_ORACLE(torchrec_kjt_all2all) {
  const int w = io.world;
  const Split split =
      MakeSplit(w, static_cast<int64_t>(io.param("nf")), static_cast<int64_t>(io.param("u")));
  const int64_t features = split.offset.back();
  const int64_t big = static_cast<int64_t>(io.param("B"));
  // Per source rank: its batch, and where each feature's ids start and how many there are.
  std::vector<int64_t> batch(static_cast<size_t>(w));
  std::vector<std::vector<int64_t>> start(static_cast<size_t>(w)), count(static_cast<size_t>(w));
  int64_t stride = 0;
  for (int s = 0; s < w; ++s) {
    const double bs = io.in(s, "batch_size")[0];
    if (!(bs >= 0) || bs != std::floor(bs) || bs > static_cast<double>(big))
      return kforge::Error(kforge::ErrorKind::kHarness, "a batch size outside [0, B]");
    const int64_t b = static_cast<int64_t>(bs);
    batch[static_cast<size_t>(s)] = b;
    stride += b;
    auto lengths = io.in(s, "lengths");
    const size_t ids = io.in(s, "values").size();
    int64_t at = 0;
    for (int64_t f = 0; f < features; ++f) {
      int64_t n = 0;
      for (int64_t i = 0; i < b; ++i) {
        const double l = lengths[static_cast<size_t>(f * b + i)];
        if (!(l >= 0) || l != std::floor(l))
          return kforge::Error(kforge::ErrorKind::kHarness, "a negative or fractional length");
        n += static_cast<int64_t>(l);
      }
      start[static_cast<size_t>(s)].push_back(at);
      count[static_cast<size_t>(s)].push_back(n);
      at += n;
    }
    if (static_cast<size_t>(at) > ids)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "the lengths sum past the values' capacity");
  }
  for (int r = 0; r < w; ++r) {
    const int64_t own = split.count[static_cast<size_t>(r)];
    auto recv_lengths = io.out(r, "recv_lengths");
    auto recv_values = io.out(r, "recv_values");
    size_t nl = 0, nv = 0;
    for (int64_t k = 0; k < own; ++k) {
      const int64_t f = split.offset[static_cast<size_t>(r)] + k;
      for (int s = 0; s < w; ++s) {
        const int64_t b = batch[static_cast<size_t>(s)];
        auto lengths = io.in(s, "lengths");
        auto values = io.in(s, "values");
        if (nl + static_cast<size_t>(b) > recv_lengths.size())
          return kforge::Error(kforge::ErrorKind::kHarness, "recv_lengths' capacity is too small");
        for (int64_t i = 0; i < b; ++i)
          recv_lengths[nl++] = lengths[static_cast<size_t>(f * b + i)];
        const int64_t from = start[static_cast<size_t>(s)][static_cast<size_t>(f)];
        const int64_t n = count[static_cast<size_t>(s)][static_cast<size_t>(f)];
        if (nv + static_cast<size_t>(n) > recv_values.size())
          return kforge::Error(kforge::ErrorKind::kHarness, "recv_values' capacity is too small");
        for (int64_t j = 0; j < n; ++j) recv_values[nv++] = values[static_cast<size_t>(from + j)];
      }
    }
    io.out(r, "stride")[0] = static_cast<double>(stride);
    auto per_rank = io.out(r, "stride_per_rank");
    for (int s = 0; s < w; ++s)
      per_rank[static_cast<size_t>(s)] = static_cast<double>(batch[static_cast<size_t>(s)]);
    io.out(r, "lengths_count")[0] = static_cast<double>(nl);
    io.out(r, "values_count")[0] = static_cast<double>(nv);
  }
  return kforge::Status::Ok();
}
