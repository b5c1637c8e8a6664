// What a candidate kernel controls before it runs: its source, scanned by the
// library policy (evaluator/compile/policy.cc), and the compiler output that
// echoes it, parsed into diagnostics (evaluator/compile/diagnostics.cc) and
// ptxas's resource report (evaluator/compile/resource_usage.cc). Any bytes
// must give violations, diagnostics or resources, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "compile/policy.h"
#include "kforge/evaluator/diagnostics.h"
#include "kforge/evaluator/resource_usage.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kforge::eval;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  Policy policy;
  if (size > 0) {
    policy.harness_collectives = data[0] & 1;
    policy.nccl = data[0] & 2;
    policy.cublas = data[0] & 4;
    policy.cufft = data[0] & 8;
    policy.cudnn = data[0] & 16;
  }
  // The input's lines double as the symbol names of the shared object.
  KernelSymbols symbols;
  for (size_t start = 0; start < size;) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = size;
    std::string line(text.substr(start, end - start));
    (end % 2 ? symbols.imported : symbols.exported).push_back(line);
    start = end + 1;
  }
  (void)CheckPolicy(symbols, text, policy);

  ParseOptions options;
  options.source_paths = {"k.cu"};
  options.display_name = "candidate.cu";
  std::vector<Diagnostic> items = ParseDiagnostics(text, options);
  for (const Diagnostic& d : items) {
    if (d.line < 0 || d.column < 0) std::abort();
    (void)d.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  (void)FormatDiagnostics(items, text, 5, "candidate.cu");

  std::vector<KernelResources> resources = ParseResourceUsage(text);
  if (resources.size() > kMaxKernelResources) std::abort();
  for (const KernelResources& k : resources) {
    if (k.registers < 0 || k.shared_bytes < 0 || k.WarpsPerSmByRegisters() < 0) std::abort();
    (void)k.ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (StripResourceUsage(text).size() > text.size()) std::abort();
  return 0;
}
