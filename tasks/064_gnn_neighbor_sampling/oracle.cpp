// Distributed 2-hop neighbour sampling (PyG-style, first-k): every rank
// samples its own seeds' subgraph, asking each node's owner for its first k
// neighbours, keeps the new nodes in first-seen order and relabels the edges
// to positions in its node list.
//
// The generator draws one graph per trial, the same for every rank: a
// partition of the nodes into contiguous ranges (cuts moved at random from
// their even places, optionally one empty range), heavy-tailed degrees
// (a pure function of the trial seed and the node id, trimmed where a rank's
// edges would pass csc_row's capacity) and from them each rank's csc_colptr
// slice. The neighbour ids (`csc_row`) are the harness's uniform integers, per rank.
#include "kforge/oracle.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
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

// cuts[o] .. cuts[o + 1] - 1 are rank o's nodes (cuts[0] = 0, cuts[W] = nodes).
std::vector<int64_t> MakeCuts(uint64_t trial_seed, int world,
                              const std::map<std::string, double>& vars) {
  const int64_t nodes = Var(vars, "nodes");
  const double jit = static_cast<double>(Var(vars, "jit")) / 100.0;
  kforge::OracleRng rng(Mix(trial_seed ^ 0x6e62725f63757473ull));
  std::vector<int64_t> cuts(static_cast<size_t>(world) + 1, 0);
  const double share = static_cast<double>(nodes) / world;
  for (int o = 1; o < world; ++o) {
    const double at = o * share + (2.0 * rng.Uniform() - 1.0) * jit * share;
    cuts[static_cast<size_t>(o)] = std::clamp<int64_t>(std::llround(at), 0, nodes);
  }
  cuts[static_cast<size_t>(world)] = nodes;
  std::sort(cuts.begin() + 1, cuts.end() - 1);
  if (Var(vars, "empty") != 0) {
    const int q = static_cast<int>(rng.Int(0, world - 1));
    if (q < world - 1)
      cuts[static_cast<size_t>(q) + 1] = cuts[static_cast<size_t>(q)];
    else
      cuts[static_cast<size_t>(q)] = nodes;
  }
  return cuts;
}

// The global colptr: degrees floor(deg * (u^-1/2 - 1)) up to dmax, u uniform in
// (0, 1] from (trial seed, node), trimmed to what is left of the owner's capacity.
std::vector<int64_t> MakeGlobalColptr(uint64_t trial_seed, const std::vector<int64_t>& cuts,
                                      const std::map<std::string, double>& vars) {
  const int64_t nodes = Var(vars, "nodes"), dmax = Var(vars, "dmax"), ecap = Var(vars, "ecap");
  const double deg = static_cast<double>(Var(vars, "deg"));
  const uint64_t key = Mix(trial_seed ^ 0x6e62725f64656773ull);
  std::vector<int64_t> colptr(static_cast<size_t>(nodes) + 1, 0);
  for (size_t o = 0; o + 1 < cuts.size(); ++o) {
    int64_t used = 0;
    for (int64_t v = cuts[o]; v < cuts[o + 1]; ++v) {
      const uint64_t h = Mix(key + static_cast<uint64_t>(v + 1) * 0x9e3779b97f4a7c15ull);
      const double u = static_cast<double>((h >> 11) + 1) * 0x1.0p-53;
      const double x = deg * (1.0 / std::sqrt(u) - 1.0);
      int64_t d = x >= static_cast<double>(dmax) ? dmax : static_cast<int64_t>(x);
      d = std::min(d, ecap - used);
      used += d;
      colptr[static_cast<size_t>(v) + 1] = colptr[static_cast<size_t>(v)] + d;
    }
  }
  return colptr;
}

// S distinct nodes, in random order (Floyd's sampling, then a shuffle).
void MakeSeeds(kforge::OracleRng& rng, int64_t nodes, std::vector<double>& out) {
  const int64_t s = static_cast<int64_t>(out.size());
  std::unordered_set<int64_t> chosen;
  std::vector<int64_t> seeds;
  for (int64_t j = nodes - s; j < nodes; ++j) {
    int64_t t = rng.Int(0, j);
    if (chosen.count(t) != 0) t = j;
    chosen.insert(t);
    seeds.push_back(t);
  }
  for (int64_t i = s - 1; i > 0; --i)
    std::swap(seeds[static_cast<size_t>(i)], seeds[static_cast<size_t>(rng.Int(0, i))]);
  for (size_t i = 0; i < seeds.size(); ++i) out[i] = static_cast<double>(seeds[i]);
}

kforge::Status Bad(const char* what) { return kforge::Error(kforge::ErrorKind::kHarness, what); }

}  // namespace

KF_INPUT_GENERATOR(gnn_neighbor_sampling) {
  const int64_t nodes = Var(gen.params, "nodes");
  auto& v = gen.tensor->data;
  if (gen.input_name == "seeds") {
    if (static_cast<int64_t>(v.size()) > nodes) return Bad("seeds: more seeds than nodes");
    MakeSeeds(*gen.rng, nodes, v);
    return kforge::Status::Ok();
  }
  const std::vector<int64_t> cuts = MakeCuts(gen.trial_seed, gen.world, gen.params);
  if (gen.input_name == "node_to_rank") {
    for (size_t o = 0; o + 1 < cuts.size(); ++o)
      for (int64_t n = cuts[o]; n < cuts[o + 1]; ++n)
        v[static_cast<size_t>(n)] = static_cast<double>(o);
  } else if (gen.input_name == "csc_colptr") {
    const std::vector<int64_t> g = MakeGlobalColptr(gen.trial_seed, cuts, gen.params);
    const int64_t first = g[static_cast<size_t>(cuts[static_cast<size_t>(gen.rank)])];
    const int64_t last = g[static_cast<size_t>(cuts[static_cast<size_t>(gen.rank) + 1])];
    for (size_t n = 0; n < g.size(); ++n) v[n] = static_cast<double>(std::clamp(g[n], first, last));
  } else {
    return Bad("gnn_neighbor_sampling: unknown input");
  }
  return kforge::Status::Ok();
}

KF_ORACLE(gnn_neighbor_sampling) {
  const int w = io.world;
  const int64_t nodes = static_cast<int64_t>(io.param("nodes"));
  const int64_t fanouts[2] = {static_cast<int64_t>(io.param("k1")),
                              static_cast<int64_t>(io.param("k2"))};
  auto owner = io.in(0, "node_to_rank");
  for (int r = 0; r < w; ++r) {
    auto seeds = io.in(r, "seeds");
    std::vector<int64_t> node;
    std::unordered_map<int64_t, int64_t> label;  // node id -> position in node
    for (double s : seeds) {
      const int64_t id = static_cast<int64_t>(s);
      if (!(s >= 0) || id >= nodes || label.count(id) != 0) return Bad("a bad or repeated seed");
      label.emplace(id, static_cast<int64_t>(node.size()));
      node.push_back(id);
    }
    std::vector<int64_t> frontier = node, rows, cols, edges;
    for (int64_t k : fanouts) {
      std::vector<int64_t> next;
      for (int64_t u : frontier) {
        const int o = static_cast<int>(owner[static_cast<size_t>(u)]);
        if (o < 0 || o >= w) return Bad("node_to_rank outside [0, W)");
        auto colptr = io.in(o, "csc_colptr");
        auto row = io.in(o, "csc_row");
        const int64_t base = static_cast<int64_t>(colptr[0]);
        const int64_t lo = static_cast<int64_t>(colptr[static_cast<size_t>(u)]);
        const int64_t hi = static_cast<int64_t>(colptr[static_cast<size_t>(u) + 1]);
        if (lo < base || hi < lo || hi - base > static_cast<int64_t>(row.size()))
          return Bad("colptr is not a slice of a CSC that fits row");
        const int64_t take = std::min(k, hi - lo);
        for (int64_t j = 0; j < take; ++j) {
          const int64_t n = static_cast<int64_t>(row[static_cast<size_t>(lo - base + j)]);
          if (n < 0 || n >= nodes) return Bad("a neighbour outside [0, nodes)");
          auto [it, fresh] = label.emplace(n, static_cast<int64_t>(node.size()));
          if (fresh) {
            node.push_back(n);
            next.push_back(n);
          }
          rows.push_back(it->second);
          cols.push_back(label.at(u));
          edges.push_back(lo + j);
        }
      }
      frontier = std::move(next);
    }
    auto out_node = io.out(r, "node");
    auto out_row = io.out(r, "row");
    auto out_col = io.out(r, "col");
    auto out_edge = io.out(r, "edge");
    if (node.size() > out_node.size() || rows.size() > out_row.size())
      return Bad("more nodes or edges than the capacity");
    for (size_t i = 0; i < node.size(); ++i) out_node[i] = static_cast<double>(node[i]);
    for (size_t i = 0; i < rows.size(); ++i) {
      out_row[i] = static_cast<double>(rows[i]);
      out_col[i] = static_cast<double>(cols[i]);
      out_edge[i] = static_cast<double>(edges[i]);
    }
    io.out(r, "num_nodes")[0] = static_cast<double>(node.size());
    io.out(r, "num_edges")[0] = static_cast<double>(rows.size());
  }
  return kforge::Status::Ok();
}
