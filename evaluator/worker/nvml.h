// NVML through dlopen: kforge runs without the NVIDIA management library (no
// driver, containers without it), and reads clocks, temperature and NVLink
// state when it is there.
#pragma once

#include <optional>

namespace kforge::worker {

struct NvmlReading {
  unsigned sm_clock_mhz = 0;
  unsigned mem_clock_mhz = 0;
  unsigned temperature_c = 0;
  unsigned nvlink_active_links = 0;
  unsigned memory_bus_width_bits = 0;
};

// Readings for CUDA device `pci_bus_id`; nullopt when NVML is unavailable.
std::optional<NvmlReading> ReadNvml(const char* pci_bus_id);

}  // namespace kforge::worker
