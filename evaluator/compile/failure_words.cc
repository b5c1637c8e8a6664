// How a failed compile is told to the kernel's author (failure_words.h).
#include "failure_words.h"

#include <fmt/format.h>
#include <signal.h>

#include <cstdint>

namespace kforge::eval::internal {

// "compile failed: k.cu:4:28: identifier "x" is undefined (and 2 more errors)".
std::string FailureMessage(const std::vector<Diagnostic>& diagnostics, std::string_view fallback) {
  const Diagnostic* first = nullptr;
  int errors = 0;
  for (const Diagnostic& d : diagnostics) {
    if (d.severity != Severity::kError) continue;
    if (first == nullptr) first = &d;
    ++errors;
  }
  if (first == nullptr) return "compile failed: " + std::string(fallback);
  std::string where;
  if (!first->file.empty()) {
    where = first->file + (first->line > 0 ? fmt::format(":{}", first->line) : "") +
            (first->column > 0 ? fmt::format(":{}", first->column) : "") + ": ";
  }
  std::string more =
      errors > 1 ? fmt::format(" (and {} more error{})", errors - 1, errors == 2 ? "" : "s") : "";
  return "compile failed: " + where + first->message + more;
}

std::string Mib(uint64_t bytes) {
  return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
}

// Which of the jail's limits ended a failed compile, in words for the
// kernel's author; empty when none did. A tool past RLIMIT_FSIZE dies of
// SIGXFSZ (the shell nvcc runs it through says "File size limit exceeded"),
// past RLIMIT_CPU of SIGXCPU, and past RLIMIT_AS fails to allocate (cicc:
// "LLVM ERROR: out of memory", gcc: "virtual memory exhausted"). A kernel can
// print these words itself with #error: it only makes its own failure
// uncached.
std::string LimitHit(const ProcessResult& run, const std::string& log, const CompileOptions& o) {
  auto died_of = [&](int sig, const char* words) {
    return run.term_signal == sig || run.exit_code == 128 + sig ||
           log.find(words) != std::string::npos ||
           log.find(fmt::format("signal {}", sig)) != std::string::npos;
  };
  if (died_of(SIGXFSZ, "File size limit exceeded")) {
    return fmt::format(
        "the kernel made the compiler write a file larger than its limit of {} (a huge "
        "__device__ array initialiser, or unrolling that generates that much code?)",
        Mib(o.max_file_bytes));
  }
  if (died_of(SIGXCPU, "CPU time limit exceeded")) {
    return fmt::format(
        "the kernel made a compiler tool use more than its limit of {} s of CPU time (heavy "
        "template instantiation, macro expansion or unrolling?)",
        o.max_cpu_seconds);
  }
  for (const char* words : {"out of memory", "bad_alloc", "memory exhausted",
                            "Cannot allocate memory", "Out of memory"}) {
    if (log.find(words) != std::string::npos) {
      return fmt::format(
          "the kernel made a compiler tool run out of its memory limit of {} (a huge "
          "initialiser, or code generation that large?)",
          Mib(o.max_memory_bytes));
    }
  }
  return "";
}

}  // namespace kforge::eval::internal
