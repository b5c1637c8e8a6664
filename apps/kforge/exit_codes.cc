#include "exit_codes.h"

#include <cstdio>

namespace kforge::cli {

int ExitCodeForStatus(const Status& status) {
  switch (status.kind()) {
    case ErrorKind::kOk:
      return kExitOk;
    case ErrorKind::kInvalidInput:
    case ErrorKind::kAuth:
      return kExitUsage;
    case ErrorKind::kNotFound:
      return kExitNotFound;
    case ErrorKind::kInternal:
      return kExitInternal;
    default:
      return kExitFailed;
  }
}

int ExitCodeForVerdict(Verdict verdict) {
  switch (verdict) {
    case Verdict::kPassed:
    case Verdict::kCompiled:
      return kExitOk;
    case Verdict::kCompileError:
      return kExitCompileError;
    case Verdict::kPolicyViolation:
      return kExitPolicyViolation;
    case Verdict::kRuntimeError:
      return kExitRuntimeError;
    case Verdict::kMismatch:
      return kExitMismatch;
    case Verdict::kTimeout:
      return kExitTimeout;
    case Verdict::kIntegrityViolation:
      return kExitIntegrityViolation;
    case Verdict::kHarnessError:
      return kExitHarnessError;
  }
  return kExitHarnessError;
}

int FailWith(const char* command, const Status& status) {
  // Input errors read as their message; other kinds keep their name ("auth: …").
  const bool plain =
      status.kind() == ErrorKind::kInvalidInput || status.kind() == ErrorKind::kNotFound;
  std::fprintf(stderr, "kforge %s: %s\n", command,
               plain ? status.message().c_str() : status.ToString().c_str());
  return ExitCodeForStatus(status);
}

std::string ExitCodeHelp() {
  return "Exit status (every command; docs/cli.md):\n"
         "  0   success (eval: passed)\n"
         "  1   the command failed: I/O, a store, a model call, or a run in which every\n"
         "      session failed\n"
         "  2-7 eval: compile_error 2, policy_violation 3, runtime_error 4, mismatch 5,\n"
         "      timeout 6, harness error 7\n"
         "  8   eval: compiled but not evaluated (no GPU)\n"
         "  9   eval: integrity_violation (the kernel's process broke the sandbox or timing)\n"
         "  64  usage: a bad flag or value, an unknown task, model or provider, a missing key\n"
         "  66  not found: a named run, store or file does not exist\n"
         "  70  internal error (a bug in kforge)\n";
}

}  // namespace kforge::cli
