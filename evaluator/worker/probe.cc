// The hardware card: what the GPUs a run uses can do, for prompts and records.
#include "probe.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "collectives.h"
#include "cuda_check.h"
#include "device_ops.h"
#include "nvml.h"

namespace kforge::worker {

Status QueryGpuInfo(int device, kf_gpu_info* info) {
  cudaDeviceProp p;
  KF_CUDA(cudaGetDeviceProperties(&p, device));
  std::memset(info, 0, sizeof(*info));
  // Names longer than the field are cut; the card keeps the full name.
  size_t n = std::min(std::strlen(p.name), sizeof(info->name) - 1);
  std::memcpy(info->name, p.name, n);
  info->name[n] = '\0';
  info->cc_major = p.major;
  info->cc_minor = p.minor;
  info->sm_count = p.multiProcessorCount;
  info->max_threads_per_block = p.maxThreadsPerBlock;
  info->smem_per_block_optin = p.sharedMemPerBlockOptin;
  info->smem_per_sm = p.sharedMemPerMultiprocessor;
  info->l2_bytes = static_cast<size_t>(p.l2CacheSize);
  info->hbm_bytes = p.totalGlobalMem;
  info->p2p_all = 1;
  return Status::Ok();
}

nlohmann::json ProbeDevices(const std::vector<int>& devices) {
  nlohmann::json card;
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    card["error"] = std::string("no CUDA device: ") + cudaGetErrorString(e);
    card["device_count"] = 0;
    return card;
  }
  card["device_count"] = count;
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  card["cuda_driver_version"] = driver;
  card["cuda_runtime_version"] = runtime;
  card["nccl_version"] = NcclVersion();
  std::vector<int> devs = devices;
  if (devs.empty()) {
    for (int d = 0; d < count; ++d) devs.push_back(d);
  }
  nlohmann::json gpus = nlohmann::json::array();
  for (int d : devs) {
    if (d < 0 || d >= count) continue;
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    nlohmann::json g = {{"index", d},
                        {"name", p.name},
                        {"cc_major", p.major},
                        {"cc_minor", p.minor},
                        {"sm_count", p.multiProcessorCount},
                        {"smem_per_block_optin", p.sharedMemPerBlockOptin},
                        {"smem_per_sm", p.sharedMemPerMultiprocessor},
                        {"regs_per_sm", p.regsPerMultiprocessor},
                        {"l2_bytes", p.l2CacheSize},
                        {"hbm_bytes", p.totalGlobalMem}};
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), d) == cudaSuccess) {
      g["pci_bus_id"] = bus;
      if (auto r = ReadNvml(bus)) {
        g["sm_clock_mhz"] = r->sm_clock_mhz;
        g["mem_clock_mhz"] = r->mem_clock_mhz;
        g["temperature_c"] = r->temperature_c;
        g["nvlink_active_links"] = r->nvlink_active_links;
        if (r->memory_bus_width_bits && r->mem_clock_mhz) {
          // HBM transfers on both clock edges: bytes/s = 2 * clock * width / 8.
          g["hbm_bandwidth_gbps"] =
              2.0 * r->mem_clock_mhz * 1e6 * r->memory_bus_width_bits / 8 / 1e9;
        }
      }
    }
    gpus.push_back(g);
  }
  card["gpus"] = gpus;
  nlohmann::json p2p = nlohmann::json::array();
  for (int a : devs) {
    nlohmann::json row = nlohmann::json::array();
    for (int b : devs) {
      int can = a == b ? 1 : 0;
      if (a != b) cudaDeviceCanAccessPeer(&can, a, b);
      row.push_back(can != 0);
    }
    p2p.push_back(row);
  }
  card["p2p"] = p2p;
  // The latency of one synchronisation round: a flag round trip between the
  // first two GPUs when they are peers, else inside the first one (ranks
  // that share it). Unknown (absent) when it cannot be measured.
  if (!devs.empty()) {
    const int a = devs[0];
    int b = a, peer = 0;
    if (devs.size() > 1 && cudaDeviceCanAccessPeer(&peer, a, devs[1]) == cudaSuccess && peer)
      b = devs[1];
    double us = 0;
    if (Status st = MeasureFlagRoundTrip(a, b, 2000, &us); st.ok()) {
      card["flag_round_trip"] = {{"us", us}, {"gpus", {a, b}}};
    } else {
      card["flag_round_trip"] = {{"error", st.message()}, {"gpus", {a, b}}};
    }
  }
  return card;
}

}  // namespace kforge::worker
