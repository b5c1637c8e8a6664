#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "compile_cache.h"
#include "elf_symbols.h"
#include "failure_words.h"
#include "kforge/core/fs.h"
#include "kforge/core/hash.h"
#include "kforge/core/log.h"
#include "kforge/core/mutex.h"
#include "kforge/core/scan.h"
#include "kforge/core/untrusted_text.h"
#include "kforge/evaluator/compile.h"
#include "link_check.h"
#include "toolchain.h"

#ifndef KFORGE_SOURCE_ROOT
#define KFORGE_SOURCE_ROOT "."
#endif

namespace kforge::eval {
namespace fs = std::filesystem;

fs::path AbiIncludeDir() { return DataPath("include", fs::path(KFORGE_SOURCE_ROOT) / "evaluator"); }

namespace {

using SteadyClock = std::chrono::steady_clock;
using internal::FailureMessage;
using internal::LimitHit;
using internal::Mib;

// Bumped when the flag set or the cache layout changes meaning.
constexpr std::string_view kKeySalt = "kforge.compile/2";

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// The file name the tools see: the display name's base name, restricted to
// safe characters, so raw logs read like the diagnostics.
std::string SourceFileName(const std::string& display_name) {
  std::string base = fs::path(display_name).filename().string();
  std::string out;
  for (char c : base)
    out +=
        (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  if (out.empty() || out.front() == '.' || out.front() == '-') out = "kernel" + out;
  if (!out.ends_with(".cu")) out += ".cu";
  return out;
}

std::string Truncate(std::string text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t dropped = text.size() - max_bytes;
  text.resize(max_bytes);
  return text + fmt::format("\n[... {} more bytes truncated]\n", dropped);
}

void ReplaceAll(std::string& text, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

bool SameJob(const CompileJob& a, const CompileJob& b) {
  return a.source == b.source && a.display_name == b.display_name && a.arch == b.arch &&
         a.libraries == b.libraries && a.extra_flags == b.extra_flags;
}

// Removes a directory when it goes out of scope unless released.
class DirGuard {
 public:
  explicit DirGuard(fs::path dir) : dir_(std::move(dir)) {}
  ~DirGuard() {
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }
  void Release() { dir_.clear(); }

 private:
  fs::path dir_;
};

}  // namespace

nlohmann::json CompileResult::ToJson() const {
  nlohmann::json diags = nlohmann::json::array();
  for (const Diagnostic& d : diagnostics) diags.push_back(d.ToJson());
  nlohmann::json res = nlohmann::json::array();
  for (const KernelResources& k : resources) res.push_back(k.ToJson());
  return {{"seconds", seconds},
          {"cache_hit", cache_hit},
          {"diagnostics", diags},
          {"log", log},
          {"resources", res}};
}

struct Compiler::Impl {
  CompileOptions options;
  ProcessRunner* runner;

  Mutex mu;
  std::optional<Result<fs::path>> nvcc GUARDED_BY(mu);
  std::optional<Result<std::string>> version GUARDED_BY(mu);  // `nvcc --version`
  // Both made with the nvcc path, under mu, by the first FindNvccOnce; read
  // without the lock once a FindNvccOnce has succeeded (they never change).
  std::unique_ptr<LinkChecker> link_checker;
  std::vector<fs::path> library_dirs;  // LibrarySearchDirs(nvcc)

  Result<fs::path> FindNvccOnce() {
    MutexLock lock(&mu);
    if (!nvcc) {
      const char* home = std::getenv("CUDA_HOME");
      nvcc = FindNvcc(options.nvcc, home ? home : "", DefaultNvccLocations());
      if (nvcc->ok()) {
        std::set<std::string> host =
            options.host_symbols.empty()
                ? HarnessSymbols()
                : std::set<std::string>(options.host_symbols.begin(), options.host_symbols.end());
        library_dirs = LibrarySearchDirs(nvcc->value());
        link_checker =
            std::make_unique<LinkChecker>(library_dirs, std::move(host), options.host_libraries);
      }
    }
    return *nvcc;
  }

  Result<std::string> VersionOnce(const fs::path& nvcc_path) {
    MutexLock lock(&mu);
    if (!version) {
      ProcessOptions po;
      po.timeout = std::chrono::seconds(60);
      Result<ProcessResult> r = runner->Run({nvcc_path.string(), "--version"}, po);
      if (!r.ok()) {
        version = r.status().WithContext(nvcc_path.string() + " --version");
      } else if (!r->Succeeded()) {
        version = Error(ErrorKind::kHarness,
                        nvcc_path.string() + " --version failed: " + r->err + r->out);
      } else {
        version = r->out;
      }
    }
    return *version;
  }

  fs::path IncludeDir() const {
    return options.include_dir.empty() ? AbiIncludeDir() : options.include_dir;
  }

  fs::path CacheRoot() const {
    return (options.cache_dir.empty() ? DefaultCacheDir() : options.cache_dir) / "kernels";
  }

  // sm_<2 or 3 digits>[a|f], e.g. sm_90a.
  static bool IsArch(std::string_view arch) {
    if (!arch.starts_with("sm_")) return false;
    size_t digits = scan::SkipWhile(arch, 3, scan::IsDigit) - 3;
    std::string_view suffix = arch.substr(3 + digits);
    return digits >= 2 && digits <= 3 && (suffix.empty() || suffix == "a" || suffix == "f");
  }

  static bool IsLibraryChar(char c) {
    return scan::IsAlnum(c) || c == '_' || c == '+' || c == '.' || c == '-';
  }

  static Status ValidateJob(const CompileJob& job) {
    if (!IsArch(job.arch)) {
      return Error(ErrorKind::kInvalidInput,
                   "bad arch '" + job.arch + "': expected sm_<digits>[a|f], e.g. sm_90a");
    }
    for (const std::string& lib : job.libraries) {
      if (lib.empty() || scan::SkipWhile(lib, 0, IsLibraryChar) != lib.size())
        return Error(ErrorKind::kInvalidInput, "bad library name '" + lib + "'");
    }
    return Status::Ok();
  }

  // Every nvcc flag that shapes the output; paths (include dir, files) are not
  // part of it so that the key does not depend on where things live.
  static std::vector<std::string> Flags(const CompileJob& job) {
    // Machine code for the evaluation GPU's arch only: -arch=sm_90a would also
    // embed compute_90 PTX for other GPUs, a second front-end pass that costs
    // a quarter of a cold compile (docs/compile.md). -Xptxas -v: every
    // kernel's registers, shared memory and spills (resource_usage.h).
    const std::string virt = "compute_" + job.arch.substr(3);
    std::vector<std::string> flags = {"-gencode=arch=" + virt + ",code=" + job.arch,
                                      "-O3",
                                      "-std=c++17",
                                      "-shared",
                                      "-Xcompiler",
                                      "-fPIC",
                                      "-cudart",
                                      "shared",
                                      "-lineinfo",
                                      "-Xptxas",
                                      "-v"};
    flags.insert(flags.end(), job.extra_flags.begin(), job.extra_flags.end());
    for (const std::string& lib : job.libraries) flags.push_back("-l" + lib);
    return flags;
  }

  Result<std::string> Key(const CompileJob& job, const fs::path& nvcc_path) {
    KF_RETURN_IF_ERROR(ValidateJob(job));
    KF_ASSIGN_OR_RETURN(std::string ver, VersionOnce(nvcc_path));
    fs::path header = IncludeDir() / "kforge" / "kernel.h";
    Result<std::string> abi = ReadFile(header);
    if (!abi.ok())
      return Error(ErrorKind::kNotFound, "kernel ABI header not found: " + abi.status().message());
    Hasher h;
    h.Add(kKeySalt).Add(job.source).Add(job.display_name).Add(job.arch);
    for (const std::string& f : Flags(job)) h.Add(f);
    h.Add(ver).Add(*abi);
    return h.HexDigest();
  }

  // kNotFound when a library the job links (-l<name>) has no lib<name>.so in
  // the job's -L directories or the library search path: a machine without
  // an optional library (cuDNN) cannot evaluate a task that uses it, which
  // is no fault of the kernel and must not be cached as a failed compile.
  Status LibrariesPresent(const CompileJob& job) const {
    std::vector<fs::path> dirs;
    for (const std::string& f : job.extra_flags) {
      if (f.starts_with("-L") && f.size() > 2) dirs.emplace_back(f.substr(2));
    }
    dirs.insert(dirs.end(), library_dirs.begin(), library_dirs.end());
    for (const std::string& lib : job.libraries) {
      const std::string file = "lib" + lib + ".so";
      bool found = std::any_of(dirs.begin(), dirs.end(), [&](const fs::path& d) {
        std::error_code ec;
        return fs::exists(d / file, ec);
      });
      if (!found) {
        return Error(ErrorKind::kNotFound,
                     fmt::format("{} needs {} (-l{}), which this machine does not have (not in "
                                 "the CUDA toolkit's lib64 nor the library search path): install "
                                 "it there to evaluate a task that uses it",
                                 job.display_name, file, lib));
      }
    }
    return Status::Ok();
  }

  CompileResult Compile(const CompileJob& job);
  // Runs nvcc in `staging` and the checks on its output; fills `record`.
  // Returns non-OK only for failures that must not be cached.
  Status Build(const CompileJob& job, const fs::path& nvcc_path, const fs::path& staging,
               CacheRecord& record);
};

Status Compiler::Impl::Build(const CompileJob& job, const fs::path& nvcc_path,
                             const fs::path& staging, CacheRecord& record) {
  std::string file_name = SourceFileName(job.display_name);
  KF_RETURN_IF_ERROR(WriteFileAtomic(staging / file_name, job.source));
  std::vector<std::string> argv;
  if (!options.jail.empty()) {
    // The toolkit root holds nvcc's own headers, libraries and tools.
    argv = {options.jail.string(),
            "--read",
            IncludeDir().string(),
            "--read",
            nvcc_path.parent_path().parent_path().string(),
            "--write",
            staging.string(),
            "--cpu-seconds",
            std::to_string(options.max_cpu_seconds),
            "--memory-bytes",
            std::to_string(options.max_memory_bytes),
            "--file-bytes",
            std::to_string(options.max_file_bytes),
            "--"};
  }
  argv.push_back(nvcc_path.string());
  for (std::string& f : Flags(job)) argv.push_back(std::move(f));
  argv.push_back("-I" + IncludeDir().string());
  argv.insert(argv.end(), {file_name, "-o", kSharedObjectName});

  ProcessOptions po;
  po.timeout = options.timeout;
  po.cwd = staging;
  // Compiles run beside timed calls (a run compiles ahead while the GPU
  // evaluates): at a lower priority they take only the CPU time the timed
  // ranks leave, instead of delaying their wake-ups (emulated ranks spin on
  // each other's flags, so a descheduled rank inflates every rank's time).
  po.nice = 10;
  auto start = SteadyClock::now();
  Result<ProcessResult> run = runner->Run(argv, po);
  record.seconds = SecondsSince(start);
  if (!run.ok()) return run.status().WithContext("running nvcc");
  if (run->timed_out) {
    return Error(
        ErrorKind::kTimeout,
        fmt::format(
            "nvcc did not finish within {:.0f} s and was killed (with everything it started); "
            "simplify the kernel (heavy template instantiation or unrolling?)",
            std::chrono::duration<double>(options.timeout).count()));
  }
  // The tools quote the candidate's source (#error, #warning, file names
  // from #line): printable text only, so that nothing in a diagnostic can
  // redraw a line of kforge's output.
  std::string log = PrintableText(run->out + run->err, /*keep_newlines=*/true);
  const std::string limit = options.jail.empty() ? "" : LimitHit(*run, log, options);
  ReplaceAll(log, staging.string() + "/", "");
  record.resources = ParseResourceUsage(log);
  log = StripResourceUsage(log);
  ParseOptions parse;
  parse.display_name = job.display_name;
  parse.source_paths = {file_name, (staging / file_name).string()};
  record.diagnostics = ParseDiagnostics(log, parse);
  record.log = Truncate(std::move(log), options.max_log_bytes);
  auto over_limit = [&](const std::string& what) {
    Diagnostic d;
    d.file = job.display_name;
    d.message = what;
    record.diagnostics.push_back(d);
    return Error(ErrorKind::kCompileError, "compile failed: " + what);
  };
  if (!run->Succeeded() && !limit.empty()) return over_limit(limit);
  if (!run->Succeeded()) {
    std::string how = run->term_signal != 0
                          ? fmt::format("nvcc was killed by signal {}", run->term_signal)
                          : fmt::format("nvcc exited with status {}", run->exit_code);
    if (std::none_of(record.diagnostics.begin(), record.diagnostics.end(),
                     [](const Diagnostic& d) { return d.severity == Severity::kError; })) {
      Diagnostic d;
      d.message = how;
      record.diagnostics.push_back(d);
    }
    record.message = FailureMessage(record.diagnostics, how);
    return Status::Ok();
  }

  // Checked jailed or not: an object this large is never cached or loaded.
  std::error_code size_error;
  const uintmax_t object_bytes = fs::file_size(staging / kSharedObjectName, size_error);
  if (!size_error && object_bytes > options.max_object_bytes) {
    return over_limit(fmt::format("the compiled kernel.so is {}, over the limit of {}",
                                  Mib(object_bytes), Mib(options.max_object_bytes)));
  }
  Result<DynamicInfo> info = ReadDynamicInfo(staging / kSharedObjectName);
  if (!info.ok()) return info.status().WithContext("reading the compiled kernel");
  auto fail = [&](std::string message) {
    Diagnostic d;
    d.file = job.display_name;
    d.message = message;
    record.diagnostics.push_back(d);
    record.message = "compile failed: " + message;
    return Status::Ok();
  };
  bool has_run = std::any_of(info->exported.begin(), info->exported.end(),
                             [](const ElfSymbol& s) { return s.name == "kf_run" && s.function; });
  if (!has_run) {
    bool mangled = std::any_of(info->exported.begin(), info->exported.end(),
                               [](const ElfSymbol& s) { return s.name.starts_with("_Z6kf_run"); });
    return fail(
        mangled ? "kf_run is defined with C++ linkage, so the harness cannot find it: declare it "
                  "extern \"C\" (or #include <kforge/kernel.h> before defining it)"
                : "the kernel does not define kf_run, the entry point the harness calls: "
                  "extern \"C\" int kf_run(kf_ctx* ctx)");
  }
  std::vector<fs::path> lib_dirs;
  for (const std::string& f : job.extra_flags) {
    if (f.starts_with("-L") && f.size() > 2) lib_dirs.emplace_back(f.substr(2));
  }
  std::vector<Diagnostic> unresolved = link_checker->Check(*info, lib_dirs);
  if (!unresolved.empty()) {
    record.diagnostics.insert(record.diagnostics.end(), unresolved.begin(), unresolved.end());
    record.message = FailureMessage(unresolved, "link check failed");
    return Status::Ok();
  }
  record.ok = true;
  return Status::Ok();
}

CompileResult Compiler::Impl::Compile(const CompileJob& job) {
  auto start = SteadyClock::now();
  CompileResult result;
  auto finish = [&](Status status) {
    result.status = std::move(status);
    result.seconds = SecondsSince(start);
    return result;
  };
  Result<fs::path> nvcc_path = FindNvccOnce();
  if (!nvcc_path.ok()) return finish(nvcc_path.status());
  if (Status s = LibrariesPresent(job); !s.ok()) return finish(s);
  Result<std::string> key = Key(job, *nvcc_path);
  if (!key.ok()) return finish(key.status());
  result.key = *key;
  fs::path root = CacheRoot();
  fs::path entry = root / result.key;

  auto from_record = [&](const CacheRecord& r) {
    result.diagnostics = r.diagnostics;
    result.log = r.log;
    result.resources = r.resources;
    if (!r.ok) return finish(Error(ErrorKind::kCompileError, r.message));
    result.shared_object = entry / kSharedObjectName;
    return finish(Status::Ok());
  };
  if (std::optional<CacheRecord> hit = LoadCacheRecord(entry, options.max_object_bytes)) {
    result.cache_hit = true;
    return from_record(*hit);
  }
  if (Status s = MakeDirs(root); !s.ok()) return finish(s);
  std::error_code ec;
  if (fs::exists(entry, ec)) {
    // A damaged entry (no readable record): move it aside so ours can take its place.
    fs::path stale = root / fmt::format(".stale-{}-{}", result.key.substr(0, 12), getpid());
    fs::rename(entry, stale, ec);
    fs::remove_all(stale, ec);
  }
  std::string pattern = (root / (".tmp-" + result.key.substr(0, 12) + "-XXXXXX")).string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr)
    return finish(Error(ErrorKind::kIo, pattern + ": cannot create"));
  fs::path staging(buf.data());
  DirGuard guard(staging);

  CacheRecord record;
  Status built = Build(job, *nvcc_path, staging, record);
  if (!built.ok()) {
    // Not cached: a timeout, a limit (which depends on the options and the
    // machine's load) or a failure of our own.
    result.log = record.log;
    result.diagnostics = record.diagnostics;
    return finish(built);
  }
  if (Status s = PublishCacheEntry(staging, entry, record); !s.ok()) return finish(s);
  guard.Release();  // renamed into place, or already removed by PublishCacheEntry
  LogDebug("compile", "{} {} in {:.1f}s ({})", job.display_name, record.ok ? "compiled" : "failed",
           record.seconds, result.key.substr(0, 12));
  return from_record(record);
}

Compiler::Compiler(CompileOptions options, ProcessRunner& runner)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->runner = &runner;
}

Compiler::~Compiler() = default;

CompileResult Compiler::Compile(const CompileJob& job) { return impl_->Compile(job); }

Result<std::string> Compiler::CacheKey(const CompileJob& job) {
  KF_ASSIGN_OR_RETURN(fs::path nvcc_path, impl_->FindNvccOnce());
  return impl_->Key(job, nvcc_path);
}

Result<fs::path> Compiler::Nvcc() const { return impl_->FindNvccOnce(); }

std::vector<CompileResult> Compiler::CompileAll(const std::vector<CompileJob>& jobs) {
  // Identical jobs compile once; their results are copied.
  std::vector<size_t> owner(jobs.size());
  std::vector<size_t> unique;
  for (size_t i = 0; i < jobs.size(); ++i) {
    owner[i] = i;
    for (size_t u : unique) {
      if (SameJob(jobs[u], jobs[i])) {
        owner[i] = u;
        break;
      }
    }
    if (owner[i] == i) unique.push_back(i);
  }
  std::vector<CompileResult> results(jobs.size());
  int workers = impl_->options.parallelism > 0
                    ? impl_->options.parallelism
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers = std::min<int>(workers, static_cast<int>(unique.size()));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t n = next++; n < unique.size(); n = next++)
      results[unique[n]] = Compile(jobs[unique[n]]);
  };
  std::vector<std::thread> threads;
  for (int t = 1; t < workers; ++t) threads.emplace_back(work);
  work();
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (owner[i] != i) results[i] = results[owner[i]];
  }
  return results;
}

}  // namespace kforge::eval
