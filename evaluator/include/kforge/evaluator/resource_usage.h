// What ptxas reports of each kernel it compiled (nvcc -Xptxas -v): registers,
// static shared memory, stack and register spills. Stored with every compile
// (and its cache entry), reported in the evaluation's `compile.resources`,
// and condensed into the feedback the model reads.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kforge::eval {

struct KernelResources {
  std::string name;   // demangled, as the source spells it
  std::string arch;   // "sm_90a"; "" for a device function
  bool entry = true;  // a __global__ function; false: a non-inlined device function
  int registers = 0;  // per thread
  int barriers = 0;
  // Static __shared__ per block (dynamic shared memory is a launch parameter,
  // not known here).
  int64_t shared_bytes = 0;
  int64_t stack_bytes = 0;  // the stack frame
  int64_t spill_store_bytes = 0;
  int64_t spill_load_bytes = 0;

  bool operator==(const KernelResources&) const = default;
  // How many warps of an SM the registers leave room for (65536 registers per
  // SM, allocated per warp in units of 256), at most the arch's warp limit;
  // 0 for a device function or an unknown arch. An upper bound: blocks are
  // resident whole, and shared memory and the block limit may allow fewer.
  int WarpsPerSmByRegisters() const;
  // The arch's warps per SM (64 on sm_80, sm_90, sm_100; 48 on sm_86, sm_89,
  // sm_120); 0 when unknown.
  int MaxWarpsPerSm() const;
  // One line for people and models: "40 registers (at most 51 of 64 warps
  // per SM), 4 KiB static shared memory, 256 B stack; spills 96 B stored,
  // 96 B loaded". Only what is non-zero besides the registers.
  std::string Summary() const;
  // One item of `compile.resources` in docs/eval-result.md (with the two
  // occupancy figures and the summary above).
  nlohmann::json ToJson() const;
  // The inverse of ToJson; nullopt for a malformed item.
  static std::optional<KernelResources> FromJson(const nlohmann::json& j);
};

// At most this many functions are kept from one compile, in ptxas's order.
inline constexpr size_t kMaxKernelResources = 64;

// The entry functions (and the device functions that spill or use a stack) of
// ptxas -v's "info" lines in nvcc's output. Linear in the text; lines that are
// not ptxas info are ignored.
std::vector<KernelResources> ParseResourceUsage(std::string_view log);

// `log` without ptxas -v's info lines (and the property lines under them), so
// that diagnostics and the log excerpt a model reads hold what went wrong.
std::string StripResourceUsage(std::string_view log);

}  // namespace kforge::eval
