#include "kforge/evaluator/resource_usage.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "demangle.h"
#include "kforge/core/scan.h"

namespace kforge::eval {
namespace {

constexpr std::string_view kInfo = "ptxas info";
constexpr size_t kMaxNameBytes = 512;  // a name kept for display (longer ones are cut)
constexpr int64_t kMaxCount = 65536;   // registers or barriers beyond this are not read

// Calls f(line) for every line of `text`, without its '\n' or a trailing '\r'.
template <typename F>
void ForEachLine(std::string_view text, F f) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    if (line.ends_with('\r')) line.remove_suffix(1);
    f(line);
    begin = end + 1;
  }
}

// "ptxas info    : <rest>" -> rest; nullopt for any other line.
std::optional<std::string_view> InfoText(std::string_view line) {
  if (!line.starts_with(kInfo)) return std::nullopt;
  size_t p = scan::SkipWhile(line, kInfo.size(), [](char c) { return c == ' '; });
  if (!scan::At(line, p, ": ")) return std::nullopt;
  return line.substr(p + 2);
}

// A property line under "Function properties for X": "    0 bytes stack frame, ...".
bool IsPropertyLine(std::string_view line) {
  size_t p = scan::SkipWhile(line, 0, [](char c) { return c == ' ' || c == '\t'; });
  return p > 0 && p < line.size() && scan::IsDigit(line[p]) &&
         line.find("bytes stack frame") != std::string_view::npos;
}

// The text between the quotes at `open` and the next one, or nullopt.
std::optional<std::string_view> Quoted(std::string_view s, size_t open) {
  if (open >= s.size() || s[open] != '\'') return std::nullopt;
  size_t close = s.find('\'', open + 1);
  if (close == std::string_view::npos) return std::nullopt;
  return s.substr(open + 1, close - open - 1);
}

// Calls f(count, what) for every ", "-separated "N what" item of `list`
// ("Used 40 registers", "used 1 barriers", "4096 bytes smem", ...).
template <typename F>
void ForEachCount(std::string_view list, F f) {
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(", ", begin);
    if (end == std::string_view::npos) end = list.size();
    std::string_view item = list.substr(begin, end - begin);
    if (item.starts_with("Used ") || item.starts_with("used ")) item.remove_prefix(5);
    size_t digits = scan::SkipWhile(item, 0, scan::IsDigit);
    if (digits > 0 && digits <= 12 && scan::At(item, digits, " ")) {
      int64_t n = 0;
      for (size_t i = 0; i < digits; ++i) n = n * 10 + (item[i] - '0');
      f(n, item.substr(digits + 1));
    }
    begin = end + 2;
  }
}

std::string DisplayName(std::string_view mangled) {
  std::string name = Demangle(mangled);
  if (name.size() > kMaxNameBytes) name = name.substr(0, kMaxNameBytes) + "...";
  return name;
}

}  // namespace

int KernelResources::MaxWarpsPerSm() const {
  if (!arch.starts_with("sm_")) return 0;
  const size_t end = scan::SkipWhile(arch, 3, scan::IsDigit);
  if (end == 3 || end > 6) return 0;
  const int cc = std::stoi(arch.substr(3, end - 3));
  switch (cc) {
    case 70:
    case 72:
    case 80:
    case 90:
    case 100:
    case 101:
    case 103:
    case 110:
      return 64;
    case 75:
      return 32;
    case 86:
    case 87:
    case 89:
    case 120:
    case 121:
      return 48;
    default:
      return 0;
  }
}

int KernelResources::WarpsPerSmByRegisters() const {
  const int max_warps = MaxWarpsPerSm();
  if (!entry || max_warps == 0) return 0;
  constexpr int kRegistersPerSm = 65536, kWarpGranule = 256;
  const int per_warp = (registers * 32 + kWarpGranule - 1) / kWarpGranule * kWarpGranule;
  return per_warp == 0 ? max_warps : std::min(max_warps, kRegistersPerSm / per_warp);
}

std::string KernelResources::Summary() const {
  auto bytes = [](int64_t b) {
    return b >= 1024 && b % 1024 == 0 ? fmt::format("{} KiB", b / 1024) : fmt::format("{} B", b);
  };
  std::string out;
  if (entry) {
    out = fmt::format("{} registers", registers);
    const int warps = WarpsPerSmByRegisters();
    if (warps > 0 && warps < MaxWarpsPerSm()) {
      out += fmt::format(" (at most {} of {} warps per SM)", warps, MaxWarpsPerSm());
    }
  } else {
    out = "device function";
  }
  if (shared_bytes > 0) out += fmt::format(", {} static shared memory", bytes(shared_bytes));
  if (stack_bytes > 0) out += fmt::format(", {} stack", bytes(stack_bytes));
  if (spill_store_bytes > 0 || spill_load_bytes > 0) {
    out += fmt::format("; spills {} stored, {} loaded", bytes(spill_store_bytes),
                       bytes(spill_load_bytes));
  }
  return out;
}

nlohmann::json KernelResources::ToJson() const {
  return {{"name", name},
          {"arch", arch},
          {"entry", entry},
          {"registers", registers},
          {"barriers", barriers},
          {"shared_bytes", shared_bytes},
          {"stack_bytes", stack_bytes},
          {"spill_store_bytes", spill_store_bytes},
          {"spill_load_bytes", spill_load_bytes},
          {"warps_per_sm_by_registers", WarpsPerSmByRegisters()},
          {"max_warps_per_sm", MaxWarpsPerSm()},
          {"summary", Summary()}};
}

std::optional<KernelResources> KernelResources::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return std::nullopt;
  try {
    KernelResources r;
    r.name = j.at("name").get<std::string>();
    r.arch = j.at("arch").get<std::string>();
    r.entry = j.at("entry").get<bool>();
    r.registers = j.at("registers").get<int>();
    r.barriers = j.at("barriers").get<int>();
    r.shared_bytes = j.at("shared_bytes").get<int64_t>();
    r.stack_bytes = j.at("stack_bytes").get<int64_t>();
    r.spill_store_bytes = j.at("spill_store_bytes").get<int64_t>();
    r.spill_load_bytes = j.at("spill_load_bytes").get<int64_t>();
    return r;
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;
  }
}

std::vector<KernelResources> ParseResourceUsage(std::string_view log) {
  std::vector<KernelResources> out;
  std::vector<std::string_view> mangled;  // out[i]'s name as ptxas printed it
  std::optional<size_t> current;          // the entry function being compiled
  std::optional<std::string_view> properties_of;
  ForEachLine(log, [&](std::string_view line) {
    if (properties_of && IsPropertyLine(line)) {
      KernelResources props;
      ForEachCount(line.substr(scan::SkipWhile(line, 0, scan::IsSpace)),
                   [&](int64_t n, std::string_view what) {
                     if (what == "bytes stack frame") props.stack_bytes = n;
                     if (what == "bytes spill stores") props.spill_store_bytes = n;
                     if (what == "bytes spill loads") props.spill_load_bytes = n;
                   });
      KernelResources* target = nullptr;
      if (current && mangled[*current] == *properties_of) {
        target = &out[*current];
      } else if ((props.stack_bytes > 0 || props.spill_store_bytes > 0 ||
                  props.spill_load_bytes > 0) &&
                 out.size() < kMaxKernelResources) {
        out.push_back({.name = DisplayName(*properties_of), .entry = false});
        mangled.push_back(*properties_of);
        target = &out.back();
      }
      if (target != nullptr) {
        target->stack_bytes = props.stack_bytes;
        target->spill_store_bytes = props.spill_store_bytes;
        target->spill_load_bytes = props.spill_load_bytes;
      }
      properties_of.reset();
      return;
    }
    properties_of.reset();
    std::optional<std::string_view> info = InfoText(line);
    if (!info) return;
    constexpr std::string_view kEntry = "Compiling entry function ";
    constexpr std::string_view kProps = "Function properties for ";
    if (info->starts_with(kEntry)) {
      current.reset();
      std::optional<std::string_view> name = Quoted(*info, kEntry.size());
      if (!name || out.size() >= kMaxKernelResources) return;
      KernelResources k;
      k.name = DisplayName(*name);
      size_t arch = info->find(" for '", kEntry.size() + name->size() + 2);
      if (arch != std::string_view::npos)
        k.arch = std::string(Quoted(*info, arch + 5).value_or(""));
      out.push_back(std::move(k));
      mangled.push_back(*name);
      current = out.size() - 1;
    } else if (info->starts_with(kProps)) {
      std::string_view name = info->substr(kProps.size());
      while (!name.empty() && scan::IsSpace(name.back())) name.remove_suffix(1);
      properties_of = name;
    } else if (info->starts_with("Used ") && current) {
      KernelResources& k = out[*current];
      ForEachCount(*info, [&](int64_t n, std::string_view what) {
        // A thread has at most 255 registers and a block 16 barriers; a
        // larger count is not one (and would overflow the occupancy math).
        if (what == "registers" && n <= kMaxCount) k.registers = static_cast<int>(n);
        if (what == "barriers" && n <= kMaxCount) k.barriers = static_cast<int>(n);
        if (what == "bytes smem") k.shared_bytes = n;
      });
    }
  });
  return out;
}

std::string StripResourceUsage(std::string_view log) {
  std::string out;
  out.reserve(log.size());
  bool after_properties = false;
  size_t begin = 0;
  while (begin < log.size()) {
    size_t end = log.find('\n', begin);
    const size_t next = end == std::string_view::npos ? log.size() : end + 1;
    std::string_view line =
        log.substr(begin, (end == std::string_view::npos ? log.size() : end) - begin);
    std::string_view bare = line.ends_with('\r') ? line.substr(0, line.size() - 1) : line;
    const bool property = after_properties && IsPropertyLine(bare);
    std::optional<std::string_view> info = InfoText(bare);
    after_properties = info && info->starts_with("Function properties for ");
    if (!info && !property) out.append(log.substr(begin, next - begin));
    begin = next;
  }
  return out;
}

}  // namespace kforge::eval
