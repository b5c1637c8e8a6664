// Every exit status of every kforge command, in one table (docs/cli.md has
// the same table; `kforge --help` prints it). Usage errors follow sysexits.h
// (EX_USAGE 64, EX_NOINPUT 66, EX_SOFTWARE 70) instead of CLI11's 105-115.
#pragma once

#include <string>

#include "kforge/core/eval_doc.h"
#include "kforge/core/status.h"

namespace kforge::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,  // the command ran and failed (I/O, a store, a model call,
                    // a run in which every session failed)
  // kforge eval: the kernel's verdict (ExitCodeForVerdict).
  kExitCompileError = 2,
  kExitPolicyViolation = 3,
  kExitRuntimeError = 4,
  kExitMismatch = 5,
  kExitTimeout = 6,
  kExitHarnessError = 7,  // kforge could not evaluate (not the kernel's fault)
  kExitNotEvaluated = 8,  // eval: compiled, but no GPU ran it
  kExitIntegrityViolation =
      9,               // eval: the kernel's process broke the sandbox or the timing protocol
  kExitUsage = 64,     // a bad flag, option value, task, model spec or input file
  kExitNotFound = 66,  // a named run, store or file does not exist
  kExitInternal = 70,  // a bug in kforge
};

// The exit status for an error: kInvalidInput and kAuth are usage errors,
// kNotFound is kExitNotFound, kInternal kExitInternal, the rest kExitFailed.
int ExitCodeForStatus(const Status& status);

// `kforge eval`'s exit status for a verdict. kCompiled is 0 here: the eval
// command itself says kExitNotEvaluated when no GPU could run the kernel.
int ExitCodeForVerdict(Verdict verdict);

// Prints "kforge CMD: message" to stderr and returns ExitCodeForStatus.
int FailWith(const char* command, const Status& status);

// The table as text, for --help.
std::string ExitCodeHelp();

}  // namespace kforge::cli
