// The library policy of a task, checked against a compiled kernel: what its
// shared object imports and exports (read from the ELF dynamic symbol table)
// and what its source says (inline PTX is invisible to the symbol table).
//
// Violations are plain sentences naming the symbol and the rule, e.g.
// "calls ncclAllReduce: this task does not allow NCCL". The rules are listed,
// with the reason for each, in docs/compile.md.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/evaluator/task.h"

namespace kforge::eval {

// What a kernel's shared object links against, as the policy sees it.
struct KernelSymbols {
  std::vector<std::string> imported;  // undefined dynamic symbols (mangled as stored)
  std::vector<std::string> exported;  // defined, visible dynamic symbols
};

// Reads the kernel's .dynsym. Errors: kNotFound, kInvalidInput (not a 64-bit ELF).
Result<KernelSymbols> ReadKernelSymbols(const std::filesystem::path& shared_object);

// Every violation of `policy` and of the rules that hold for every task; empty
// when the kernel is clean. Pure: no I/O.
std::vector<std::string> CheckPolicy(const KernelSymbols& symbols, std::string_view source,
                                     const Policy& policy);

// ReadKernelSymbols + CheckPolicy.
Result<std::vector<std::string>> CheckKernelPolicy(const std::filesystem::path& shared_object,
                                                   std::string_view source, const Policy& policy);

}  // namespace kforge::eval
