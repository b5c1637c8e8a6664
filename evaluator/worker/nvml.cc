#include "nvml.h"

#include <dlfcn.h>

namespace kforge::worker {
namespace {

// The few NVML entry points used, with the types of the public C API.
using NvmlDevice = void*;
using InitFn = int (*)();
using ByBusIdFn = int (*)(const char*, NvmlDevice*);
using ClockFn = int (*)(NvmlDevice, int, unsigned*);
using TempFn = int (*)(NvmlDevice, int, unsigned*);
using LinkStateFn = int (*)(NvmlDevice, unsigned, int*);
using BusWidthFn = int (*)(NvmlDevice, unsigned*);

constexpr int kClockSm = 1, kClockMem = 2, kTempGpu = 0, kMaxLinks = 18;

struct Nvml {
  void* lib = nullptr;
  InitFn init = nullptr;
  ByBusIdFn by_bus_id = nullptr;
  ClockFn clock = nullptr;
  TempFn temp = nullptr;
  LinkStateFn link_state = nullptr;
  BusWidthFn bus_width = nullptr;
  bool ok = false;
};

Nvml& Load() {
  static Nvml n = [] {
    Nvml x;
    x.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!x.lib) return x;
    x.init = reinterpret_cast<InitFn>(dlsym(x.lib, "nvmlInit_v2"));
    x.by_bus_id = reinterpret_cast<ByBusIdFn>(dlsym(x.lib, "nvmlDeviceGetHandleByPciBusId_v2"));
    x.clock = reinterpret_cast<ClockFn>(dlsym(x.lib, "nvmlDeviceGetClockInfo"));
    x.temp = reinterpret_cast<TempFn>(dlsym(x.lib, "nvmlDeviceGetTemperature"));
    x.link_state = reinterpret_cast<LinkStateFn>(dlsym(x.lib, "nvmlDeviceGetNvLinkState"));
    x.bus_width = reinterpret_cast<BusWidthFn>(dlsym(x.lib, "nvmlDeviceGetMemoryBusWidth"));
    x.ok = x.init && x.by_bus_id && x.init() == 0;
    return x;
  }();
  return n;
}

}  // namespace

std::optional<NvmlReading> ReadNvml(const char* pci_bus_id) {
  Nvml& n = Load();
  if (!n.ok) return std::nullopt;
  NvmlDevice dev = nullptr;
  if (n.by_bus_id(pci_bus_id, &dev) != 0) return std::nullopt;
  NvmlReading r;
  if (n.clock) {
    n.clock(dev, kClockSm, &r.sm_clock_mhz);
    n.clock(dev, kClockMem, &r.mem_clock_mhz);
  }
  if (n.temp) n.temp(dev, kTempGpu, &r.temperature_c);
  if (n.bus_width) n.bus_width(dev, &r.memory_bus_width_bits);
  if (n.link_state) {
    for (unsigned l = 0; l < kMaxLinks; ++l) {
      int active = 0;
      if (n.link_state(dev, l, &active) == 0 && active) ++r.nvlink_active_links;
    }
  }
  return r;
}

}  // namespace kforge::worker
