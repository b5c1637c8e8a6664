#include "task/compare.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "task/parallel.h"

namespace kforge::eval {
namespace {

// The harness fills outputs with 0xFF bytes before each call.
// The harness writes a 32-bit pattern over the whole tensor from its start, so
// byte k holds byte k % 4 of the pattern (little-endian).
bool IsPoison(const void* data, size_t elem_size, int64_t i, uint32_t pattern) {
  const size_t first = static_cast<size_t>(i) * elem_size;
  const auto* p = static_cast<const uint8_t*>(data) + first;
  for (size_t b = 0; b < elem_size; ++b) {
    if (p[b] != static_cast<uint8_t>(pattern >> (8 * ((first + b) % 4)))) return false;
  }
  return true;
}

bool Close(double got, double exp, const Tolerance& tol) {
  return std::isfinite(got) && std::isfinite(exp) &&
         std::fabs(got - exp) <= tol.atol + tol.rtol * std::fabs(exp);
}

std::vector<int64_t> Unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) continue;
    index[d] = flat % shape[d];
    flat /= shape[d];
  }
  return index;
}

// True iff every got value is close to f(i) (a candidate explanation).
template <typename F>
bool AllClose(const std::vector<double>& got, const Tolerance& tol, F f) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (!Close(got[i], f(i), tol)) return false;
  }
  return true;
}

std::vector<std::string> Hints(const ConcreteTensor& out, const std::vector<double>& got,
                               std::span<const double> expected, const CompareContext& ctx,
                               int64_t poisoned_bad) {
  std::vector<std::string> hints;
  const int64_t n = out.NumelOf(ctx.rank);
  if (n == 0) return hints;
  if (poisoned_bad == n) {
    hints.push_back("unwritten (still holds the harness's poison pattern)");
    return hints;  // nothing else can be said about bytes nobody wrote
  }
  if (poisoned_bad > 0) {
    hints.push_back(
        fmt::format("partially written ({} of {} elements still poisoned)", poisoned_bad, n));
  }
  const bool expected_all_zero =
      std::all_of(expected.begin(), expected.end(), [](double v) { return v == 0; });
  if (!expected_all_zero && std::all_of(got.begin(), got.end(), [](double v) { return v == 0; })) {
    hints.push_back("all zeros");
    return hints;  // zeros also "equal" scaled zeros; stop at the plain fact
  }
  const Tolerance& tol = out.tolerance;
  for (size_t k = 0; k < ctx.inputs.size() && k < ctx.input_specs.size(); ++k) {
    const ConcreteTensor* in = ctx.input_specs[k];
    if (in == nullptr || ctx.inputs[k] == nullptr || in->numel != n) continue;
    const void* data = ctx.inputs[k];
    if (AllClose(got, tol, [&](size_t i) { return LoadAsDouble(data, in->dtype, i); })) {
      hints.push_back(fmt::format("equals input {} of this rank", in->name));
    }
  }
  for (size_t r = 0; r < ctx.expected_by_rank.size(); ++r) {
    const auto& other = ctx.expected_by_rank[r];
    if (static_cast<int>(r) == ctx.rank || other.size() != got.size()) continue;
    if (AllClose(got, tol, [&](size_t i) { return other[i]; })) {
      hints.push_back(fmt::format("equals rank {}'s expected output", r));
    }
  }
  if (ctx.world > 1 && !expected_all_zero) {
    const double w = ctx.world;
    const Tolerance scaled{tol.atol * w, tol.rtol};
    if (AllClose(got, scaled, [&](size_t i) { return expected[i] * w; })) {
      hints.push_back(fmt::format("off by a factor of W ({})", ctx.world));
    } else if (AllClose(got, tol, [&](size_t i) { return expected[i] / w; })) {
      hints.push_back(fmt::format("off by a factor of 1/W (1/{})", ctx.world));
    }
  }
  return hints;
}

nlohmann::json Number(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}

}  // namespace

namespace {

// One chunk's share of a comparison: chunks are a fixed number of elements,
// whatever the threads, and merged in order, so that the sums (and the
// report) are the same on every machine.
constexpr size_t kCompareChunk = size_t{1} << 15;

struct ChunkTally {
  int64_t bad = 0, nan = 0, poisoned_bad = 0;
  double max_abs = 0, max_rel = 0, sq_err = 0, sq_exp = 0;
  std::vector<std::pair<int64_t, double>> first_bad;  // (index, got), up to kMaxFirstBad
};

void TallyChunk(const ConcreteTensor& out, const void* raw, std::span<const double> expected,
                uint32_t poison, size_t begin, size_t end, ChunkTally* t) {
  thread_local std::vector<double> got;
  got.resize(end - begin);
  const size_t elem = DtypeSize(out.dtype);
  LoadAllAsDouble(static_cast<const unsigned char*>(raw) + begin * elem, out.dtype, end - begin,
                  got.data());
  for (size_t i = begin; i < end; ++i) {
    const double g = got[i - begin];
    const double e = expected[i];
    if (std::isnan(g)) ++t->nan;
    if (std::isfinite(g) && std::isfinite(e)) {
      const double abs_err = std::fabs(g - e);
      t->max_abs = std::max(t->max_abs, abs_err);
      t->sq_err += abs_err * abs_err;
      t->sq_exp += e * e;
      if (e != 0) t->max_rel = std::max(t->max_rel, abs_err / std::fabs(e));
    }
    if (Close(g, e, out.tolerance)) continue;
    ++t->bad;
    if (IsPoison(raw, elem, static_cast<int64_t>(i), poison)) ++t->poisoned_bad;
    if (t->first_bad.size() < kMaxFirstBad) t->first_bad.emplace_back(static_cast<int64_t>(i), g);
  }
}

}  // namespace

CompareReport CompareOutput(const ConcreteTensor& out, const void* raw,
                            std::span<const double> expected, const CompareContext& ctx) {
  CompareReport rep;
  rep.rank = ctx.rank;
  rep.output = out.name;
  rep.numel = out.NumelOf(ctx.rank);
  const size_t n = static_cast<size_t>(rep.numel);
  if (expected.size() != n) {
    // A harness bug, but never a silent pass.
    rep.passed = false;
    rep.bad_count = rep.numel;
    rep.hints.push_back(
        fmt::format("harness: {} expected values for {} elements", expected.size(), n));
    return rep;
  }
  // Decoded a chunk at a time, the chunks shared out among threads.
  const int64_t chunks = static_cast<int64_t>((n + kCompareChunk - 1) / kCompareChunk);
  std::vector<ChunkTally> tally(static_cast<size_t>(chunks));
  internal::ParallelFor(chunks, internal::ThreadsFor(chunks, 0, 4), [&](int64_t b, int64_t e) {
    for (int64_t c = b; c < e; ++c) {
      const size_t begin = static_cast<size_t>(c) * kCompareChunk;
      TallyChunk(out, raw, expected, ctx.poison, begin, std::min(n, begin + kCompareChunk),
                 &tally[static_cast<size_t>(c)]);
    }
  });
  int64_t poisoned_bad = 0;
  double sq_err = 0, sq_exp = 0;
  for (const ChunkTally& t : tally) {
    rep.bad_count += t.bad;
    rep.nan_count += t.nan;
    poisoned_bad += t.poisoned_bad;
    rep.max_abs_err = std::max(rep.max_abs_err, t.max_abs);
    rep.max_rel_err = std::max(rep.max_rel_err, t.max_rel);
    sq_err += t.sq_err;
    sq_exp += t.sq_exp;
    for (const auto& [i, g] : t.first_bad) {
      if (rep.first_bad.size() == kMaxFirstBad) break;
      rep.first_bad.push_back(
          {Unravel(i, out.ShapeOf(ctx.rank)), g, expected[static_cast<size_t>(i)]});
    }
  }
  rep.rms_rel_err = RmsRelErr(sq_err, sq_exp);
  rep.passed = rep.bad_count == 0;
  if (!rep.passed) {
    // Only a mismatch needs the whole output decoded, for its hints.
    std::vector<double> got(n);
    LoadAllAsDouble(raw, out.dtype, n, got.data());
    rep.hints = Hints(out, got, expected, ctx, poisoned_bad);
  }
  if (rep.passed && RmsExceeded(out.tolerance, rep.numel, rep.rms_rel_err)) {
    rep.passed = false;
    rep.hints.push_back(fmt::format(
        "every element is within its tolerance, but the output as a whole is off by a relative "
        "RMS of {:.5f} (allowed {:.5f}), as partial sums carried in int8 or fp8 are",
        rep.rms_rel_err, out.tolerance.rms));
  }
  return rep;
}

Result<int64_t> CountedRows(const ConcreteTensor& out, int rank, double expected_count) {
  const auto& shape = out.ShapeOf(rank);
  const int64_t capacity = shape.empty() ? 0 : shape[0];
  if (!(expected_count >= 0) || expected_count != std::floor(expected_count) ||
      expected_count > static_cast<double>(capacity)) {
    return Error(ErrorKind::kHarness,
                 fmt::format("output '{}' of rank {}: the expected count {} is not a row count "
                             "within its capacity of {} rows",
                             out.name, rank, expected_count, capacity));
  }
  return static_cast<int64_t>(expected_count);
}

CompareReport CompareOutputRows(const ConcreteTensor& out, const void* got,
                                std::span<const double> expected,
                                std::span<const double> expected_count, const CompareContext& ctx) {
  if (out.count_output < 0) return CompareOutput(out, got, expected, ctx);
  auto rows = CountedRows(out, ctx.rank, expected_count.empty() ? -1.0 : expected_count[0]);
  if (!rows.ok()) {
    CompareReport bad;
    bad.rank = ctx.rank;
    bad.output = out.name;
    bad.passed = false;
    bad.hints.push_back("harness: " + rows.status().message());
    return bad;
  }
  const ConcreteTensor part = out.FirstRows(ctx.rank, *rows);
  const size_t n = std::min(expected.size(), static_cast<size_t>(part.numel));
  CompareContext local = ctx;
  local.expected_by_rank.clear();  // other ranks count other rows
  CompareReport report = CompareOutput(part, got, expected.first(n), local);
  report.counted_rows = *rows;
  return report;
}

double BaselineRmsBound(double rms, double baseline_rms) {
  const double widest = rms * std::numbers::sqrt2;
  if (!(baseline_rms >= 0) || !std::isfinite(baseline_rms)) return widest;
  return std::min(widest, std::hypot(rms, baseline_rms));
}

Tolerance AgainstBaseline(const Tolerance& t, double baseline_rms) {
  Tolerance wide = t;
  wide.rms = BaselineRmsBound(t.rms, baseline_rms);
  return wide;
}

double RmsRelErr(double sq_err, double sq_expected) {
  return sq_expected > 0 ? std::sqrt(sq_err / sq_expected) : (sq_err > 0 ? INFINITY : 0);
}

bool RmsExceeded(const Tolerance& t, int64_t numel, double rms_rel_err) {
  return t.rms > 0 && numel >= kRmsMinElements && !(rms_rel_err <= t.rms);
}

nlohmann::json ToJson(const CompareReport& r) {
  nlohmann::json first_bad = nlohmann::json::array();
  for (const BadElement& b : r.first_bad) {
    first_bad.push_back(
        {{"index", b.index}, {"got", Number(b.got)}, {"expected", Number(b.expected)}});
  }
  nlohmann::json j = {{"rank", r.rank},
                      {"output", r.output},
                      {"bad_count", r.bad_count},
                      {"nan_count", r.nan_count},
                      {"max_abs_err", Number(r.max_abs_err)},
                      {"max_rel_err", Number(r.max_rel_err)},
                      {"rms_rel_err", Number(r.rms_rel_err)},
                      {"first_bad", std::move(first_bad)},
                      {"hints", r.hints}};
  if (r.counted_rows >= 0) j["counted_rows"] = r.counted_rows;
  return j;
}

}  // namespace kforge::eval
