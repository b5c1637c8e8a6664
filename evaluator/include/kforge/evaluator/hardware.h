// The hardware card: what the GPUs an evaluation (or a run's prompts) use can
// do. Probed by running `kforge-worker --probe` (the coordinator itself never
// initialises CUDA), or built from a named profile (agent's hardware_card.h);
// stored with every run and sent to eval-server clients as its JSON.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::eval {

struct GpuInfo {
  int index = 0;  // the CUDA device index
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int64_t smem_per_block_optin = 0, smem_per_sm = 0, regs_per_sm = 0;
  int64_t l2_bytes = 0, hbm_bytes = 0;
  std::string pci_bus_id;  // probed only
  // From NVML (probed) or the profile; absent when unknown.
  std::optional<double> sm_clock_mhz, mem_clock_mhz, temperature_c, hbm_bandwidth_gbps;
  std::optional<int> nvlink_active_links;
};

// One direction of an NVLink connection (named profiles; the probe reports
// active links per GPU instead).
struct NvLinkPath {
  int from = 0, to = 0;
  int links = 0;
  double gbps = 0;  // per direction
};

struct HardwareCard {
  std::string profile, description;  // a named profile's; empty when probed
  int device_count = 0;              // CUDA devices visible to the probe
  // Versions as text: "2.28.3", "13.0" (the probe's integers converted).
  std::string nccl_version, cuda_driver_version, cuda_runtime_version;
  std::vector<GpuInfo> gpus;
  std::vector<std::vector<bool>> p2p;  // [i][j]: GPU i can access GPU j's memory
  std::vector<NvLinkPath> nvlink;
  // The probe's flag round trip between its first two GPUs (peers), or inside
  // its one GPU: what one synchronisation round costs at least, twice (the
  // floor's latency term takes half). Absent when not measured.
  std::optional<double> flag_round_trip_us;
  bool emulated = false;  // ranks share GPUs
  int world = 0;          // the ranks the card describes (0: one per GPU)
  std::string error;      // why the probe found no usable GPU

  bool has_gpu() const { return !gpus.empty(); }
  // The CUDA device indices of the card's GPUs, in order.
  std::vector<int> DeviceIndices() const;
  // The card restricted to its first `world` GPUs (p2p and nvlink trimmed to
  // match); the card itself when world <= 0 or covers every GPU.
  HardwareCard Trimmed(int world) const;
  // The largest NVLink bandwidth (GB/s, one direction) from the first GPU to
  // a peer, the figure busbw is compared against; 0 when the card has none.
  double LinkPeakGbps() const;
};

// The card's JSON (docs/agent.md "Hardware card"); FromJson reads what ToJson
// writes and the older shape (integer versions), and names the field it
// refuses.
nlohmann::json ToJson(const HardwareCard& card);
Result<HardwareCard> HardwareCardFromJson(const nlohmann::json& json);
nlohmann::json ToJson(const GpuInfo& gpu);

// Probes the GPUs (all visible ones, or `gpus`). kNotFound when there is no
// usable GPU (the message says why).
Result<HardwareCard> ProbeHardware(const std::vector<int>& gpus = {},
                                   std::filesystem::path worker_path = {});

// The kforge-worker binary: $KFORGE_WORKER, else next to the running executable.
std::filesystem::path DefaultWorkerPath();

}  // namespace kforge::eval
