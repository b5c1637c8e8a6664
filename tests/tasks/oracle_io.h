// Test helpers for calling a registered oracle by hand: an OracleIo built from
// per-rank input values (outputs filled with a sentinel the oracle must
// overwrite), the call, and an output read back.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kforge/oracle.h"

namespace kforge::oracle_test {

struct Tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<std::vector<double>> per_rank;  // one value list per rank
};

inline OracleIo MakeIo(int world, const std::vector<Tensor>& inputs,
                       const std::vector<std::pair<std::string, std::vector<int64_t>>>& outputs,
                       const std::map<std::string, double>& params) {
  OracleIo io;
  io.world = world;
  io.params = params;
  io.inputs.resize(world);
  io.outputs.resize(world);
  for (int r = 0; r < world; ++r) {
    for (const Tensor& t : inputs) io.inputs[r].push_back({t.name, t.shape, t.per_rank[r]});
    for (const auto& [name, shape] : outputs) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      io.outputs[r].push_back({name, shape, std::vector<double>(n, -999.0)});
    }
  }
  return io;
}

inline void RunOracle(const char* name, OracleIo& io) {
  const OracleFn* fn = FindOracle(name);
  ASSERT_NE(fn, nullptr) << name << " is not registered";
  Status s = (*fn)(io);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

inline std::vector<double> Out(OracleIo& io, int rank, const char* name) {
  auto y = io.out(rank, name);
  return {y.begin(), y.end()};
}

}  // namespace kforge::oracle_test
