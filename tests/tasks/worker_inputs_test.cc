// A harness worker gets the instantiated problem over the wire, without the
// Task it came from: inputs made by a task's own generator (init kind custom)
// must still come out byte for byte as the coordinator's oracle sees them.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "kforge/evaluator/task.h"
#include "protocol/problem_wire.h"
#include "task/inputs.h"

namespace kforge::eval {
namespace {

TEST(WorkerInputs, CustomInputsMatchTheCoordinatorsAcrossTheWire) {
  for (const char* key : {"023_grad_acc_loss", "025_importance_sampling_loss",
                          "063_deepmd_kalman_filter_optimizer"}) {
    auto task = LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / key);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    auto p = Instantiate(*task, 2, task->dtypes.front(), task->check_sizes.back(), true);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto worker_view = proto::ProblemFromJson(proto::ProblemToJson(*p));
    ASSERT_TRUE(worker_view.ok()) << worker_view.status().ToString();
    ASSERT_EQ(worker_view->task, nullptr);
    EXPECT_EQ(worker_view->task_name, task->name);
    bool any_custom = false;
    for (size_t i = 0; i < p->inputs.size(); ++i) {
      if (p->inputs[i].init != InitSpec::Kind::kCustom) continue;
      any_custom = true;
      for (int rank = 0; rank < 2; ++rank) {
        std::vector<char> coordinator(p->inputs[i].NbytesOf(rank)), worker(coordinator.size());
        ASSERT_TRUE(GenerateInput(*p, static_cast<int>(i), rank, 1234, coordinator.data()).ok());
        Status s = GenerateInput(*worker_view, static_cast<int>(i), rank, 1234, worker.data());
        ASSERT_TRUE(s.ok()) << key << ": " << s.ToString();
        EXPECT_EQ(coordinator, worker) << key << " input " << p->inputs[i].name << " rank " << rank;
      }
    }
    EXPECT_TRUE(any_custom) << key << " no longer has a custom input; pick another task";
  }
}

// Inputs whose parameters vary by element range (init pieces) are made on the
// GPU from the wire's copy of the pieces: the host generator on that copy must
// give the coordinator's bytes, for every input of every rank.
TEST(WorkerInputs, PiecewiseInputsMatchTheCoordinatorsAcrossTheWire) {
  for (const char* key : {"041_zero1_optimizer_shard", "047_fsdp_step_e2e"}) {
    auto task = LoadTask(std::filesystem::path(KFORGE_TEST_TASKS_DIR) / key);
    ASSERT_TRUE(task.ok()) << task.status().ToString();
    auto p = Instantiate(*task, 4, task->dtypes.front(), task->check_sizes.back(), true);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    auto worker_view = proto::ProblemFromJson(proto::ProblemToJson(*p));
    ASSERT_TRUE(worker_view.ok()) << worker_view.status().ToString();
    int pieced = 0;
    for (size_t i = 0; i < p->inputs.size(); ++i) {
      ASSERT_EQ(worker_view->inputs[i].init_pieces.size(), p->inputs[i].init_pieces.size());
      if (!p->inputs[i].init_pieces.empty()) ++pieced;
      for (int rank = 0; rank < 4; ++rank) {
        std::vector<char> coordinator(p->inputs[i].NbytesOf(rank)), worker(coordinator.size());
        ASSERT_TRUE(GenerateInput(*p, static_cast<int>(i), rank, 99, coordinator.data()).ok());
        ASSERT_TRUE(GenerateInput(*worker_view, static_cast<int>(i), rank, 99, worker.data()).ok());
        EXPECT_EQ(coordinator, worker) << key << " input " << p->inputs[i].name << " rank " << rank;
      }
    }
    EXPECT_GE(pieced, 2) << key << " no longer has pieced inputs; pick another task";
  }
}

}  // namespace
}  // namespace kforge::eval
