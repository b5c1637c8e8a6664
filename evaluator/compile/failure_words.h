// How a failed compile is told to the kernel's author: the first error with
// its place, and which of the compiler jail's limits ended it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/subprocess.h"
#include "kforge/evaluator/compile.h"

namespace kforge::eval::internal {

// "compile failed: k.cu:4:28: identifier "x" is undefined (and 2 more errors)";
// "compile failed: <fallback>" when no diagnostic is an error.
std::string FailureMessage(const std::vector<Diagnostic>& diagnostics, std::string_view fallback);

// `bytes` as "12.3 MiB".
std::string Mib(uint64_t bytes);

// Which of the jail's limits ended a failed compile, in words for the kernel's
// author; empty when none did.
std::string LimitHit(const ProcessResult& run, const std::string& log, const CompileOptions& o);

}  // namespace kforge::eval::internal
