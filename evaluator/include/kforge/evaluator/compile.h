// Compiling kernels: one .cu source to a shared object the worker dlopen()s,
// through nvcc, with a content-addressed cache and parallel compiles.
//
// A kernel links the CUDA runtime dynamically (-cudart shared) so that it
// shares the worker's runtime, streams and memory. After nvcc succeeds the
// shared object is checked: kf_run must be an exported function, and every
// symbol it imports must be defined by a library it links or by the harness
// (see docs/compile.md for why this replaces the linker's --no-undefined).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/core/subprocess.h"
#include "kforge/evaluator/diagnostics.h"
#include "kforge/evaluator/resource_usage.h"

namespace kforge::eval {

// The directory holding the kernel ABI (kforge/kernel.h and what it
// includes): <prefix>/share/kforge/include in an installed tree, else the
// source tree's evaluator/include.
std::filesystem::path AbiIncludeDir();

struct CompileOptions {
  // nvcc to use. Empty: $CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc, else PATH.
  std::filesystem::path nvcc;
  // The directory holding kforge/kernel.h. Empty: AbiIncludeDir().
  std::filesystem::path include_dir;
  // Cache root; artefacts go under <cache_dir>/kernels/<key>/. Empty: DefaultCacheDir().
  std::filesystem::path cache_dir;
  std::chrono::milliseconds timeout{std::chrono::seconds(180)};  // per nvcc run
  int parallelism = 0;  // CompileAll's concurrent compiles; 0: hardware threads
  // Symbols the worker process provides at dlopen() time besides the libraries
  // a kernel links (empty: the kf_* harness collectives of kforge/kernel.h).
  std::vector<std::string> host_symbols;
  // Shared libraries the worker has loaded globally; their exports count as provided.
  std::vector<std::filesystem::path> host_libraries;
  size_t max_log_bytes = 64 << 10;  // CompileResult::log is truncated past this
  // kforge-jail (apps/jail): when set, nvcc runs confined to the toolkit, the
  // system, the kforge include directory and its job's directory, with a
  // scrubbed environment. Empty: unconfined (trusted sources only).
  std::filesystem::path jail;
  // Bounds on what a kernel can make the compiler spend. kforge-jail sets the
  // first three as rlimits of every process of a jailed compile (nvcc and
  // each tool it starts); the object's size is checked jailed or not. Going
  // past one is the kernel's compile_error, with a message naming the limit,
  // and is never cached (a CPU-time limit depends on the machine's load).
  uint64_t max_cpu_seconds = 300;           // RLIMIT_CPU of each tool
  uint64_t max_memory_bytes = 16ull << 30;  // RLIMIT_AS of each tool
  uint64_t max_file_bytes = 256ull << 20;   // RLIMIT_FSIZE: any file a tool writes
  uint64_t max_object_bytes = 64ull << 20;  // the largest kernel.so compiled or served from cache
};

struct CompileJob {
  std::string source;                      // the .cu text
  std::string display_name = "kernel.cu";  // the name diagnostics use (the tools see a temp path)
  std::string arch = "sm_90a";             // sm_<digits>[a|f]
  std::vector<std::string> libraries;      // -l<name>, e.g. "nccl", "cublas"
  std::vector<std::string> extra_flags;    // trusted flags from the caller (never from a kernel)
};

struct CompileResult {
  Status status;  // kCompileError, kTimeout, kNotFound (no nvcc), kIo, kInvalidInput
  std::filesystem::path shared_object;  // set when status.ok()
  bool cache_hit = false;
  double seconds = 0;  // wall time of this call (a cache hit costs milliseconds)
  std::vector<Diagnostic> diagnostics;
  std::string log;  // nvcc's output, temp paths replaced by the display name, truncated
  std::vector<KernelResources> resources;  // what ptxas reported of each kernel
  std::string key;  // the cache key (hex SHA-256); empty when it could not be computed

  // The `compile` object of docs/eval-result.md.
  nlohmann::json ToJson() const;
};

// Thread-safe: Compile may be called from several threads at once, and
// several processes may share one cache directory.
class Compiler {
 public:
  explicit Compiler(CompileOptions options = {}, ProcessRunner& runner = RealProcessRunner());
  ~Compiler();
  Compiler(const Compiler&) = delete;
  Compiler& operator=(const Compiler&) = delete;

  // Never throws; every failure is in the result's status. A failed compile
  // is cached like a good one; a timeout or a missing tool is not.
  CompileResult Compile(const CompileJob& job);

  // Runs up to options.parallelism compiles at once (identical jobs run once);
  // results are in the order of `jobs`.
  std::vector<CompileResult> CompileAll(const std::vector<CompileJob>& jobs);

  // The cache key of `job`: SHA-256 over the source, display name, arch, full
  // flag list, `nvcc --version` and kforge/kernel.h. Runs nvcc --version once.
  Result<std::string> CacheKey(const CompileJob& job);

  // The nvcc this compiler uses, or kNotFound naming every place it looked.
  Result<std::filesystem::path> Nvcc() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kforge::eval
