// Budgets per run, per model and per task: tokens, dollars and wall-clock
// seconds. The runner charges every model call and asks before each new one;
// an exhausted scope stops its sessions with the reason recorded.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace kforge::agent {

struct BudgetLimits {
  std::optional<double> usd;
  std::optional<int64_t> tokens;  // input + output
  std::optional<double> wall_s;   // from the scope's first model call
  bool empty() const { return !usd && !tokens && !wall_s; }
};

struct Budgets {
  BudgetLimits run, per_model;
  BudgetLimits per_task;  // per (model, task) pair: every model gets the same on every task
};

class BudgetBook {
 public:
  explicit BudgetBook(Budgets limits) : limits_(std::move(limits)) {}

  // Starts the wall clocks of the run, the model and the task at `now_s`
  // (unix seconds) if they have not started.
  void Touch(const std::string& model, const std::string& task, double now_s);
  void Charge(const std::string& model, const std::string& task, double usd, int64_t tokens);

  // Why a new call for (model, task) may not start, or nullopt when it may.
  std::optional<std::string> Exhausted(const std::string& model, const std::string& task,
                                       double now_s) const;

  struct Spend {
    double usd = 0;
    int64_t tokens = 0;
    std::optional<double> started_s;
  };
  const Spend& run() const { return run_; }
  Spend model(const std::string& m) const;

 private:
  static std::optional<std::string> Check(const char* scope, const std::string& name,
                                          const BudgetLimits& limits, const Spend& spend,
                                          double now_s);

  Budgets limits_;
  Spend run_;
  std::map<std::string, Spend> models_, tasks_;
};

}  // namespace kforge::agent
