// Compiler tests: real nvcc for the kernel outcomes (shared, compiled once),
// a fake ProcessRunner for keys, timeouts and scheduling.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "compile/policy.h"
#include "fake_runner.h"
#include "kforge/core/fs.h"
#include "kforge/evaluator/compile.h"
#include "test_kernels.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;
using testing::FakeRunner;
using testing::JobFor;
using testing::Kernels;

#define REQUIRE_NVCC()      \
  if (!testing::HaveNvcc()) \
  GTEST_SKIP() << "nvcc not found: " << testing::SharedCompiler().Nvcc().status().message()

// A private cache directory, removed afterwards.
class TempCache {
 public:
  TempCache() : dir_(MakeTempDir("kforge-compile-test").value()) {}
  ~TempCache() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

bool HasExport(const fs::path& so, const std::string& name) {
  Result<KernelSymbols> symbols = ReadKernelSymbols(so);
  if (!symbols.ok()) return false;
  return std::find(symbols->exported.begin(), symbols->exported.end(), name) !=
         symbols->exported.end();
}

TEST(CompilerTest, GoodKernelBuildsASharedObjectExportingTheAbi) {
  REQUIRE_NVCC();
  const CompileResult& r = Kernels().good;
  ASSERT_TRUE(r.status.ok()) << r.status.ToString() << "\n" << r.log;
  ASSERT_TRUE(fs::exists(r.shared_object));
  EXPECT_EQ(r.shared_object.filename(), "kernel.so");
  EXPECT_EQ(r.shared_object.parent_path().filename(), r.key);
  EXPECT_EQ(r.key.size(), 64u);
  for (const char* entry : {"kf_setup", "kf_run", "kf_teardown"})
    EXPECT_TRUE(HasExport(r.shared_object, entry)) << entry;
  for (const Diagnostic& d : r.diagnostics) EXPECT_NE(d.severity, Severity::kError) << d.message;
  nlohmann::json j = r.ToJson();
  EXPECT_TRUE(j.at("seconds").is_number());
  EXPECT_TRUE(j.at("cache_hit").is_boolean());
  EXPECT_TRUE(j.at("diagnostics").is_array());
  EXPECT_TRUE(j.at("log").is_string());
  // ptxas -v: every kernel's resources, and none of its info lines in the log.
  ASSERT_FALSE(r.resources.empty()) << r.log;
  for (const KernelResources& k : r.resources) {
    EXPECT_FALSE(k.name.empty());
    EXPECT_EQ(k.arch, "sm_90a") << k.name;
    EXPECT_GT(k.registers, 0) << k.name;
    EXPECT_EQ(k.spill_store_bytes, 0) << k.name;
  }
  EXPECT_EQ(j.at("resources").size(), r.resources.size());
  EXPECT_EQ(r.log.find("ptxas info"), std::string::npos) << r.log;
}

TEST(CompilerTest, SyntaxErrorsAreParsedAgainstTheDisplayName) {
  REQUIRE_NVCC();
  const CompileResult& r = Kernels().syntax_error;
  ASSERT_EQ(r.status.kind(), ErrorKind::kCompileError) << r.status.ToString();
  EXPECT_TRUE(r.shared_object.empty());
  ASSERT_EQ(r.diagnostics.size(), 2u) << r.log;
  EXPECT_EQ(r.diagnostics[0].file, "candidate.cu");
  EXPECT_EQ(r.diagnostics[0].line, 4);
  EXPECT_EQ(r.diagnostics[0].column, 28);  // under "undefined_x", recovered from the caret
  EXPECT_EQ(r.diagnostics[0].severity, Severity::kError);
  EXPECT_EQ(r.diagnostics[0].message, "identifier \"undefined_x\" is undefined");
  EXPECT_EQ(r.diagnostics[1].line, 6);
  EXPECT_EQ(r.diagnostics[1].message, "expected a \";\"");
  EXPECT_EQ(r.status.message(),
            "compile failed: candidate.cu:4:28: identifier \"undefined_x\" is undefined (and 1 "
            "more error)");
  // The temp directory nvcc ran in never leaks into what the model sees.
  EXPECT_EQ(r.log.find("/.tmp-"), std::string::npos) << r.log;
  EXPECT_NE(r.log.find("candidate.cu(4): error"), std::string::npos) << r.log;
  std::string shown =
      FormatDiagnostics(r.diagnostics, testing::kSyntaxErrorKernel, 1, "candidate.cu");
  EXPECT_NE(shown.find("if (i < n) b[i] = a[i] + undefined_x;"), std::string::npos) << shown;
  EXPECT_NE(shown.find("(1 more error not shown)"), std::string::npos) << shown;
}

TEST(CompilerTest, MissingKfRunIsAClearCompileError) {
  REQUIRE_NVCC();
  const CompileResult& r = Kernels().no_run;
  ASSERT_EQ(r.status.kind(), ErrorKind::kCompileError) << r.status.ToString();
  EXPECT_NE(r.status.message().find("does not define kf_run"), std::string::npos)
      << r.status.message();
  ASSERT_FALSE(r.diagnostics.empty());
  EXPECT_EQ(r.diagnostics.back().file, "candidate.cu");
  EXPECT_TRUE(r.shared_object.empty());
}

TEST(CompilerTest, UnresolvedSymbolIsALinkError) {
  REQUIRE_NVCC();
  const CompileResult& r = Kernels().link_error;
  ASSERT_EQ(r.status.kind(), ErrorKind::kCompileError) << r.status.ToString();
  EXPECT_NE(r.status.message().find("undefined reference to 'helper_nobody_defines'"),
            std::string::npos)
      << r.status.message();
  // Only the one symbol: cudart, libc and libstdc++ imports all resolve.
  int errors = 0;
  for (const Diagnostic& d : r.diagnostics) errors += d.severity == Severity::kError;
  EXPECT_EQ(errors, 1) << r.status.message();
}

TEST(CompilerTest, HarnessCollectivesResolveAtLoadTime) {
  REQUIRE_NVCC();
  // kf_all_reduce is undefined in the .so (the worker provides it), which must not be a link error.
  const CompileResult& r = Kernels().collectives;
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  const char* source = testing::kCollectivesKernel;
  Policy allowed;
  allowed.harness_collectives = true;
  EXPECT_TRUE(CheckKernelPolicy(r.shared_object, source, allowed)->empty());
  std::vector<std::string> v = CheckKernelPolicy(r.shared_object, source, Policy{}).value();
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0], "calls kf_all_reduce: this task does not allow the harness collectives");
}

TEST(CompilerTest, SecondCompileIsACacheHitAndFaster) {
  REQUIRE_NVCC();
  TempCache cache;
  CompileOptions options;
  options.cache_dir = cache.dir();
  Compiler compiler(options);
  CompileJob job = JobFor(testing::kGoodKernel);
  job.source += "// cold-cache variant\n";
  CompileResult cold = compiler.Compile(job);
  ASSERT_TRUE(cold.status.ok()) << cold.status.ToString();
  EXPECT_FALSE(cold.cache_hit);
  CompileResult warm = compiler.Compile(job);
  ASSERT_TRUE(warm.status.ok()) << warm.status.ToString();
  EXPECT_TRUE(warm.cache_hit);
  EXPECT_EQ(warm.shared_object, cold.shared_object);
  EXPECT_EQ(warm.key, cold.key);
  EXPECT_FALSE(cold.resources.empty());
  EXPECT_EQ(warm.resources, cold.resources);  // kept in the cache entry
  EXPECT_LT(warm.seconds * 10, cold.seconds)
      << "cold " << cold.seconds << " s, warm " << warm.seconds << " s";
  // A fresh compiler (another process) sees the same entry; no staging directories are left behind.
  Compiler other(options);
  EXPECT_TRUE(other.Compile(job).cache_hit);
  for (const auto& e : fs::directory_iterator(cache.dir() / "kernels")) {
    EXPECT_FALSE(e.path().filename().string().starts_with(".")) << e.path();
  }
}

// nvcc on a candidate's source runs in kforge-jail: a kernel that includes a
// credentials file by absolute path gets "permission denied", never the
// file's content in the diagnostics it is shown; an honest kernel compiles.
TEST(CompilerTest, JailedNvccCannotReadFilesOutsideItsView) {
  REQUIRE_NVCC();
  TempCache cache;
  TempCache secret_dir;
  const fs::path secret = secret_dir.dir() / "keys.txt";
  ASSERT_TRUE(WriteFileAtomic(secret, "sk-kforge-secret-4242 = the key\n").ok());
  CompileOptions options;
  options.cache_dir = cache.dir();
  options.jail = KFORGE_JAIL;
  Compiler compiler(options);
  const std::string leak_source = "#include \"" + secret.string() + "\"\n" + testing::kGoodKernel;
  CompileJob leak = JobFor(leak_source.c_str());
  CompileResult r = compiler.Compile(leak);
  ASSERT_FALSE(r.status.ok());
  EXPECT_EQ(r.status.kind(), ErrorKind::kCompileError);
  const std::string shown = r.ToJson().dump() + r.status.message();
  EXPECT_EQ(shown.find("sk-kforge-secret"), std::string::npos) << shown;
  EXPECT_NE(shown.find("ermission denied"), std::string::npos) << shown;
  const std::string honest = std::string(testing::kGoodKernel) + "// jailed\n";
  CompileResult ok = compiler.Compile(JobFor(honest.c_str()));
  EXPECT_TRUE(ok.status.ok()) << ok.status.ToString();
}

// A cache entry whose object changed after it was published (a kernel that
// wrote into the cache at load time) is never served: the hit is verified.
TEST(CompilerTest, TamperedCacheEntryIsRecompiled) {
  REQUIRE_NVCC();
  TempCache cache;
  CompileOptions options;
  options.cache_dir = cache.dir();
  Compiler compiler(options);
  const std::string source = std::string(testing::kGoodKernel) + "// tamper variant\n";
  CompileResult first = compiler.Compile(JobFor(source.c_str()));
  ASSERT_TRUE(first.status.ok()) << first.status.ToString();
  auto original = ReadFile(first.shared_object);
  ASSERT_TRUE(original.ok());
  ASSERT_TRUE(WriteFileAtomic(first.shared_object, *original + "poisoned").ok());
  CompileResult again = compiler.Compile(JobFor(source.c_str()));
  ASSERT_TRUE(again.status.ok()) << again.status.ToString();
  EXPECT_FALSE(again.cache_hit);
  auto now = ReadFile(again.shared_object);
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now->find("poisoned"), std::string::npos);
  EXPECT_TRUE(compiler.Compile(JobFor(source.c_str())).cache_hit);
}

TEST(CompilerTest, FailedCompilesAreCachedWithTheirDiagnostics) {
  REQUIRE_NVCC();
  const CompileResult& first = Kernels().syntax_error;
  CompileResult again = testing::SharedCompiler().Compile(JobFor(testing::kSyntaxErrorKernel));
  EXPECT_TRUE(again.cache_hit);
  EXPECT_EQ(again.status.kind(), ErrorKind::kCompileError);
  EXPECT_EQ(again.status.message(), first.status.message());
  EXPECT_EQ(again.diagnostics, first.diagnostics);
  EXPECT_EQ(again.log, first.log);
}

TEST(CompilerTest, NonexistentNvccIsNotFound) {
  CompileOptions options;
  options.nvcc = "/nonexistent/cuda/bin/nvcc";
  Compiler compiler(options);
  CompileResult r = compiler.Compile(JobFor(testing::kGoodKernel));
  EXPECT_EQ(r.status.kind(), ErrorKind::kNotFound);
  EXPECT_NE(r.status.message().find("/nonexistent/cuda/bin/nvcc"), std::string::npos)
      << r.status.message();
  EXPECT_FALSE(r.cache_hit);
  EXPECT_TRUE(r.key.empty());
}

// Fake-runner cases: /bin/sh stands in for an executable nvcc path.
CompileOptions FakeOptions(const fs::path& cache) {
  CompileOptions options;
  options.nvcc = "/bin/sh";
  options.cache_dir = cache;
  return options;
}

Result<ProcessResult> FailWithError(const std::vector<std::string>& argv, const ProcessOptions&) {
  ProcessResult r;
  r.exit_code = 1;
  // The source file name is the argument before "-o".
  std::string file = *(std::find(argv.begin(), argv.end(), "-o") - 1);
  r.err = file +
          "(2): error: expected a \";\"\n  int x\n       ^\n\n1 error detected in the compilation "
          "of \"" +
          file + "\".\n";
  return r;
}

TEST(CompilerTest, CacheKeyCoversSourceFlagsArchAndToolchain) {
  TempCache cache;
  FakeRunner runner(FailWithError);
  Compiler compiler(FakeOptions(cache.dir()), runner);
  CompileJob base = JobFor(testing::kGoodKernel);
  std::string k0 = compiler.CacheKey(base).value();
  EXPECT_EQ(compiler.CacheKey(base).value(), k0);
  auto key_with = [&](auto change) {
    CompileJob job = base;
    change(job);
    return compiler.CacheKey(job).value();
  };
  std::set<std::string> keys = {
      k0,
      key_with([](CompileJob& j) { j.extra_flags = {"-DFOO=1"}; }),
      key_with([](CompileJob& j) { j.libraries = {"nccl"}; }),
      key_with([](CompileJob& j) { j.arch = "sm_100a"; }),
      key_with([](CompileJob& j) { j.source += " "; }),
      key_with([](CompileJob& j) { j.display_name = "other.cu"; }),
  };
  EXPECT_EQ(keys.size(), 6u);
  FakeRunner other_version(FailWithError, "Cuda compilation tools, release 99.1, V99.1.0\n");
  Compiler newer(FakeOptions(cache.dir()), other_version);
  EXPECT_NE(newer.CacheKey(base).value(), k0);
  EXPECT_EQ(compiler.CacheKey(JobFor("x")).ok(), true);
  CompileJob bad_arch = base;
  bad_arch.arch = "sm_90a -Xlinker --evil";
  EXPECT_EQ(compiler.CacheKey(bad_arch).status().kind(), ErrorKind::kInvalidInput);
}

TEST(CompilerTest, ArchAndLibraryNamesAreChecked) {
  TempCache cache;
  FakeRunner runner(FailWithError);
  Compiler compiler(FakeOptions(cache.dir()), runner);
  CompileJob base = JobFor(testing::kGoodKernel);
  for (const char* arch : {"sm_90", "sm_90a", "sm_100f", "sm_120"}) {
    CompileJob job = base;
    job.arch = arch;
    EXPECT_TRUE(compiler.CacheKey(job).ok()) << arch;
  }
  for (const char* arch :
       {"", "sm_", "sm_9", "sm_1000", "sm_90b", "sm_90aa", "compute_90", "sm_9a0"}) {
    CompileJob job = base;
    job.arch = arch;
    EXPECT_EQ(compiler.CacheKey(job).status().kind(), ErrorKind::kInvalidInput) << arch;
  }
  for (const char* lib : {"nccl", "cublasLt", "stdc++", "foo-1.2_x"}) {
    CompileJob job = base;
    job.libraries = {lib};
    EXPECT_TRUE(compiler.CacheKey(job).ok()) << lib;
  }
  for (const char* lib : {"", "a b", "x;y", "-Wl,--evil", "c/d"}) {
    CompileJob job = base;
    job.libraries = {lib};
    EXPECT_EQ(compiler.CacheKey(job).status().kind(), ErrorKind::kInvalidInput) << lib;
  }
}

TEST(CompilerTest, TimeoutIsItsOwnStatusAndIsNotCached) {
  TempCache cache;
  std::chrono::milliseconds seen{0};
  FakeRunner runner(
      [&](const std::vector<std::string>&, const ProcessOptions& o) -> Result<ProcessResult> {
        seen = o.timeout;
        ProcessResult r;
        r.timed_out = true;
        r.term_signal = 9;
        return r;
      });
  CompileOptions options = FakeOptions(cache.dir());
  options.timeout = std::chrono::seconds(7);
  Compiler compiler(options, runner);
  CompileResult r = compiler.Compile(JobFor(testing::kGoodKernel));
  EXPECT_EQ(r.status.kind(), ErrorKind::kTimeout);
  EXPECT_NE(r.status.message().find("within 7 s"), std::string::npos) << r.status.message();
  EXPECT_EQ(seen, std::chrono::seconds(7));
  // A timeout may be the machine's fault: the next attempt compiles again.
  CompileResult again = compiler.Compile(JobFor(testing::kGoodKernel));
  EXPECT_EQ(again.status.kind(), ErrorKind::kTimeout);
  EXPECT_FALSE(again.cache_hit);
  EXPECT_EQ(runner.compiles.load(), 2);
}

TEST(CompilerTest, CompileAllKeepsOrderRunsDuplicatesOnceAndInParallel) {
  TempCache cache;
  FakeRunner runner([](const std::vector<std::string>& argv, const ProcessOptions& o) {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    return FailWithError(argv, o);
  });
  CompileOptions options = FakeOptions(cache.dir());
  options.parallelism = 3;
  Compiler compiler(options, runner);
  CompileJob a = JobFor("int a;\n"), b = JobFor("int b;\n"), c = JobFor("int c;\n");
  a.display_name = "a.cu";
  b.display_name = "b.cu";
  c.display_name = "c.cu";
  std::vector<CompileResult> r = compiler.CompileAll({a, b, a, c});
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(runner.compiles.load(), 3);
  EXPECT_GE(runner.max_running.load(), 2);
  EXPECT_EQ(r[0].key, r[2].key);
  EXPECT_EQ(r[0].key, compiler.CacheKey(a).value());
  EXPECT_EQ(r[1].key, compiler.CacheKey(b).value());
  EXPECT_EQ(r[3].key, compiler.CacheKey(c).value());
  for (const CompileResult& each : r) {
    EXPECT_EQ(each.status.kind(), ErrorKind::kCompileError);
    ASSERT_EQ(each.diagnostics.size(), 1u);
    EXPECT_EQ(each.diagnostics[0].line, 2);
  }
  EXPECT_EQ(r[1].diagnostics[0].file, "b.cu");
  EXPECT_EQ(r[3].diagnostics[0].file, "c.cu");
  // All three failures were cached: a second round runs nothing.
  std::vector<CompileResult> again = compiler.CompileAll({c, b, a});
  EXPECT_EQ(runner.compiles.load(), 3);
  for (const CompileResult& each : again) EXPECT_TRUE(each.cache_hit);
}

}  // namespace
}  // namespace kforge::eval
