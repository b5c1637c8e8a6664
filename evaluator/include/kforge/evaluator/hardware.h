// The hardware card of the GPUs an evaluation uses, probed by running
// `kforge-worker --probe` (the coordinator itself never initialises CUDA).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::eval {

// JSON: {device_count, cuda_driver_version, cuda_runtime_version, nccl_version,
// gpus: [{index, name, cc_major, cc_minor, sm_count, smem_per_block_optin,
// smem_per_sm, regs_per_sm, l2_bytes, hbm_bytes, pci_bus_id, sm_clock_mhz,
// mem_clock_mhz, temperature_c, nvlink_active_links, hbm_bandwidth_gbps}],
// p2p: [[bool]]}. kNotFound when there is no usable GPU (the card's `error`
// says why); the card is then still returned through `card_out` if given.
Result<nlohmann::json> ProbeHardware(const std::vector<int>& gpus = {},
                                     std::filesystem::path worker_path = {});

// The kforge-worker binary: $KFORGE_WORKER, else next to the running executable.
std::filesystem::path DefaultWorkerPath();

}  // namespace kforge::eval
