#include "run/placement.h"

#include <algorithm>
#include <set>

namespace kforge::eval {

Result<Placement> Place(const Task& task, const HardwareCard& card, const EvalOptions& options) {
  std::vector<int> gpus = options.gpus;
  if (gpus.empty()) gpus = card.DeviceIndices();
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

std::string TargetArch(const HardwareCard& card, const std::string& asked) {
  if (!asked.empty()) return asked;
  if (!card.has_gpu() || card.gpus.front().cc_major == 0) return "sm_90a";
  const int cc = card.gpus.front().cc_major * 10 + std::min(card.gpus.front().cc_minor, 9);
  return "sm_" + std::to_string(cc) + (cc >= 90 ? "a" : "");
}

}  // namespace kforge::eval
