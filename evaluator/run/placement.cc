#include "run/placement.h"

#include <algorithm>
#include <set>

#include "kforge/core/json.h"

namespace kforge::eval {

Result<Placement> Place(const Task& task, const nlohmann::json& card, const EvalOptions& options) {
  std::vector<int> gpus = options.gpus;
  if (gpus.empty()) {
    const nlohmann::json& all = JsonField(card, "gpus");
    if (all.is_array()) {
      for (const auto& g : all)
        gpus.push_back(static_cast<int>(JsonIntIn(g, "index", 0, 1 << 20, 0)));
    }
  }
  if (gpus.empty()) return Error(ErrorKind::kInvalidInput, "no GPU to place the ranks on");
  Placement p;
  if (options.nccl_self_test) {
    if (options.world > 1)
      return Error(ErrorKind::kInvalidInput, "the NCCL self-test runs one rank (world 1)");
    p.world = 1;
    p.devices = {gpus.front()};
    return p;
  }
  p.world = options.world;
  if (p.world == 0) {
    int n = static_cast<int>(gpus.size());
    auto fit = std::find_if(task.world_sizes.begin(), task.world_sizes.end(),
                            [&](int w) { return w >= n; });
    p.world = fit != task.world_sizes.end() ? *fit : task.world_sizes.back();
  }
  if (std::find(task.world_sizes.begin(), task.world_sizes.end(), p.world) ==
      task.world_sizes.end()) {
    return Error(ErrorKind::kInvalidInput,
                 "task " + task.key + " does not support world size " + std::to_string(p.world));
  }
  for (int r = 0; r < p.world; ++r) p.devices.push_back(gpus[r % gpus.size()]);
  p.emulated = std::set<int>(p.devices.begin(), p.devices.end()).size() < p.devices.size();
  return p;
}

std::string TargetArch(const nlohmann::json& card, const std::string& asked) {
  if (!asked.empty()) return asked;
  const nlohmann::json& gpus = JsonField(card, "gpus");
  if (!gpus.is_array() || gpus.empty()) return "sm_90a";
  int64_t cc =
      JsonIntIn(gpus[0], "cc_major", 0, 100, 9) * 10 + JsonIntIn(gpus[0], "cc_minor", 0, 9, 0);
  return "sm_" + std::to_string(cc) + (cc >= 90 ? "a" : "");
}

}  // namespace kforge::eval
