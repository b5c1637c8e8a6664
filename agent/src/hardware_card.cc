#include "kforge/agent/hardware_card.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <map>
#include <set>

#include "kforge/core/fs.h"
#include "kforge/core/json.h"

namespace kforge::agent {

namespace {

// Versions come as text in named profiles ("2.28.3") and as the libraries'
// integers in a probed card (NCCL 22803 = 2.28.3, CUDA 13000 = 13.0).
std::string VersionText(const nlohmann::json& card, const char* key, bool nccl) {
  auto it = card.find(key);
  if (it == card.end()) return "?";
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_number_integer()) return "?";
  int64_t v = it->get<int64_t>();
  if (nccl) return fmt::format("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
  return fmt::format("{}.{}", v / 1000, v % 1000 / 10);
}

}  // namespace
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Status FieldError(const fs::path& origin, const toml::node* node, std::string_view field,
                  std::string_view what) {
  int line = node ? static_cast<int>(node->source().begin.line) : 0;
  return Error(ErrorKind::kInvalidInput,
               fmt::format("{}:{}: {}: {}", origin.string(), line, field, what));
}

// Integer GPU facts a profile must give, in the probe's field names.
constexpr const char* kGpuIntFields[] = {
    "cc_major",    "cc_minor", "sm_count",  "smem_per_block_optin", "smem_per_sm",
    "regs_per_sm", "l2_bytes", "hbm_bytes", "sm_clock_mhz",         "mem_clock_mhz"};

std::string Bytes(double b) {
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.0f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.0f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.0f} KiB", b / 1024.0);
}

}  // namespace

Result<json> ParseHardwareProfile(std::string_view toml_text, const fs::path& origin) {
  toml::table root;
  try {
    root = toml::parse(toml_text, origin.string());
  } catch (const toml::parse_error& e) {
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("{}:{}: {}", origin.string(), e.source().begin.line,
                             std::string(e.description())));
  }
  static const std::set<std::string> kTop = {
      "name", "description", "world", "nccl_version", "cuda_driver_version", "cuda_runtime_version",
      "gpu",  "nvlink"};
  for (const auto& [k, node] : root) {
    if (!kTop.count(std::string(k.str())))
      return FieldError(origin, &node, k.str(), "unknown field");
  }
  json card = json::object();
  card["profile"] = root["name"].value_or(origin.stem().string());
  card["description"] = root["description"].value_or(std::string());
  auto world = root["world"].value<int64_t>();
  if (!world || *world < 1 || *world > 64) {
    return FieldError(origin, root.get("world"), "world", "expected an integer from 1 to 64");
  }
  for (const char* key : {"nccl_version", "cuda_driver_version", "cuda_runtime_version"}) {
    auto v = root[key].value<std::string>();
    if (!v) return FieldError(origin, root.get(key), key, "expected a string");
    card[key] = *v;
  }
  const toml::table* gpu = root["gpu"].as_table();
  if (!gpu) return FieldError(origin, root.get("gpu"), "gpu", "expected a table");
  json g = json::object();
  auto name = (*gpu)["name"].value<std::string>();
  if (!name) return FieldError(origin, gpu->get("name"), "gpu.name", "expected a string");
  g["name"] = *name;
  for (const char* key : kGpuIntFields) {
    auto v = (*gpu)[key].value<int64_t>();
    if (!v || *v < 0)
      return FieldError(origin, gpu->get(key), fmt::format("gpu.{}", key),
                        "expected a non-negative integer");
    g[key] = *v;
  }
  auto bw = (*gpu)["hbm_bandwidth_gbps"].value<double>();
  if (!bw || *bw <= 0)
    return FieldError(origin, gpu->get("hbm_bandwidth_gbps"), "gpu.hbm_bandwidth_gbps",
                      "expected a positive number");
  g["hbm_bandwidth_gbps"] = *bw;
  for (const auto& [k, node] : *gpu) {
    if (!g.contains(std::string(k.str())))
      return FieldError(origin, &node, fmt::format("gpu.{}", k.str()), "unknown field");
  }
  int64_t links = 0;
  double gbps = 0;
  if (const toml::node* n = root.get("nvlink")) {
    const toml::table* t = n->as_table();
    if (!t) return FieldError(origin, n, "nvlink", "expected a table");
    auto l = (*t)["links"].value<int64_t>();
    auto b = (*t)["gbps"].value<double>();
    if (!l || *l < 1)
      return FieldError(origin, t->get("links"), "nvlink.links", "expected a positive integer");
    if (!b || *b <= 0)
      return FieldError(origin, t->get("gbps"), "nvlink.gbps", "expected a positive number");
    for (const auto& [k, node] : *t) {
      if (k.str() != "links" && k.str() != "gbps")
        return FieldError(origin, &node, fmt::format("nvlink.{}", k.str()), "unknown field");
    }
    links = *l;
    gbps = *b;
  }
  int w = static_cast<int>(*world);
  json gpus = json::array();
  json p2p = json::array();
  json nvlink = json::array();
  for (int i = 0; i < w; ++i) {
    json gi = g;
    gi["index"] = i;
    gpus.push_back(gi);
    json row = json::array();
    for (int j = 0; j < w; ++j) {
      row.push_back(links > 0 || i == j);
      if (i != j && links > 0)
        nvlink.push_back({{"from", i}, {"to", j}, {"links", links}, {"gbps", gbps}});
    }
    p2p.push_back(row);
  }
  card["gpus"] = gpus;
  card["p2p"] = p2p;
  card["nvlink"] = nvlink;
  card["emulated"] = false;
  card["world"] = w;
  return card;
}

Result<json> LoadHardwareProfile(const fs::path& path) {
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseHardwareProfile(text, path);
}

Result<json> FindHardwareProfile(const std::string& name_or_path, const fs::path& prompts_dir) {
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".toml")) {
    return LoadHardwareProfile(name_or_path);
  }
  fs::path path = prompts_dir / "hardware" / (name_or_path + ".toml");
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    std::string known;
    for (const auto& n : ListHardwareProfiles(prompts_dir))
      known += (known.empty() ? "" : ", ") + n;
    return Error(ErrorKind::kNotFound,
                 fmt::format("no hardware profile '{}' in {} (known: {})", name_or_path,
                             path.parent_path().string(), known));
  }
  return LoadHardwareProfile(path);
}

std::vector<std::string> ListHardwareProfiles(const fs::path& prompts_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(prompts_dir / "hardware", ec)) {
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

json TrimHardware(const json& card, int world) {
  json out = card;
  const json gpus = card.value("gpus", json::array());
  if (world <= 0 || static_cast<size_t>(world) >= gpus.size()) return out;
  out["gpus"] = json(std::vector<json>(gpus.begin(), gpus.begin() + world));
  json p2p = json::array();
  const json in_p2p = card.value("p2p", json::array());
  for (int i = 0; i < world && static_cast<size_t>(i) < in_p2p.size(); ++i) {
    const json& row = in_p2p[i];
    p2p.push_back(
        json(std::vector<json>(row.begin(), row.begin() + std::min<size_t>(world, row.size()))));
  }
  out["p2p"] = p2p;
  json nvlink = json::array();
  for (const auto& l : card.value("nvlink", json::array())) {
    if (l.value("from", 0) < world && l.value("to", 0) < world) nvlink.push_back(l);
  }
  out["nvlink"] = nvlink;
  out["world"] = world;
  return out;
}

double LinkPeakGbps(const json& card) {
  double peak = 0;
  for (const auto& l : card.value("nvlink", json::array())) {
    if (l.value("from", -1) == 0) peak = std::max(peak, JsonNumber(l, "gbps"));
  }
  return peak;
}

std::string RenderHardwareCard(const json& card) {
  std::string out = "## Hardware\n\n";
  const json gpus = card.value("gpus", json::array());
  std::map<std::string, int> by_name;
  for (const auto& g : gpus) by_name[g.value("name", std::string("unknown GPU"))]++;
  for (const auto& [name, count] : by_name) {
    const json* g = nullptr;
    for (const auto& x : gpus) {
      if (x.value("name", std::string("unknown GPU")) == name) {
        g = &x;
        break;
      }
    }
    int ccM = static_cast<int>(JsonIntIn(*g, "cc_major", 0, 1 << 30, 0)),
        ccm = static_cast<int>(JsonIntIn(*g, "cc_minor", 0, 1 << 30, 0));
    out += fmt::format("- {} x {} (compute capability {}.{}, nvcc arch sm_{}{}{}), {} SMs\n", count,
                       name, ccM, ccm, ccM, ccm, ccM >= 9 ? "a" : "",
                       static_cast<int>(JsonIntIn(*g, "sm_count", 0, 1 << 30, 0)));
    out += fmt::format(
        "- per SM: {} shared memory ({} per block with the opt-in attribute), {} 32-bit "
        "registers\n",
        Bytes(JsonNumber(*g, "smem_per_sm")), Bytes(JsonNumber(*g, "smem_per_block_optin")),
        JsonIntIn(*g, "regs_per_sm", 0, INT64_MAX, 0));
    out += fmt::format("- L2 cache {}; HBM {} at {:.0f} GB/s\n", Bytes(JsonNumber(*g, "l2_bytes")),
                       Bytes(JsonNumber(*g, "hbm_bytes")), JsonNumber(*g, "hbm_bandwidth_gbps"));
    out += fmt::format("- clocks: SM {:.0f} MHz, memory {:.0f} MHz\n",
                       JsonNumber(*g, "sm_clock_mhz"), JsonNumber(*g, "mem_clock_mhz"));
  }
  const json p2p = card.value("p2p", json::array());
  size_t n = gpus.size();
  bool all_p2p = n > 0;
  for (size_t i = 0; i < p2p.size(); ++i) {
    for (size_t j = 0; j < p2p[i].size(); ++j)
      all_p2p = all_p2p && p2p[i][j].is_boolean() && p2p[i][j].get<bool>();
  }
  if (n > 1) {
    out +=
        all_p2p
            ? "- peer access (P2P): every GPU can load from and store to every other GPU's memory\n"
            : "- peer access (P2P): NOT available between every pair; see the matrix below\n";
    if (!all_p2p) {
      for (size_t i = 0; i < p2p.size(); ++i) {
        std::string row;
        for (const auto& v : p2p[i]) row += (v.is_boolean() && v.get<bool>()) ? " Y" : " .";
        out += fmt::format("  - GPU {}:{}\n", i, row);
      }
    }
  }
  const json nvlink = card.value("nvlink", json::array());
  std::set<std::pair<int64_t, double>> kinds;
  for (const auto& l : nvlink) kinds.insert({l.value("links", int64_t{0}), JsonNumber(l, "gbps")});
  int64_t probed_links = 0;  // the probe reports active links per GPU, not per peer
  for (const auto& g : gpus)
    probed_links = std::max<int64_t>(probed_links, g.value("nvlink_active_links", int64_t{0}));
  if (nvlink.empty() && n > 1 && probed_links > 0) {
    out += fmt::format("- NVLink: {} active links per GPU\n", probed_links);
  } else if (nvlink.empty() && n > 1) {
    out += "- NVLink: none reported (peer traffic goes over PCIe)\n";
  } else if (kinds.size() == 1 && nvlink.size() == n * (n - 1)) {
    out += fmt::format("- NVLink: every GPU pair, {} links, {:.0f} GB/s per direction per GPU\n",
                       kinds.begin()->first, kinds.begin()->second);
  } else {
    for (const auto& l : nvlink) {
      out += fmt::format("  - NVLink GPU {} -> GPU {}: {} links, {:.0f} GB/s\n", l.value("from", 0),
                         l.value("to", 0), l.value("links", int64_t{0}), JsonNumber(l, "gbps"));
    }
  }
  out += fmt::format("- NCCL {}, CUDA driver {}, CUDA runtime {}\n",
                     VersionText(card, "nccl_version", true),
                     VersionText(card, "cuda_driver_version", false),
                     VersionText(card, "cuda_runtime_version", false));
  if (card.value("emulated", false)) {
    out +=
        "- EMULATED: ranks share GPUs, so timings do not reflect NVLink; correctness is what "
        "counts here\n";
  }
  return out;
}

}  // namespace kforge::agent
