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
  const ConcreteTensor& out = p.outputs[static_cast<size_t>(output)];
  std::span<const double> count;
  if (out.count_output >= 0)
    count = expected.outputs[rank][static_cast<size_t>(out.count_output)].data;
  CompareReport report =
      CompareOutputRows(out, got, expected.outputs[rank][output].data, count, ctx);
  if (report.passed) return nullptr;
  return ToJson(report);
}

}  // namespace kforge::eval
