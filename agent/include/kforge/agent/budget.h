// Budgets per run, per model and per task: tokens, dollars and wall-clock
// seconds. Before each model call the runner asks whether the call's worst
// case fits and reserves it while the call is in flight; when the call ends
// the reservation is released and what it cost is charged. An exhausted scope
// stops its sessions with the reason recorded. The rule (docs/agent.md,
// "Budgets"): a call starts only when its worst case fits in what every scope
// it draws on has left after what is spent and reserved, so calls in flight
// together can never pass a budget; what is spent passes one only by what a
// call's worst case understated. A run-wide dollar or token budget is shared
// by the run's models: each draws at most an even share of it, and the rest a
// model that ended left is split again among the models still running.
//
// Not thread-safe: the runner calls it from its one thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace kforge::agent {

struct BudgetLimits {
  std::optional<double> usd;
  std::optional<int64_t> tokens;  // input + output
  std::optional<double> wall_s;   // from the scope's first model call
  bool empty() const { return !usd && !tokens && !wall_s; }
  bool operator==(const BudgetLimits&) const = default;
};

struct Budgets {
  BudgetLimits run, per_model;
  BudgetLimits per_task;  // per (model, task) pair: every model gets the same on every task
  bool operator==(const Budgets&) const = default;
};

// Dollars and tokens of one call: what it cost, or the most it may cost.
struct CallCost {
  double usd = 0;
  int64_t tokens = 0;
};

class BudgetBook {
 public:
  // `models`: the run's models, among which the run-wide dollars and tokens
  // are shared; empty (or one model) shares nothing.
  explicit BudgetBook(Budgets limits, std::vector<std::string> models = {});

  // Starts the wall clocks of the run, the model and the task at `now_s`
  // (unix seconds) if they have not started.
  void Touch(const std::string& model, const std::string& task, double now_s);
  void Charge(const std::string& model, const std::string& task, double usd, int64_t tokens);

  // Holds `worst` against every scope the call draws on until Release.
  void Reserve(const std::string& model, const std::string& task, const CallCost& worst);
  void Release(const std::string& model, const std::string& task, const CallCost& worst);

  // Every session of `model` has ended: what it left of its share of the run
  // budget goes to the models still running.
  void ModelEnded(const std::string& model);

  // Why a new call for (model, task) may not start, or nullopt when it may.
  std::optional<std::string> Exhausted(const std::string& model, const std::string& task,
                                       double now_s) const;

  struct Admission {
    enum Kind {
      kStart,  // the worst case fits: reserve it and make the call
      kWait,   // it fits once calls in flight end and release what they hold
      kStop,   // it cannot fit whatever ends: `reason` says which scope
    } kind = kStart;
    std::string reason;
    bool worst_case = false;  // kStop because the call's worst case does not fit what is left
  };
  // Whether a call for (model, task) whose worst case is `worst` may start now.
  Admission Admit(const std::string& model, const std::string& task, const CallCost& worst,
                  double now_s) const;

  struct Spend {
    double usd = 0;
    int64_t tokens = 0;
    std::optional<double> started_s;
    CallCost reserved;  // the worst cases of the calls in flight
  };
  const Spend& run() const { return run_; }
  Spend model(const std::string& m) const;
  // The model's share of the run-wide budget now (dollars and tokens), when
  // the run has one and more than one model.
  BudgetLimits RunShare(const std::string& model) const;

 private:
  std::vector<Spend*> Scopes(const std::string& model, const std::string& task);
  static Admission Check(const std::string& who, const BudgetLimits& limits, const Spend& spend,
                         const CallCost& worst, double now_s);

  Budgets limits_;
  std::vector<std::string> models_list_;
  std::set<std::string> ended_;
  Spend run_;
  std::map<std::string, Spend> models_, tasks_;
};

}  // namespace kforge::agent
