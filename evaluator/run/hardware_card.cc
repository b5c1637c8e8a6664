// The hardware card's one JSON writer and reader, and what callers ask of it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kforge/core/json.h"
#include "kforge/evaluator/hardware.h"

namespace kforge::eval {

namespace {

using nlohmann::json;

Status FieldError(std::string_view field, std::string_view what) {
  return Error(ErrorKind::kInvalidInput,
               fmt::format("hardware card: field \"{}\" {}", field, what));
}

// Versions come as text in named profiles ("2.28.3") and as the libraries'
// integers from the probe (NCCL 22803 = 2.28.3, CUDA 13000 = 13.0).
std::string VersionText(const json& card, const char* key, bool nccl) {
  const json& v = JsonField(card, key);
  if (v.is_string()) return v.get<std::string>();
  if (!v.is_number_integer()) return "";
  const int64_t n = v.get<int64_t>();
  if (nccl) return fmt::format("{}.{}.{}", n / 10000, n / 100 % 100, n % 100);
  return fmt::format("{}.{}", n / 1000, n % 1000 / 10);
}

void PutOpt(json& j, const char* key, const std::optional<double>& v) {
  if (v) j[key] = *v;
}

Result<GpuInfo> GpuFromJson(const json& g, size_t i) {
  const std::string at = fmt::format("gpus[{}]", i);
  if (!g.is_object()) return FieldError(at, "is not an object");
  GpuInfo out;
  for (const char* key : {"index", "cc_major", "cc_minor", "sm_count"}) {
    const json& v = JsonField(g, key);
    if (!v.is_null() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
      return FieldError(at + "." + key, "is not a non-negative integer");
  }
  out.index = static_cast<int>(JsonIntIn(g, "index", 0, 1 << 20, 0));
  out.name = JsonString(g, "name");
  out.cc_major = static_cast<int>(JsonIntIn(g, "cc_major", 0, 100, 0));
  out.cc_minor = static_cast<int>(JsonIntIn(g, "cc_minor", 0, 100, 0));
  out.sm_count = static_cast<int>(JsonIntIn(g, "sm_count", 0, 1 << 20, 0));
  out.smem_per_block_optin = JsonIntIn(g, "smem_per_block_optin", 0, INT64_MAX, 0);
  out.smem_per_sm = JsonIntIn(g, "smem_per_sm", 0, INT64_MAX, 0);
  out.regs_per_sm = JsonIntIn(g, "regs_per_sm", 0, INT64_MAX, 0);
  out.l2_bytes = JsonIntIn(g, "l2_bytes", 0, INT64_MAX, 0);
  out.hbm_bytes = JsonIntIn(g, "hbm_bytes", 0, INT64_MAX, 0);
  out.pci_bus_id = JsonString(g, "pci_bus_id");
  out.sm_clock_mhz = JsonOptNumber(g, "sm_clock_mhz");
  out.mem_clock_mhz = JsonOptNumber(g, "mem_clock_mhz");
  out.temperature_c = JsonOptNumber(g, "temperature_c");
  out.hbm_bandwidth_gbps = JsonOptNumber(g, "hbm_bandwidth_gbps");
  if (auto links = JsonOptInt(g, "nvlink_active_links"))
    out.nvlink_active_links = static_cast<int>(std::clamp<int64_t>(*links, 0, 1 << 10));
  return out;
}

}  // namespace

json ToJson(const GpuInfo& g) {
  json j = {{"index", g.index},
            {"name", g.name},
            {"cc_major", g.cc_major},
            {"cc_minor", g.cc_minor},
            {"sm_count", g.sm_count},
            {"smem_per_block_optin", g.smem_per_block_optin},
            {"smem_per_sm", g.smem_per_sm},
            {"regs_per_sm", g.regs_per_sm},
            {"l2_bytes", g.l2_bytes},
            {"hbm_bytes", g.hbm_bytes}};
  if (!g.pci_bus_id.empty()) j["pci_bus_id"] = g.pci_bus_id;
  PutOpt(j, "sm_clock_mhz", g.sm_clock_mhz);
  PutOpt(j, "mem_clock_mhz", g.mem_clock_mhz);
  PutOpt(j, "temperature_c", g.temperature_c);
  PutOpt(j, "hbm_bandwidth_gbps", g.hbm_bandwidth_gbps);
  if (g.nvlink_active_links) j["nvlink_active_links"] = *g.nvlink_active_links;
  return j;
}

json ToJson(const HardwareCard& card) {
  json j = json::object();
  if (!card.profile.empty()) j["profile"] = card.profile;
  if (!card.description.empty()) j["description"] = card.description;
  j["device_count"] = card.device_count;
  j["nccl_version"] = card.nccl_version;
  j["cuda_driver_version"] = card.cuda_driver_version;
  j["cuda_runtime_version"] = card.cuda_runtime_version;
  j["gpus"] = json::array();
  for (const GpuInfo& g : card.gpus) j["gpus"].push_back(ToJson(g));
  j["p2p"] = card.p2p;
  if (card.flag_round_trip_us) j["flag_round_trip"] = {{"us", *card.flag_round_trip_us}};
  j["nvlink"] = json::array();
  for (const NvLinkPath& l : card.nvlink)
    j["nvlink"].push_back({{"from", l.from}, {"to", l.to}, {"links", l.links}, {"gbps", l.gbps}});
  j["emulated"] = card.emulated;
  j["world"] = card.world;
  if (!card.error.empty()) j["error"] = card.error;
  return j;
}

Result<HardwareCard> HardwareCardFromJson(const json& j) {
  if (!j.is_object()) return Error(ErrorKind::kInvalidInput, "hardware card: not a JSON object");
  HardwareCard card;
  card.profile = JsonString(j, "profile");
  card.description = JsonString(j, "description");
  card.device_count = static_cast<int>(JsonIntIn(j, "device_count", 0, 1 << 20, 0));
  card.nccl_version = VersionText(j, "nccl_version", true);
  card.cuda_driver_version = VersionText(j, "cuda_driver_version", false);
  card.cuda_runtime_version = VersionText(j, "cuda_runtime_version", false);
  card.error = JsonString(j, "error");
  card.emulated = JsonBool(j, "emulated");
  card.world = static_cast<int>(JsonIntIn(j, "world", 0, 1 << 20, 0));
  const json& gpus = JsonField(j, "gpus");
  if (!gpus.is_null() && !gpus.is_array()) return FieldError("gpus", "is not an array");
  for (size_t i = 0; gpus.is_array() && i < gpus.size(); ++i) {
    KF_ASSIGN_OR_RETURN(GpuInfo g, GpuFromJson(gpus[i], i));
    card.gpus.push_back(std::move(g));
  }
  const json& p2p = JsonField(j, "p2p");
  if (!p2p.is_null() && !p2p.is_array()) return FieldError("p2p", "is not an array");
  for (size_t i = 0; p2p.is_array() && i < p2p.size(); ++i) {
    if (!p2p[i].is_array()) return FieldError(fmt::format("p2p[{}]", i), "is not an array");
    std::vector<bool> row;
    for (const json& v : p2p[i]) row.push_back(v.is_boolean() && v.get<bool>());
    card.p2p.push_back(std::move(row));
  }
  if (const json& rt = JsonField(j, "flag_round_trip"); rt.is_object()) {
    const double us = JsonNumber(rt, "us");
    if (us > 0 && std::isfinite(us)) card.flag_round_trip_us = us;
  }
  const json& nvlink = JsonField(j, "nvlink");
  if (!nvlink.is_null() && !nvlink.is_array()) return FieldError("nvlink", "is not an array");
  for (size_t i = 0; nvlink.is_array() && i < nvlink.size(); ++i) {
    const json& l = nvlink[i];
    if (!l.is_object()) return FieldError(fmt::format("nvlink[{}]", i), "is not an object");
    card.nvlink.push_back({static_cast<int>(JsonIntIn(l, "from", 0, 1 << 20, 0)),
                           static_cast<int>(JsonIntIn(l, "to", 0, 1 << 20, 0)),
                           static_cast<int>(JsonIntIn(l, "links", 0, 1 << 10, 0)),
                           JsonNumber(l, "gbps")});
  }
  return card;
}

std::vector<int> HardwareCard::DeviceIndices() const {
  std::vector<int> out;
  for (const GpuInfo& g : gpus) out.push_back(g.index);
  return out;
}

HardwareCard HardwareCard::Trimmed(int w) const {
  HardwareCard out = *this;
  if (w <= 0 || static_cast<size_t>(w) >= gpus.size()) return out;
  out.gpus.resize(static_cast<size_t>(w));
  out.p2p.clear();
  for (size_t i = 0; i < static_cast<size_t>(w) && i < p2p.size(); ++i) {
    std::vector<bool> row(p2p[i].begin(),
                          p2p[i].begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(
                                               static_cast<size_t>(w), p2p[i].size())));
    out.p2p.push_back(std::move(row));
  }
  out.nvlink.clear();
  for (const NvLinkPath& l : nvlink) {
    if (l.from < w && l.to < w) out.nvlink.push_back(l);
  }
  out.world = w;
  return out;
}

double HardwareCard::LinkPeakGbps() const {
  double peak = 0;
  for (const NvLinkPath& l : nvlink) {
    if (l.from == 0) peak = std::max(peak, l.gbps);
  }
  return peak;
}

}  // namespace kforge::eval
