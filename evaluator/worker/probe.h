// The hardware card: what kforge-worker --probe prints.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/kernel.h"

namespace kforge::worker {

// The hardware card (JSON) of the given devices (all when empty).
nlohmann::json ProbeDevices(const std::vector<int>& devices);
// Fills kf_gpu_info for one device.
Status QueryGpuInfo(int device, kf_gpu_info* info);

}  // namespace kforge::worker
