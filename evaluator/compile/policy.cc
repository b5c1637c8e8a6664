#include "compile/policy.h"

#include <array>
#include <set>

#include "elf_symbols.h"
#include "kforge/core/scan.h"
#include "link_check.h"

namespace kforge::eval {
namespace {

// One rule: a symbol name (exact, or a prefix when `prefix`) and why it is refused.
struct Rule {
  std::string_view name;
  bool prefix;
  std::string_view reason;
};

constexpr std::string_view kNoProcesses = "a kernel may not start processes";
constexpr std::string_view kNoNetwork = "a kernel may not use the network";
constexpr std::string_view kNoTracing = "a kernel may not trace or modify processes";
constexpr std::string_view kNoSignals = "a kernel may not signal processes";
constexpr std::string_view kNoNamespaces = "a kernel may not change its namespaces or mounts";
constexpr std::string_view kNoThreads =
    "a kernel may not start host threads: all its work must be on ctx->stream when kf_run returns";
constexpr std::string_view kNoHandlers =
    "a kernel may not install signal handlers (they could hide its crashes from the harness)";
constexpr std::string_view kNoProtection =
    "a kernel may not change memory protection (it could patch the harness's code)";
constexpr std::string_view kNoEnvironment =
    "a kernel may not change the environment the harness configures CUDA and NCCL with";
constexpr std::string_view kNoLoading =
    "a kernel may not load code or look up symbols at run time (it could reach anything the rules "
    "forbid)";
constexpr std::string_view kNoMappings =
    "a kernel may not change GPU memory mappings (the harness maps its inputs read-only)";
constexpr std::string_view kNoDeviceState =
    "a kernel may not change device-wide settings: they outlive the call and change the conditions "
    "the "
    "baseline is timed under (e.g. a persisting-L2 carve-out)";

// Refused for every task. The reasons are the reward hacks and sandbox escapes
// each symbol enables (shared/research/peers.md §B; docs/compile.md).
constexpr std::array kAlwaysForbidden = {
    Rule{"cuMulticast", true,
         "NVLink multicast is disabled on the test machines and can take shared GPUs out of "
         "service"},
    Rule{"dlopen", false, kNoLoading},
    Rule{"dlmopen", false, kNoLoading},
    Rule{"dlsym", false, kNoLoading},
    Rule{"dlvsym", false, kNoLoading},
    Rule{"dl_iterate_phdr", false, kNoLoading},
    Rule{"__libc_dlopen_mode", false, kNoLoading},
    Rule{"__libc_dlsym", false, kNoLoading},
    Rule{"cudaGetDriverEntryPoint", true,
         "fetching driver entry points by name could reach forbidden functions"},
    Rule{"cuGetProcAddress", true,
         "fetching driver entry points by name could reach forbidden functions"},
    Rule{"fork", false, kNoProcesses},
    Rule{"vfork", false, kNoProcesses},
    Rule{"clone", false, kNoProcesses},
    Rule{"clone3", false, kNoProcesses},
    Rule{"execve", false, kNoProcesses},
    Rule{"execveat", false, kNoProcesses},
    Rule{"fexecve", false, kNoProcesses},
    Rule{"execv", true, kNoProcesses},   // execv, execvp, execvpe
    Rule{"execl", true, kNoProcesses},   // execl, execlp, execle
    Rule{"_Fork", false, kNoProcesses},  // glibc's fork without atfork handlers
    Rule{"__fork", false, kNoProcesses},
    Rule{"__libc_fork", false, kNoProcesses},
    Rule{"__clone", true, kNoProcesses},  // __clone, __clone2, __clone3
    Rule{"system", false, kNoProcesses},
    Rule{"popen", false, kNoProcesses},
    Rule{"wordexp", false, "wordexp runs a shell for command substitution"},
    Rule{"posix_spawn", true, kNoProcesses},
    Rule{"pthread_create", false, kNoThreads},
    Rule{"thrd_create", false, kNoThreads},
    Rule{"socket", false, kNoNetwork},
    Rule{"socketpair", false, kNoNetwork},
    Rule{"connect", false, kNoNetwork},
    Rule{"bind", false, kNoNetwork},
    Rule{"getaddrinfo", false, kNoNetwork},
    Rule{"ptrace", false, kNoTracing},
    Rule{"process_vm_readv", false, kNoTracing},
    Rule{"process_vm_writev", false, kNoTracing},
    Rule{"kill", false, kNoSignals},
    Rule{"killpg", false, kNoSignals},
    Rule{"tgkill", false, kNoSignals},
    Rule{"sigqueue", false, kNoSignals},
    Rule{"pthread_sigqueue", false, kNoSignals},
    Rule{"pidfd_", true,
         "a kernel may not reach other processes through pidfds (signals, their descriptors)"},
    Rule{"unshare", false, kNoNamespaces},
    Rule{"setns", false, kNoNamespaces},
    Rule{"mount", false, kNoNamespaces},
    Rule{"umount", true, kNoNamespaces},
    Rule{"chroot", false, kNoNamespaces},
    Rule{"pivot_root", false, kNoNamespaces},
    Rule{"signal", false, kNoHandlers},
    Rule{"sigaction", false, kNoHandlers},
    Rule{"mprotect", false, kNoProtection},
    Rule{"cuMemSetAccess", true, kNoMappings},
    Rule{"cuMemRetainAllocationHandle", true, kNoMappings},
    Rule{"pkey_mprotect", false, kNoProtection},
    Rule{"syscall", false, "raw system calls bypass every other rule"},
    Rule{"setenv", false, kNoEnvironment},
    Rule{"putenv", false, kNoEnvironment},
    Rule{"unsetenv", false, kNoEnvironment},
    Rule{"clearenv", false, kNoEnvironment},
    Rule{"cudaDeviceReset", false,
         "resetting the device destroys the harness's memory and streams"},
    Rule{"cuDevicePrimaryCtxReset", true,
         "resetting the device destroys the harness's memory and streams"},
    Rule{"cuCtxDestroy", true, "destroying a context destroys the harness's memory and streams"},
    Rule{"cudaSetDevice", false, "the harness makes the rank's device current; use ctx->device"},
    Rule{"cuCtxSetCurrent", false, "the harness makes the rank's device current; use ctx->device"},
    Rule{"cudaDeviceSetLimit", false, kNoDeviceState},
    Rule{"cuCtxSetLimit", false, kNoDeviceState},
    Rule{"cudaDeviceSetCacheConfig", false, kNoDeviceState},
    Rule{"cuCtxSetCacheConfig", false, kNoDeviceState},
    Rule{"cudaDeviceSetSharedMemConfig", false, kNoDeviceState},
    Rule{"cuCtxSetSharedMemConfig", false, kNoDeviceState},
    Rule{"cudaCtxResetPersistingL2Cache", false, kNoDeviceState},
    Rule{"cuCtxResetPersistingL2Cache", false, kNoDeviceState},
};

bool Matches(const Rule& rule, std::string_view symbol) {
  return rule.prefix ? symbol.starts_with(rule.name) : symbol == rule.name;
}

bool IsHarnessCollective(std::string_view symbol) {
  static const std::set<std::string> kHarness = HarnessSymbols();
  return kHarness.count(std::string(symbol)) != 0;
}

// The rule a task's policy applies to `symbol`, if any.
std::optional<std::string_view> TaskRule(std::string_view symbol, const Policy& policy) {
  if (IsHarnessCollective(symbol) && !policy.harness_collectives) {
    return "this task does not allow the harness collectives";
  }
  if ((symbol.starts_with("nccl") || symbol.starts_with("pnccl")) && !policy.nccl) {
    return "this task does not allow NCCL";
  }
  if (symbol.starts_with("cublas") && !policy.cublas) return "this task does not allow cuBLAS";
  if (symbol.starts_with("cufft") && !policy.cufft) return "this task does not allow cuFFT";
  if (symbol.starts_with("cudnn") && !policy.cudnn) return "this task does not allow cuDNN";
  return std::nullopt;
}

// Whether an exported name could interpose on a library the harness uses:
// cudaX / cuX / ncclX / cublasX / cufftX / cudnnX (X upper case), or a forbidden or timing libc
// name.
bool LooksLikeLibraryFunction(std::string_view symbol) {
  for (std::string_view lib :
       {"cuda", "cu", "nccl", "pnccl", "cublas", "cufft", "cudnn"}) {  // cublasLt is cublas+L
    if (symbol.starts_with(lib) && symbol.size() > lib.size() &&
        scan::IsUpper(symbol[lib.size()]) &&
        symbol.find_first_of("\n\r") == std::string_view::npos) {
      return true;
    }
  }
  for (std::string_view timing : {"clock_gettime", "gettimeofday", "time", "clock"}) {
    if (symbol == timing) return true;
  }
  for (const Rule& rule : kAlwaysForbidden) {
    if (Matches(rule, symbol)) return true;
  }
  return IsHarnessCollective(symbol);
}

// The source with comments blanked out (newlines kept), so that a comment that
// mentions a forbidden word is not a violation, while string literals, where
// inline PTX lives, are still scanned.
std::string StripComments(std::string_view src) {
  std::string out(src);
  enum { kCode, kLine, kBlock, kString, kChar } state = kCode;
  for (size_t i = 0; i < out.size(); ++i) {
    char c = out[i];
    char next = i + 1 < out.size() ? out[i + 1] : '\0';
    switch (state) {
      case kCode:
        if (c == '/' && next == '/') {
          state = kLine;
          out[i] = ' ';
        } else if (c == '/' && next == '*') {
          state = kBlock;
          out[i] = out[i + 1] = ' ';
          ++i;
        } else if (c == '"') {
          state = kString;
        } else if (c == '\'') {
          state = kChar;
        }
        break;
      case kLine:
        if (c == '\n')
          state = kCode;
        else
          out[i] = ' ';
        break;
      case kBlock:
        if (c == '*' && next == '/') {
          out[i] = out[i + 1] = ' ';
          ++i;
          state = kCode;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
      case kString:
      case kChar:
        if (c == '\\')
          ++i;
        else if ((state == kString && c == '"') || (state == kChar && c == '\'') || c == '\n')
          state = kCode;
        break;
    }
  }
  return out;
}

// Finds the first `#include <name.h>` or `#include "name.h"` (white space, new
// lines included, allowed around "include") whose name is `prefix` followed by
// letters and underscores (and digits when `digits`); sets `header` to it.
// Linear: the characters looked at from one '#' hold no other '#'.
bool FindInclude(std::string_view code, std::string_view prefix, bool digits, std::string& header) {
  auto name_char = [digits](char c) {
    return scan::IsAlpha(c) || c == '_' || (digits && scan::IsDigit(c));
  };
  for (size_t hash = code.find('#'); hash != std::string_view::npos;
       hash = code.find('#', hash + 1)) {
    size_t at = scan::SkipWhile(code, hash + 1, scan::IsSpace);
    if (!scan::At(code, at, "include")) continue;
    at = scan::SkipWhile(code, at + 7, scan::IsSpace);
    if (at == code.size() || (code[at] != '<' && code[at] != '"')) continue;
    size_t name = at + 1;
    if (!scan::At(code, name, prefix)) continue;
    size_t end = scan::SkipWhile(code, name + prefix.size(), name_char);
    if (!scan::At(code, end, ".h") || end + 2 == code.size() ||
        (code[end + 2] != '>' && code[end + 2] != '"')) {
      continue;
    }
    header = std::string(code.substr(name, end + 2 - name));
    return true;
  }
  return false;
}

void ScanSource(std::string_view source, const Policy& policy, std::vector<std::string>& out) {
  std::string code = StripComments(source);
  if (code.find("multimem") != std::string::npos) {
    out.push_back(
        "uses multimem PTX instructions: NVLink multicast is disabled on the test machines and can "
        "take shared "
        "GPUs out of service");
  }
  if (code.find("cuMulticast") != std::string::npos) {
    out.push_back(
        "mentions cuMulticast: NVLink multicast is disabled on the test machines and can take "
        "shared GPUs out of "
        "service");
  }
  if (std::string header; !policy.nccl && FindInclude(code, "nccl", false, header)) {
    out.push_back("includes " + header + ": this task does not allow NCCL");
  }
  if (std::string header; !policy.cublas && FindInclude(code, "cublas", true, header)) {
    out.push_back("includes " + header + ": this task does not allow cuBLAS");
  }
  if (std::string header; !policy.cufft && FindInclude(code, "cufft", true, header)) {
    out.push_back("includes " + header + ": this task does not allow cuFFT");
  }
  if (std::string header; !policy.cudnn && FindInclude(code, "cudnn", true, header)) {
    out.push_back("includes " + header + ": this task does not allow cuDNN");
  }
}

}  // namespace

Result<KernelSymbols> ReadKernelSymbols(const std::filesystem::path& shared_object) {
  KF_ASSIGN_OR_RETURN(DynamicInfo info, ReadDynamicInfo(shared_object));
  KernelSymbols symbols;
  for (const ElfSymbol& s : info.undefined) symbols.imported.push_back(s.name);
  for (const ElfSymbol& s : info.exported) symbols.exported.push_back(s.name);
  return symbols;
}

std::vector<std::string> CheckPolicy(const KernelSymbols& symbols, std::string_view source,
                                     const Policy& policy) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& symbol : symbols.imported) {
    if (!seen.insert(symbol).second) continue;
    if (std::optional<std::string_view> reason = TaskRule(symbol, policy)) {
      out.push_back("calls " + symbol + ": " + std::string(*reason));
      continue;
    }
    for (const Rule& rule : kAlwaysForbidden) {
      if (Matches(rule, symbol)) {
        out.push_back("calls " + symbol + ": " + std::string(rule.reason));
        break;
      }
    }
  }
  for (const std::string& symbol : symbols.exported) {
    if (LooksLikeLibraryFunction(symbol)) {
      out.push_back(
          "defines " + symbol +
          ": a kernel may not define functions named like CUDA, NCCL, cuBLAS, the C library or the "
          "harness (it could interpose on them)");
    }
  }
  ScanSource(source, policy, out);
  return out;
}

Result<std::vector<std::string>> CheckKernelPolicy(const std::filesystem::path& shared_object,
                                                   std::string_view source, const Policy& policy) {
  KF_ASSIGN_OR_RETURN(KernelSymbols symbols, ReadKernelSymbols(shared_object));
  return CheckPolicy(symbols, source, policy);
}

}  // namespace kforge::eval
