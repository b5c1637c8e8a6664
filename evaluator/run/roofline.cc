#include "run/roofline.h"

#include <algorithm>
#include <string>

namespace kforge::eval {
namespace {

// Dense tensor-core peaks (TFLOP/s) per compute capability, from the vendor's
// data sheets for the SXM parts (the fastest of each generation, so the floor
// stays a lower bound on other SKUs). f32 counts TF32 tensor cores: a kernel may
// legitimately use them where the task's tolerance allows.
struct ArchPeaks {
  int cc_major, cc_minor;
  double link_gbps_per_link;  // NVLink, per direction
  double bf16, f32, fp8;
};
constexpr ArchPeaks kArchs[] = {
    {8, 0, 25.0, 312.0, 156.0, 0.0},        // A100: NVLink 3
    {9, 0, 25.0, 989.5, 494.7, 1979.0},     // H100 / H200: NVLink 4
    {10, 0, 50.0, 2250.0, 1125.0, 4500.0},  // B200: NVLink 5
};

// Data-sheet HBM bandwidth (GB/s) by product name: the probe reads the memory
// clock now, which an idle GPU may hold below its maximum, and the floor must
// use the fastest the memory can go.
struct NamedHbm {
  const char* name;
  double gbps;
};
constexpr NamedHbm kHbm[] = {{"H200", 4800.0}, {"H100", 3350.0}, {"H800", 3350.0},
                             {"A100", 2039.0}, {"B200", 8000.0}, {"GH200", 4900.0}};

}  // namespace

Peaks PeaksOf(const GpuInfo& gpu, Dtype dtype) {
  Peaks p;
  p.hbm_gbps = gpu.hbm_bandwidth_gbps.value_or(0);
  for (const NamedHbm& h : kHbm) {
    if (gpu.name.find(h.name) != std::string::npos) p.hbm_gbps = std::max(p.hbm_gbps, h.gbps);
  }
  for (const ArchPeaks& a : kArchs) {
    if (a.cc_major != gpu.cc_major || a.cc_minor != gpu.cc_minor) continue;
    p.link_gbps = a.link_gbps_per_link * gpu.nvlink_active_links.value_or(0);
    switch (dtype) {
      case Dtype::kBF16:
      case Dtype::kF16:
        p.tflops = a.bf16;
        break;
      case Dtype::kFp8E4M3:
      case Dtype::kFp8E5M2:
        p.tflops = a.fp8 > 0 ? a.fp8 : a.bf16;
        break;
      default:
        p.tflops = a.f32;
        break;
    }
  }
  return p;
}

Peaks PeaksOf(const HardwareCard& card, const GpuInfo& gpu, Dtype dtype) {
  Peaks p = PeaksOf(gpu, dtype);
  if (card.flag_round_trip_us) p.sync_round_us = *card.flag_round_trip_us / 2;
  return p;
}

Floor FloorOf(const Problem& p, const Peaks& peaks, bool emulated) {
  Floor f;
  const double ranks = emulated ? p.world : 1;
  auto consider = [&](double amount, double rate_per_us, const char* bound) {
    if (amount <= 0 || rate_per_us <= 0) return;
    const double us = ranks * amount / rate_per_us;
    if (us > f.us) {
      f.us = us;
      f.bound = bound;
    }
  };
  consider(p.floor_hbm_bytes, peaks.hbm_gbps * 1e3, "hbm");  // GB/s = 1e3 bytes/us
  // Emulated, peer traffic stays inside the one GPU's HBM (counted above).
  if (!emulated) consider(p.floor_link_bytes, peaks.link_gbps * 1e3, "link");
  consider(p.floor_flops, peaks.tflops * 1e6, "flops");  // TFLOP/s = 1e6 flop/us
  if (p.floor_sync_rounds > 0 && peaks.sync_round_us > 0) {
    const double us = p.floor_sync_rounds * peaks.sync_round_us;
    if (us > f.us) {
      f.us = us;
      f.bound = "sync";
    }
  }
  return f;
}

}  // namespace kforge::eval
