// Comparing one rank's output with the oracle's (or the baseline's) expected
// values, and explaining a mismatch to the model that wrote the kernel.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "kforge/evaluator/task.h"

namespace kforge::eval {

// What the hints may look at besides the output itself. Everything optional:
// a hint whose evidence is absent is simply not tried.
struct CompareContext {
  int world = 1;
  int rank = 0;
  // The 32-bit pattern the harness wrote over the outputs before the call.
  uint32_t poison = 0xFFFFFFFFu;
  // This rank's inputs (raw bytes, task order) and their shapes/dtypes.
  std::vector<const ConcreteTensor*> input_specs;
  std::vector<const void*> inputs;
  // The expected values of the same output on every rank ([rank]); used for
  // "equals rank R's expected output".
  std::vector<std::span<const double>> expected_by_rank;
};

struct BadElement {
  std::vector<int64_t> index;  // multi-dimensional, row-major
  double got = 0;
  double expected = 0;
};

struct CompareReport {
  int rank = 0;
  std::string output;
  bool passed = true;
  int64_t numel = 0;
  int64_t bad_count = 0;   // elements outside tolerance (NaN/Inf included)
  int64_t nan_count = 0;   // NaN elements in the output
  double max_abs_err = 0;  // over elements where both values are finite
  double max_rel_err = 0;  // |got-exp| / |exp| over finite, non-zero expected
  // sqrt(mean((got-exp)^2)) / sqrt(mean(exp^2)) over elements where both are
  // finite: how far the whole output is off, whatever one element does.
  double rms_rel_err = 0;
  std::vector<BadElement> first_bad;  // up to kMaxFirstBad, in index order
  std::vector<std::string> hints;     // only when failed
  int64_t counted_rows = -1;          // a counted output: the rows compared
};

inline constexpr size_t kMaxFirstBad = 8;

// An element passes iff got and expected are finite and
// |got - expected| <= atol + rtol * |expected| (out.tolerance). `got` holds
// out.numel elements of out.dtype; `expected` holds out.numel doubles.
CompareReport CompareOutput(const ConcreteTensor& out, const void* got,
                            std::span<const double> expected, const CompareContext& ctx);

// The tolerance an output meets against another computation of it (the
// baseline's output, at bench sizes) instead of the exact oracle. Element-wise
// bounds stay: they already cover the baseline's own rounding. The relative
// RMS bound `rms` is what one computation may be off from the exact value; a
// candidate off by c and a baseline off by b, independently, differ by about
// sqrt(c^2 + b^2). With `baseline_rms`, the baseline's own relative RMS error
// against the oracle measured in this evaluation (BaselineRmsBound), the bound
// is sqrt(rms^2 + baseline_rms^2); without one (kNotMeasured), the baseline is
// taken to be as far off as `rms` allows: rms * sqrt(2). Either way it is never
// above rms * sqrt(2), so a measurement can only tighten it.
//
// Why not rms + baseline_rms (the triangle inequality, which holds whatever
// the errors' correlation): it is too wide to refuse an int8 transport. At
// W=8 against a baseline that sums in f32 (0.00163 off), 013's int8 partials
// are 0.00680 from it, inside 0.00521 + 0.00163 = 0.00684 but outside
// sqrt(0.00521^2 + 0.00163^2) = 0.00546; against NCCL's ring (0.00405 off)
// the triangle would even pass int8 (0.00774) under 0.00926, where
// rms * sqrt(2) = 0.00737 refuses it. Honest sums keep a margin of 1.2x or
// more: a bf16 ring against the f32 baseline is 0.0044 from it.
// ReductionTransport.MeasuredBaselineErrorRefusesInt8AtEveryW.
inline constexpr double kNotMeasured = -1;
Tolerance AgainstBaseline(const Tolerance& t, double baseline_rms = kNotMeasured);

// The RMS bound of AgainstBaseline alone (0 when `rms` is 0: no RMS bound).
double BaselineRmsBound(double rms, double baseline_rms);

// The relative RMS of CompareReport::rms_rel_err from its two sums.
double RmsRelErr(double sq_err, double sq_expected);

// Whether an output of `numel` elements whose relative RMS error is `rms_rel_err`
// breaks the tolerance's RMS bound (never for outputs under kRmsMinElements).
bool RmsExceeded(const Tolerance& t, int64_t numel, double rms_rel_err);

// A counted output (ConcreteTensor::count_output >= 0) is compared on its
// first `rows` rows, `rows` being the EXPECTED count (the oracle's, or the
// baseline's at bench sizes); the count itself is an output compared like any
// other, so a kernel with a wrong count fails there, and rows past the count
// are never read. Returns the rows, or why `expected_count` cannot be one (not
// an integer in [0, capacity]): a task or reference bug, never a pass.
Result<int64_t> CountedRows(const ConcreteTensor& out, int rank, double expected_count);

// CompareOutput for any output of a problem: a counted output on the rows
// `expected_count` (the expected values of its count output) says, with
// `counted_rows` set; any other output whole. A count that is no row count
// fails the comparison with a "harness:" hint.
CompareReport CompareOutputRows(const ConcreteTensor& out, const void* got,
                                std::span<const double> expected,
                                std::span<const double> expected_count, const CompareContext& ctx);

// One entry of `mismatches` in docs/eval-result.md. Non-finite numbers are null.
nlohmann::json ToJson(const CompareReport& report);

}  // namespace kforge::eval
