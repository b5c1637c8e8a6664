#include "kforge/agent/budget.h"

#include <fmt/format.h>

#include <algorithm>

namespace kforge::agent {
namespace {

// Sums of cents in binary floating point are not exact: $0.01 five times is
// $0.05000000000000001, which must still count as $0.05.
constexpr double kUsdSlack = 1e-9;

}  // namespace

BudgetBook::BudgetBook(Budgets limits, std::vector<std::string> models)
    : limits_(std::move(limits)), models_list_(std::move(models)) {
  std::sort(models_list_.begin(), models_list_.end());
  models_list_.erase(std::unique(models_list_.begin(), models_list_.end()), models_list_.end());
}

std::vector<BudgetBook::Spend*> BudgetBook::Scopes(const std::string& model,
                                                   const std::string& task) {
  return {&run_, &models_[model], &tasks_[model + " / " + task]};
}

void BudgetBook::Touch(const std::string& model, const std::string& task, double now_s) {
  for (Spend* s : Scopes(model, task)) {
    if (!s->started_s) s->started_s = now_s;
  }
}

void BudgetBook::Charge(const std::string& model, const std::string& task, double usd,
                        int64_t tokens) {
  for (Spend* s : Scopes(model, task)) {
    s->usd += usd;
    s->tokens += tokens;
  }
}

void BudgetBook::Reserve(const std::string& model, const std::string& task, const CallCost& worst) {
  for (Spend* s : Scopes(model, task)) {
    s->reserved.usd += worst.usd;
    s->reserved.tokens += worst.tokens;
  }
}

void BudgetBook::Release(const std::string& model, const std::string& task, const CallCost& worst) {
  for (Spend* s : Scopes(model, task)) {
    s->reserved.usd = std::max(0.0, s->reserved.usd - worst.usd);
    s->reserved.tokens = std::max<int64_t>(0, s->reserved.tokens - worst.tokens);
  }
}

void BudgetBook::ModelEnded(const std::string& model) { ended_.insert(model); }

BudgetLimits BudgetBook::RunShare(const std::string& model) const {
  BudgetLimits share;
  if (models_list_.size() < 2 || (!limits_.run.usd && !limits_.run.tokens)) return share;
  // What the ended models took stays theirs; the rest is split evenly among
  // the models still running. An ended model's share only ever grows the
  // others', so a share never shrinks under what its model holds.
  double usd_left = limits_.run.usd.value_or(0);
  int64_t tokens_left = limits_.run.tokens.value_or(0);
  int running = 0;
  for (const std::string& m : models_list_) {
    if (!ended_.count(m) || m == model) {
      ++running;
      continue;
    }
    const Spend s = this->model(m);
    usd_left -= s.usd + s.reserved.usd;
    tokens_left -= s.tokens + s.reserved.tokens;
  }
  running = std::max(running, 1);
  if (limits_.run.usd) share.usd = std::max(0.0, usd_left) / running;
  if (limits_.run.tokens) share.tokens = std::max<int64_t>(0, tokens_left) / running;
  return share;
}

BudgetBook::Admission BudgetBook::Check(const std::string& who, const BudgetLimits& limits,
                                        const Spend& spend, const CallCost& worst, double now_s) {
  // Every reason starts with results::kBudgetStopPrefix: the results tell a
  // budget stop from a wrong answer by it.
  Admission a;
  auto stop = [&](std::string reason, bool by_worst_case) {
    a.kind = Admission::kStop;
    a.reason = std::move(reason);
    a.worst_case = by_worst_case;
    return a;
  };
  if (limits.usd && spend.usd >= *limits.usd - kUsdSlack) {
    return stop(fmt::format("budget: {} spent ${:.4f} of ${:.4f}", who, spend.usd, *limits.usd),
                false);
  }
  if (limits.tokens && spend.tokens >= *limits.tokens) {
    return stop(fmt::format("budget: {} used {} of {} tokens", who, spend.tokens, *limits.tokens),
                false);
  }
  if (limits.wall_s && spend.started_s && now_s - *spend.started_s >= *limits.wall_s) {
    return stop(fmt::format("budget: {} ran {:.0f} s of {:.0f} s wall clock", who,
                            now_s - *spend.started_s, *limits.wall_s),
                false);
  }
  // Spending only grows: a call that does not fit in what is left now never will.
  if (limits.usd && spend.usd + worst.usd > *limits.usd + kUsdSlack) {
    return stop(fmt::format("budget: {} has ${:.4f} of ${:.4f} left, less than the next call's "
                            "worst case, ${:.4f}",
                            who, *limits.usd - spend.usd, *limits.usd, worst.usd),
                true);
  }
  if (limits.tokens && spend.tokens + worst.tokens > *limits.tokens) {
    return stop(fmt::format("budget: {} has {} of {} tokens left, less than the next call's "
                            "worst case, {} tokens",
                            who, *limits.tokens - spend.tokens, *limits.tokens, worst.tokens),
                true);
  }
  if ((limits.usd && spend.usd + spend.reserved.usd + worst.usd > *limits.usd + kUsdSlack) ||
      (limits.tokens && spend.tokens + spend.reserved.tokens + worst.tokens > *limits.tokens)) {
    a.kind = Admission::kWait;
  }
  return a;
}

BudgetBook::Admission BudgetBook::Admit(const std::string& model, const std::string& task,
                                        const CallCost& worst, double now_s) const {
  static const Spend kNone;
  auto find = [](const std::map<std::string, Spend>& m, const std::string& key) -> const Spend& {
    auto it = m.find(key);
    return it == m.end() ? kNone : it->second;
  };
  const Spend& m = find(models_, model);
  const std::string task_key = model + " / " + task;
  BudgetLimits share = RunShare(model);
  const std::vector<Admission> checks = {
      Check("run", limits_.run, run_, worst, now_s),
      Check(fmt::format("model {}'s share of the run budget", model), share, m, worst, now_s),
      Check("model " + model, limits_.per_model, m, worst, now_s),
      Check("task " + task_key, limits_.per_task, find(tasks_, task_key), worst, now_s),
  };
  for (const Admission& a : checks) {
    if (a.kind == Admission::kStop) return a;
  }
  for (const Admission& a : checks) {
    if (a.kind == Admission::kWait) return a;
  }
  return {};
}

std::optional<std::string> BudgetBook::Exhausted(const std::string& model, const std::string& task,
                                                 double now_s) const {
  Admission a = Admit(model, task, CallCost{}, now_s);
  if (a.kind == Admission::kStop) return a.reason;
  return std::nullopt;
}

BudgetBook::Spend BudgetBook::model(const std::string& m) const {
  auto it = models_.find(m);
  return it == models_.end() ? Spend{} : it->second;
}

}  // namespace kforge::agent
