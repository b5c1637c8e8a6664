// The candidate's budget of call time (EvalOptions::candidate_budget_s): the
// wall time of every exchange that waits on its code, counted, and each such
// exchange's deadline cut to what is left (docs/methodology.md, "Deadlines and
// failures").
#include <algorithm>
#include <chrono>

#include "session.h"

namespace kforge::eval {

CandidateTime::CandidateTime(EvalSession& s, bool counts)
    : s_(s), counts_(counts), start_(std::chrono::steady_clock::now()) {}

CandidateTime::~CandidateTime() {
  if (counts_) {
    s_.candidate_spent_s +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    s_.budget_cut_deadline = false;
  }
}

double CandidateTime::Deadline(double phase_s) {
  if (!counts_) return phase_s;
  const double left = s_.options->candidate_budget_s - s_.candidate_spent_s;
  if (left < phase_s) s_.budget_cut_deadline = true;
  // Never zero: a spent budget still lets the exchange end as a timeout.
  return std::max(std::min(phase_s, left), 0.05);
}

}  // namespace kforge::eval
