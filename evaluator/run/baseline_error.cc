// The baseline's own error against the oracle, and the RMS bound it gives the
// timed calls of the bench sizes, which meet the baseline's outputs instead of
// the oracle's (task/compare.h AgainstBaseline, docs/methodology.md).
//
// Measured at the check sizes, where the oracle runs anyway: the baseline runs
// on the trial's inputs in the harness's private arena, with the backend of
// this evaluation (the emulated collectives sum in f32, NCCL in bf16 per
// step), and its outputs meet the oracle's like a candidate's. The bench sizes
// get no oracle (its cost grows with them), so their bound uses the largest
// error over the check sizes and trials: that carries over where the error
// depends on W and the order of the sums but not on the number of elements,
// as for the bf16 reductions that the RMS bounds are there for.
#include <algorithm>
#include <cmath>

#include "session.h"
#include "task/compare.h"

namespace kforge::eval {

using nlohmann::json;

bool MeasuresBaselineError(const SizePlan& plan) {
  if (!plan.check) return false;
  const Problem& p = plan.problem;
  for (const ConcreteTensor& out : p.outputs) {
    if (out.tolerance.rms <= 0) continue;
    for (int r = 0; r < p.world; ++r) {
      if (out.NumelOf(r) >= kRmsMinElements) return true;
    }
  }
  return false;
}

json RecordBaselineError(EvalSession& s, const SizePlan& plan,
                         const std::vector<std::vector<std::vector<char>>>& baseline,
                         const OracleIo& io) {
  const Problem& p = plan.problem;
  if (s.baseline_error.size() < p.outputs.size()) s.baseline_error.resize(p.outputs.size());
  json measured = json::object();
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const ConcreteTensor& out = p.outputs[o];
    if (out.tolerance.rms <= 0) continue;
    double worst = kNotMeasured;
    for (int r = 0; r < p.world; ++r) {
      if (out.only_rank >= 0 && out.only_rank != r) continue;
      CompareContext ctx;
      ctx.world = p.world;
      ctx.rank = r;
      std::span<const double> count;
      if (out.count_output >= 0) count = io.outputs[r][static_cast<size_t>(out.count_output)].data;
      const CompareReport rep =
          CompareOutputRows(out, baseline[r][o].data(), io.outputs[r][o].data, count, ctx);
      // Too few elements for a statistic (the RMS bound skips them too), or
      // a baseline that misses the element-wise bounds (NaN and Inf
      // included), whose RMS over its finite elements says little: no
      // measurement, and the bound stays the unmeasured one.
      if (rep.numel < kRmsMinElements || rep.bad_count > 0 || !std::isfinite(rep.rms_rel_err))
        continue;
      worst = std::max(worst, rep.rms_rel_err);
    }
    if (worst < 0) continue;
    measured[out.name] = worst;
    BaselineError& e = s.baseline_error[o];
    if (worst > e.rms_vs_oracle) e = {worst, plan.size.label};
  }
  return measured;
}

std::vector<double> RmsVsBaseline(const EvalSession& s, const Problem& p) {
  std::vector<double> bounds;
  if (s.baseline_error.empty()) return bounds;  // nothing measured: the harness's default
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const double measured =
        o < s.baseline_error.size() ? s.baseline_error[o].rms_vs_oracle : kNotMeasured;
    bounds.push_back(BaselineRmsBound(p.outputs[o].tolerance.rms, measured));
  }
  return bounds;
}

json VsBaselineReport(const EvalSession& s, const Problem& p) {
  json report = json::array();
  for (size_t o = 0; o < p.outputs.size(); ++o) {
    const ConcreteTensor& out = p.outputs[o];
    if (out.tolerance.rms <= 0) continue;
    const BaselineError none;
    const BaselineError& e = o < s.baseline_error.size() ? s.baseline_error[o] : none;
    // The bound the harness was configured with (RmsVsBaseline).
    json entry = {{"output", out.name},
                  {"rms", out.tolerance.rms},
                  {"rms_bound", BaselineRmsBound(out.tolerance.rms, e.rms_vs_oracle)}};
    if (e.rms_vs_oracle >= 0) {
      entry["baseline_rms_vs_oracle"] = e.rms_vs_oracle;
      entry["measured_at"] = e.size;
    } else {
      entry["baseline_rms_vs_oracle"] = nullptr;
    }
    report.push_back(std::move(entry));
  }
  return report;
}

}  // namespace kforge::eval
