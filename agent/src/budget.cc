#include "kforge/agent/budget.h"

#include <fmt/format.h>

namespace kforge::agent {

void BudgetBook::Touch(const std::string& model, const std::string& task, double now_s) {
  for (Spend* s : {&run_, &models_[model], &tasks_[model + " / " + task]}) {
    if (!s->started_s) s->started_s = now_s;
  }
}

void BudgetBook::Charge(const std::string& model, const std::string& task, double usd,
                        int64_t tokens) {
  for (Spend* s : {&run_, &models_[model], &tasks_[model + " / " + task]}) {
    s->usd += usd;
    s->tokens += tokens;
  }
}

std::optional<std::string> BudgetBook::Check(const char* scope, const std::string& name,
                                             const BudgetLimits& limits, const Spend& spend,
                                             double now_s) {
  // Every reason starts with results::kBudgetStopPrefix: the results tell a
  // budget stop from a wrong answer by it.
  std::string who = name.empty() ? std::string(scope) : fmt::format("{} {}", scope, name);
  if (limits.usd && spend.usd >= *limits.usd) {
    return fmt::format("budget: {} spent ${:.4f} of ${:.4f}", who, spend.usd, *limits.usd);
  }
  if (limits.tokens && spend.tokens >= *limits.tokens) {
    return fmt::format("budget: {} used {} of {} tokens", who, spend.tokens, *limits.tokens);
  }
  if (limits.wall_s && spend.started_s && now_s - *spend.started_s >= *limits.wall_s) {
    return fmt::format("budget: {} ran {:.0f} s of {:.0f} s wall clock", who,
                       now_s - *spend.started_s, *limits.wall_s);
  }
  return std::nullopt;
}

std::optional<std::string> BudgetBook::Exhausted(const std::string& model, const std::string& task,
                                                 double now_s) const {
  if (auto r = Check("run", "", limits_.run, run_, now_s)) return r;
  Spend none;
  auto m = models_.find(model);
  if (auto r =
          Check("model", model, limits_.per_model, m == models_.end() ? none : m->second, now_s))
    return r;
  auto t = tasks_.find(model + " / " + task);
  if (auto r = Check("task", model + " / " + task, limits_.per_task,
                     t == tasks_.end() ? none : t->second, now_s))
    return r;
  return std::nullopt;
}

BudgetBook::Spend BudgetBook::model(const std::string& m) const {
  auto it = models_.find(m);
  return it == models_.end() ? Spend{} : it->second;
}

}  // namespace kforge::agent
