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

Result<eval::HardwareCard> ParseHardwareProfile(std::string_view toml_text,
                                                const fs::path& origin) {
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
  eval::HardwareCard card;
  card.profile = root["name"].value_or(origin.stem().string());
  card.description = root["description"].value_or(std::string());
  auto world = root["world"].value<int64_t>();
  if (!world || *world < 1 || *world > 64) {
    return FieldError(origin, root.get("world"), "world", "expected an integer from 1 to 64");
  }
  for (auto [key, field] : {std::pair{"nccl_version", &card.nccl_version},
                            std::pair{"cuda_driver_version", &card.cuda_driver_version},
                            std::pair{"cuda_runtime_version", &card.cuda_runtime_version}}) {
    auto v = root[key].value<std::string>();
    if (!v) return FieldError(origin, root.get(key), key, "expected a string");
    *field = *v;
  }
  const toml::table* gpu = root["gpu"].as_table();
  if (!gpu) return FieldError(origin, root.get("gpu"), "gpu", "expected a table");
  eval::GpuInfo g;
  auto name = (*gpu)["name"].value<std::string>();
  if (!name) return FieldError(origin, gpu->get("name"), "gpu.name", "expected a string");
  g.name = *name;
  std::map<std::string, int64_t> ints;
  for (const char* key : kGpuIntFields) {
    auto v = (*gpu)[key].value<int64_t>();
    if (!v || *v < 0)
      return FieldError(origin, gpu->get(key), fmt::format("gpu.{}", key),
                        "expected a non-negative integer");
    ints[key] = *v;
  }
  auto bw = (*gpu)["hbm_bandwidth_gbps"].value<double>();
  if (!bw || *bw <= 0)
    return FieldError(origin, gpu->get("hbm_bandwidth_gbps"), "gpu.hbm_bandwidth_gbps",
                      "expected a positive number");
  for (const auto& [k, node] : *gpu) {
    const std::string key(k.str());
    if (key != "name" && key != "hbm_bandwidth_gbps" && !ints.count(key))
      return FieldError(origin, &node, fmt::format("gpu.{}", key), "unknown field");
  }
  const auto small = [&](const char* key) {
    return static_cast<int>(std::min<int64_t>(ints[key], 1 << 30));
  };
  g.cc_major = small("cc_major");
  g.cc_minor = small("cc_minor");
  g.sm_count = small("sm_count");
  g.smem_per_block_optin = ints["smem_per_block_optin"];
  g.smem_per_sm = ints["smem_per_sm"];
  g.regs_per_sm = ints["regs_per_sm"];
  g.l2_bytes = ints["l2_bytes"];
  g.hbm_bytes = ints["hbm_bytes"];
  g.sm_clock_mhz = static_cast<double>(ints["sm_clock_mhz"]);
  g.mem_clock_mhz = static_cast<double>(ints["mem_clock_mhz"]);
  g.hbm_bandwidth_gbps = *bw;
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
  const int w = static_cast<int>(*world);
  for (int i = 0; i < w; ++i) {
    eval::GpuInfo gi = g;
    gi.index = i;
    card.gpus.push_back(gi);
    std::vector<bool> row;
    for (int j = 0; j < w; ++j) {
      row.push_back(links > 0 || i == j);
      if (i != j && links > 0) card.nvlink.push_back({i, j, static_cast<int>(links), gbps});
    }
    card.p2p.push_back(std::move(row));
  }
  card.device_count = w;
  card.emulated = false;
  card.world = w;
  return card;
}

Result<eval::HardwareCard> LoadHardwareProfile(const fs::path& path) {
  KF_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseHardwareProfile(text, path);
}

Result<eval::HardwareCard> FindHardwareProfile(const std::string& name_or_path,
                                               const fs::path& prompts_dir) {
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

std::string RenderHardwareCard(const eval::HardwareCard& card) {
  std::string out = "## Hardware\n\n";
  const auto name_of = [](const eval::GpuInfo& g) {
    return g.name.empty() ? std::string("unknown GPU") : g.name;
  };
  std::map<std::string, int> by_name;
  for (const auto& g : card.gpus) by_name[name_of(g)]++;
  for (const auto& entry : by_name) {
    // Not a structured binding: clang 14 cannot capture one in a lambda.
    const std::string& name = entry.first;
    const int count = entry.second;
    const eval::GpuInfo& g =
        *std::find_if(card.gpus.begin(), card.gpus.end(),
                      [&](const eval::GpuInfo& x) { return name_of(x) == name; });
    out += fmt::format("- {} x {} (compute capability {}.{}, nvcc arch sm_{}{}{}), {} SMs\n", count,
                       name, g.cc_major, g.cc_minor, g.cc_major, g.cc_minor,
                       g.cc_major >= 9 ? "a" : "", g.sm_count);
    out += fmt::format(
        "- per SM: {} shared memory ({} per block with the opt-in attribute), {} 32-bit "
        "registers\n",
        Bytes(static_cast<double>(g.smem_per_sm)),
        Bytes(static_cast<double>(g.smem_per_block_optin)), g.regs_per_sm);
    out += fmt::format("- L2 cache {}; HBM {} at {:.0f} GB/s\n",
                       Bytes(static_cast<double>(g.l2_bytes)),
                       Bytes(static_cast<double>(g.hbm_bytes)), g.hbm_bandwidth_gbps.value_or(0));
    out += fmt::format("- clocks: SM {:.0f} MHz, memory {:.0f} MHz\n", g.sm_clock_mhz.value_or(0),
                       g.mem_clock_mhz.value_or(0));
  }
  const size_t n = card.gpus.size();
  bool all_p2p = n > 0;
  for (const auto& row : card.p2p) {
    for (bool v : row) all_p2p = all_p2p && v;
  }
  if (n > 1) {
    out +=
        all_p2p
            ? "- peer access (P2P): every GPU can load from and store to every other GPU's memory\n"
            : "- peer access (P2P): NOT available between every pair; see the matrix below\n";
    if (!all_p2p) {
      for (size_t i = 0; i < card.p2p.size(); ++i) {
        std::string row;
        for (bool v : card.p2p[i]) row += v ? " Y" : " .";
        out += fmt::format("  - GPU {}:{}\n", i, row);
      }
    }
  }
  std::set<std::pair<int, double>> kinds;
  for (const auto& l : card.nvlink) kinds.insert({l.links, l.gbps});
  int probed_links = 0;  // the probe reports active links per GPU, not per peer
  for (const auto& g : card.gpus)
    probed_links = std::max(probed_links, g.nvlink_active_links.value_or(0));
  if (card.nvlink.empty() && n > 1 && probed_links > 0) {
    out += fmt::format("- NVLink: {} active links per GPU\n", probed_links);
  } else if (card.nvlink.empty() && n > 1) {
    out += "- NVLink: none reported (peer traffic goes over PCIe)\n";
  } else if (kinds.size() == 1 && card.nvlink.size() == n * (n - 1)) {
    out += fmt::format("- NVLink: every GPU pair, {} links, {:.0f} GB/s per direction per GPU\n",
                       kinds.begin()->first, kinds.begin()->second);
  } else {
    for (const auto& l : card.nvlink) {
      out += fmt::format("  - NVLink GPU {} -> GPU {}: {} links, {:.0f} GB/s\n", l.from, l.to,
                         l.links, l.gbps);
    }
  }
  const auto text = [](const std::string& v) { return v.empty() ? std::string("?") : v; };
  out += fmt::format("- NCCL {}, CUDA driver {}, CUDA runtime {}\n", text(card.nccl_version),
                     text(card.cuda_driver_version), text(card.cuda_runtime_version));
  if (card.emulated) {
    out +=
        "- EMULATED: ranks share GPUs, so timings do not reflect NVLink; correctness is what "
        "counts here\n";
  }
  return out;
}

}  // namespace kforge::agent
