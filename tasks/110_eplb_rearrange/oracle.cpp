// vLLM EPLB rearrangement of one layer's expert weights: row j of rank r ends
// with the old weights of the slot vLLM's move_to_buffer copies it from (its
// own row if unchanged, the first local row holding the expert, else the first
// row of the sender that get_ep_ranks_with_experts_batch's split assigns to r).
// The generator draws both maps from the trial seed, identical on every rank:
// E = P - R logical experts, R extra copies of distinct experts, in random
// slots; the new map keeps a share keep_pct / 100 of the extra copies and of the slots
// in place and redraws the rest.
#include "kforge/oracle.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace {

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t Var(const std::map<std::string, double>& vars, const char* name) {
  return static_cast<int64_t>(vars.at(name));
}

void Shuffle(std::vector<int64_t>& v, kforge::OracleRng& rng) {
  for (int64_t i = static_cast<int64_t>(v.size()) - 1; i > 0; --i)
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>(rng.Int(0, i))]);
}

struct Maps {
  std::vector<int64_t> old_map, new_map;
};

Maps MakeMaps(uint64_t trial_seed, int world, const std::map<std::string, double>& vars) {
  kforge::OracleRng rng(Mix(trial_seed ^ 0x65706c625f6d6170ull));
  const int64_t p = world * Var(vars, "Lp"), r = Var(vars, "R"), e = p - r;
  const double keep = vars.at("keep_pct") / 100.0;
  // R distinct experts get one extra copy each.
  std::vector<int64_t> experts(static_cast<size_t>(e));
  for (int64_t i = 0; i < e; ++i) experts[static_cast<size_t>(i)] = i;
  Shuffle(experts, rng);
  Maps m;
  for (int64_t i = 0; i < e; ++i) m.old_map.push_back(i);
  for (int64_t i = 0; i < r; ++i) m.old_map.push_back(experts[static_cast<size_t>(i)]);
  Shuffle(m.old_map, rng);
  // The extra copies (every occurrence after an expert's first): kept, or moved to an expert
  // that has no extra copy yet.
  m.new_map = m.old_map;
  std::vector<bool> seen(static_cast<size_t>(e), false), extra(static_cast<size_t>(e), false);
  std::vector<int64_t> redraw;
  for (int64_t i = 0; i < p; ++i) {
    const int64_t x = m.old_map[static_cast<size_t>(i)];
    if (!seen[static_cast<size_t>(x)]) {
      seen[static_cast<size_t>(x)] = true;
    } else if (rng.Uniform() < keep) {
      extra[static_cast<size_t>(x)] = true;
    } else {
      redraw.push_back(i);
    }
  }
  std::vector<int64_t> free_experts;
  for (int64_t x = 0; x < e; ++x)
    if (!extra[static_cast<size_t>(x)]) free_experts.push_back(x);
  Shuffle(free_experts, rng);
  for (size_t k = 0; k < redraw.size(); ++k)
    m.new_map[static_cast<size_t>(redraw[k])] = free_experts[k];
  // The slots that move: a random share 1 - keep, permuted among themselves.
  std::vector<int64_t> slots, values;
  for (int64_t i = 0; i < p; ++i) {
    if (rng.Uniform() < keep) continue;
    slots.push_back(i);
    values.push_back(m.new_map[static_cast<size_t>(i)]);
  }
  Shuffle(values, rng);
  for (size_t k = 0; k < slots.size(); ++k) m.new_map[static_cast<size_t>(slots[k])] = values[k];
  return m;
}

// vLLM's source of row j of rank r: {rank, row}.
std::pair<int, int64_t> SourceOf(const std::vector<int64_t>& old_map,
                                 const std::vector<int64_t>& new_map, int world, int64_t lp, int r,
                                 int64_t j) {
  const int64_t e = new_map[static_cast<size_t>(r * lp + j)];
  if (old_map[static_cast<size_t>(r * lp + j)] == e) return {r, j};
  auto first_row = [&](int q) -> int64_t {
    for (int64_t jj = 0; jj < lp; ++jj)
      if (old_map[static_cast<size_t>(q * lp + jj)] == e) return jj;
    return -1;
  };
  if (first_row(r) >= 0) return {r, first_row(r)};
  std::vector<int> senders, receivers;
  for (int q = 0; q < world; ++q) {
    bool had = false, has = false;
    for (int64_t jj = 0; jj < lp; ++jj) {
      had = had || old_map[static_cast<size_t>(q * lp + jj)] == e;
      has = has || new_map[static_cast<size_t>(q * lp + jj)] == e;
    }
    if (had) senders.push_back(q);
    if (has && !had) receivers.push_back(q);
  }
  const int64_t n = static_cast<int64_t>(receivers.size()) / static_cast<int64_t>(senders.size());
  const int64_t m = static_cast<int64_t>(senders.size()) * n;
  const int64_t i = std::find(receivers.begin(), receivers.end(), r) - receivers.begin();
  const int s = i < m ? senders[static_cast<size_t>(i / n)] : senders[static_cast<size_t>(i - m)];
  return {s, first_row(s)};
}

}  // namespace

KF_INPUT_GENERATOR(eplb_rearrange) {
  const Maps m = MakeMaps(gen.trial_seed, gen.world, gen.params);
  const std::vector<int64_t>& src = gen.input_name == "old_map" ? m.old_map : m.new_map;
  auto& v = gen.tensor->data;
  if (v.size() != src.size())
    return kforge::Error(kforge::ErrorKind::kHarness, "eplb_rearrange: a map is not W*Lp");
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(src[i]);
  return kforge::Status::Ok();
}

KF_ORACLE(eplb_rearrange) {
  const int w = io.world;
  const int64_t lp = static_cast<int64_t>(io.param("Lp"));
  std::vector<int64_t> old_map, new_map;
  for (double x : io.in(0, "old_map")) old_map.push_back(static_cast<int64_t>(x));
  for (double x : io.in(0, "new_map")) new_map.push_back(static_cast<int64_t>(x));
  if (static_cast<int64_t>(old_map.size()) != w * lp || new_map.size() != old_map.size())
    return kforge::Error(kforge::ErrorKind::kHarness, "eplb_rearrange: map shapes");
  for (const char* name : {"w13", "w2"}) {
    for (int r = 0; r < w; ++r) {
      auto out = io.out(r, name);
      const int64_t d = static_cast<int64_t>(out.size()) / lp;
      for (int64_t j = 0; j < lp; ++j) {
        const auto [s, row] = SourceOf(old_map, new_map, w, lp, r, j);
        if (row < 0) return kforge::Error(kforge::ErrorKind::kHarness, "eplb_rearrange: no source");
        auto in = io.in(s, name);
        std::copy(in.begin() + row * d, in.begin() + (row + 1) * d, out.begin() + j * d);
      }
    }
  }
  return kforge::Status::Ok();
}
