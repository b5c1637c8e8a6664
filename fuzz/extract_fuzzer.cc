// Code extraction from a model's reply (agent/src/extract.cc): any bytes, any
// length, must give a verdict without crashing; a kernel it returns is text of
// the reply that defines kf_run.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "extract.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view reply(reinterpret_cast<const char*>(data), size);
  kforge::agent::Extraction x = kforge::agent::ExtractKernel(reply);
  if (x.ok != x.problem.empty()) std::abort();  // exactly one of a kernel and a reason
  if (x.ok && (x.source.find("kf_run") == std::string::npos ||
               reply.find(x.source) == std::string_view::npos)) {
    std::abort();
  }
  return 0;
}
