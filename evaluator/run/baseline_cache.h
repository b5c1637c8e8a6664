// Baselines timed earlier by this evaluator, reused by later evaluations of
// the same size (docs/methodology.md, "Baseline reuse"). A record is made only
// by the reference group, at times no candidate process is alive on the GPUs,
// so reusing it gives a candidate nothing to reach; it is keyed by everything
// the baseline's time depends on and expires after EvalOptions::baseline_reuse_s.
#pragma once

#include <chrono>
#include <map>
#include <string>

#include "run/stats.h"
#include "session.h"

namespace kforge::eval {

struct BaselineRecord {
  BaselineTiming timing;  // as the plan it was timed for held it
  std::chrono::steady_clock::time_point measured;
  int uses = 0;  // later evaluations that reused it
  // An expert's record: the baseline it was timed beside (its median and
  // 95% interval), which a later baseline is set against (run/expert.h).
  double beside_median_us = 0, beside_ci_lo_us = 0, beside_ci_hi_us = 0;
};

class BaselineCache {
 public:
  // Everything a baseline's time at this size depends on: the reference's
  // object (content-addressed), the instantiated problem, dtype, world, the
  // GPUs and whether ranks share them, the input sets and the timing rule.
  static std::string Key(const EvalSession& s, const SizePlan& plan);
  // The same for another trusted object timed at this size (the expert's).
  static std::string Key(const EvalSession& s, const SizePlan& plan,
                         const std::filesystem::path& object);

  // The record for `key` if it was measured at most `max_age_s` ago; an older
  // one is dropped. Null when there is none.
  BaselineRecord* Find(const std::string& key, double max_age_s);
  void Store(const std::string& key, BaselineRecord record);
  size_t size() const { return records_.size(); }

 private:
  std::map<std::string, BaselineRecord> records_;
};

// Fills every bench plan whose baseline this cache holds (options'
// baseline_reuse_s > 0); returns how many bench plans still need timing.
int ReuseBaselines(EvalSession& s);
// Reused baselines whose SM clocks (median over their calls) differ from the
// candidate's by more than 3% are dropped from the plan, to be timed again
// now; returns how many.
int DropStaleBaselines(EvalSession& s);
// Whether a fresh block of the reference agrees with a reused record: the
// record's 95% interval (blocked: it counts the spread between the record's
// blocks) and the fresh block's, widened by `slack`, overlap. Negative slack:
// never. A record whose own blocks differ by 3% is not refused for a fresh
// block 2% off it; one timed on a GPU that has since changed still is.
bool RecordAgrees(const TimingStats& record, const TimingStats& fresh, double slack);
// After the evaluation: records every freshly timed baseline (before, and
// after when it got that far) and counts the reuses.
void RecordBaselines(EvalSession& s);

}  // namespace kforge::eval
