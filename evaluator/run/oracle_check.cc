#include "session.h"
#include "task/compare.h"

namespace kforge::eval {

nlohmann::json CheckAgainstOracle(const Problem& p, int rank, int output, const void* got,
                                  const OracleIo& expected, const HostInputs& inputs,
                                  uint32_t poison) {
  CompareContext ctx;
  ctx.poison = poison;
  ctx.world = p.world;
  ctx.rank = rank;
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    ctx.input_specs.push_back(&p.inputs[i]);
    ctx.inputs.push_back(inputs[rank][i].data());
  }
  for (int r = 0; r < p.world; ++r)
    ctx.expected_by_rank.push_back(expected.outputs[r][output].data);
  CompareReport report =
      CompareOutput(p.outputs[output], got, expected.outputs[rank][output].data, ctx);
  if (report.passed) return nullptr;
  return ToJson(report);
}

}  // namespace kforge::eval
