// The local evaluation service (kforge/evaluator/service.h): a request
// resolved against the loaded tasks and handed to this process's Evaluator.
#include <fmt/format.h>

#include "kforge/evaluator/service.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval {
namespace {

class LocalEvalService final : public EvalService {
 public:
  LocalEvalService(const std::vector<Task>* tasks, std::vector<int> gpus, double baseline_reuse_s,
                   bool warm_groups)
      : tasks_(tasks),
        gpus_(std::move(gpus)),
        baseline_reuse_s_(baseline_reuse_s),
        warm_groups_(warm_groups),
        evaluator_(MakeEvaluator()) {}

  Result<nlohmann::json> Evaluate(const EvalRequest& request) override {
    const Task* task = FindTask(*tasks_, request.task);
    if (!task) return Error(ErrorKind::kNotFound, fmt::format("no task '{}'", request.task));
    EvalOptions o;
    o.world = request.world;
    o.gpus = gpus_;
    o.compile_only = request.compile_only;
    o.profile = request.profile && !request.compile_only;
    o.baseline_reuse_s = baseline_reuse_s_;
    o.warm_groups = warm_groups_;
    o.canary = request.canary;
    if (request.timing_cap_s > 0) o.timing_cap_s = request.timing_cap_s;
    if (!request.dtype.empty()) {
      KF_ASSIGN_OR_RETURN(Dtype dt, ParseDtype(request.dtype));
      o.dtype = dt;
    }
    return evaluator_->Evaluate(*task, request.source, request.kernel_name, o);
  }

 private:
  const std::vector<Task>* tasks_;
  std::vector<int> gpus_;
  double baseline_reuse_s_;
  bool warm_groups_;
  std::unique_ptr<Evaluator> evaluator_;
};

}  // namespace

std::unique_ptr<EvalService> MakeLocalEvalService(const std::vector<Task>* tasks,
                                                  std::vector<int> gpus, double baseline_reuse_s,
                                                  bool warm_groups) {
  return std::make_unique<LocalEvalService>(tasks, std::move(gpus), baseline_reuse_s, warm_groups);
}

}  // namespace kforge::eval
