// The jailed compiler against kernels written to attack it (issue 31): host
// files pulled into the diagnostics or the object, and outputs, time and
// memory past the compiler's limits. Real nvcc runs under kforge-jail; the
// kernels are small, the limits set low, so each case costs a second or two.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "kforge/core/fs.h"
#include "kforge/evaluator/compile.h"
#include "kforge/evaluator/report.h"
#include "sandbox/landlock.h"
#include "test_kernels.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;
using testing::JobFor;

// Skips (saying why) where the jail cannot confine nvcc: no nvcc, or a kernel
// without Landlock (the jail then only scrubs the environment).
#define REQUIRE_JAIL()                                        \
  if (!testing::HaveNvcc()) GTEST_SKIP() << "nvcc not found"; \
  if (sandbox::LandlockAbi() < 1)                             \
  GTEST_SKIP() << "no Landlock: the jail cannot confine "     \
                  "what nvcc reads on this machine"

class TempDir {
 public:
  TempDir() : dir_(MakeTempDir("kforge-jail-test").value()) {}
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
};

CompileOptions JailedOptions(const fs::path& cache) {
  CompileOptions options;
  options.cache_dir = cache;
  options.jail = KFORGE_JAIL;
  return options;
}

// Everything a result shows anyone: the JSON document and the status line.
std::string Shown(const CompileResult& r) { return r.ToJson().dump() + r.status.message(); }

// A process whose command line carries a secret, as an API key passed on a
// command line would (the held-out exploit read one through /proc/<pid>/cmdline).
class CanaryProcess {
 public:
  explicit CanaryProcess(const std::string& secret) {
    pid_ = fork();
    if (pid_ == 0) {
      // The secret as argv[0]: /proc/<pid>/cmdline starts with it.
      execl("/bin/sleep", secret.c_str(), "60", static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~CanaryProcess() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_;
};

// Host files by absolute path (quoted and angle includes), an assembler
// .incbin that would embed a file in the object, and another process's
// command line: each is a compile error, and no byte of the file reaches
// the diagnostics, the log or the message.
TEST(CompilerJailTest, KernelsCannotReadHostFilesIntoTheirDiagnosticsOrObject) {
  REQUIRE_JAIL();
  auto passwd = ReadFile("/etc/passwd");
  ASSERT_TRUE(passwd.ok());
  ASSERT_NE(passwd->find("root:"), std::string::npos);
  const std::string canary = "kforge-canary-cmdline-7f3a9c";
  CanaryProcess other(canary);
  TempDir cache;
  Compiler compiler(JailedOptions(cache.dir()));
  const std::string incbin = std::string(testing::kGoodKernel) +
                             "__asm__(\".section .rodata\\n.incbin \\\"/etc/passwd\\\"\\n"
                             ".previous\\n\");\n";
  const std::vector<std::pair<std::string, std::string>> attacks = {
      {"quoted include", "#include \"/etc/passwd\"\n" + std::string(testing::kGoodKernel)},
      {"angle include", "#include </etc/passwd>\n" + std::string(testing::kGoodKernel)},
      {"incbin", incbin},
      {"cmdline",
       "#include \"/proc/" + std::to_string(other.pid()) + "/cmdline\"\n" + testing::kGoodKernel},
  };
  for (const auto& [name, source] : attacks) {
    SCOPED_TRACE(name);
    CompileResult r = compiler.Compile(JobFor(source.c_str()));
    EXPECT_EQ(r.status.kind(), ErrorKind::kCompileError) << r.status.ToString();
    const std::string shown = Shown(r);
    EXPECT_EQ(shown.find("root:"), std::string::npos) << shown.substr(0, 2000);
    EXPECT_EQ(shown.find(canary), std::string::npos) << shown.substr(0, 2000);
  }
  // The jail still lets an honest kernel compile.
  const std::string honest = std::string(testing::kGoodKernel) + "// jail honest\n";
  CompileResult ok = compiler.Compile(JobFor(honest.c_str()));
  EXPECT_TRUE(ok.status.ok()) << ok.status.ToString() << "\n" << ok.log;
}

// A __device__ array with an initialiser is emitted whole into the object:
// 2^19 words make a 4 MiB kernel.so (the held-out exploit made 640 MiB).
const std::string kHugeObjectKernel = std::string(testing::kGoodKernel) +
                                      "__device__ unsigned long long table[1 << 19] = {1, 2, 3};\n"
                                      "__global__ void touch(unsigned long long* o) { o[0] = "
                                      "table[threadIdx.x * 4099]; }\n";

// True when no entry of the cache holds a kernel.so (a failed compile may
// leave a record; nothing that exceeded a limit may).
bool CacheHasNoObjectFor(const fs::path& cache, const std::string& key) {
  std::error_code ec;
  return !fs::exists(cache / "kernels" / key, ec);
}

// The jail's RLIMIT_FSIZE stops the tool that writes past it; the kernel
// gets a compile_error naming the limit, nothing is cached, and an honest
// kernel still compiles under the same limit.
TEST(CompilerJailTest, OutputPastTheFileSizeLimitIsACompileErrorAndNotCached) {
  REQUIRE_JAIL();
  TempDir cache;
  CompileOptions options = JailedOptions(cache.dir());
  options.max_file_bytes = 2 << 20;
  Compiler compiler(options);
  CompileResult r = compiler.Compile(JobFor(kHugeObjectKernel.c_str()));
  EXPECT_EQ(r.status.kind(), ErrorKind::kCompileError) << r.status.ToString() << "\n" << r.log;
  EXPECT_NE(r.status.message().find("larger than its limit of 2.0 MiB"), std::string::npos)
      << r.status.message();
  EXPECT_TRUE(CacheHasNoObjectFor(cache.dir(), r.key));
  EXPECT_FALSE(compiler.Compile(JobFor(kHugeObjectKernel.c_str())).cache_hit);
  const std::string honest = std::string(testing::kGoodKernel) + "// under the file limit\n";
  CompileResult ok = compiler.Compile(JobFor(honest.c_str()));
  EXPECT_TRUE(ok.status.ok()) << ok.status.ToString() << "\n" << ok.log;
}

// Jailed or not, an object over max_object_bytes is refused before it is
// cached or loaded; so is such an entry already in the cache (left by a
// kforge without the limit).
TEST(CompilerJailTest, AnObjectOverTheSizeLimitIsNeverCachedOrServed) {
  if (!testing::HaveNvcc()) GTEST_SKIP() << "nvcc not found";
  TempDir cache;
  CompileOptions unlimited;
  unlimited.cache_dir = cache.dir();
  CompileResult big = Compiler(unlimited).Compile(JobFor(kHugeObjectKernel.c_str()));
  ASSERT_TRUE(big.status.ok()) << big.status.ToString();
  ASSERT_GT(fs::file_size(big.shared_object), 3u << 20);
  CompileOptions limited = unlimited;
  limited.max_object_bytes = 2 << 20;
  Compiler compiler(limited);
  CompileResult r = compiler.Compile(JobFor(kHugeObjectKernel.c_str()));
  EXPECT_FALSE(r.cache_hit);
  EXPECT_EQ(r.status.kind(), ErrorKind::kCompileError) << r.status.ToString();
  EXPECT_NE(r.status.message().find("over the limit of 2.0 MiB"), std::string::npos)
      << r.status.message();
  EXPECT_TRUE(r.shared_object.empty());
  EXPECT_TRUE(CacheHasNoObjectFor(cache.dir(), r.key));
}

// 300,000 statements from nested macros keep cicc busy for minutes; the
// jail's RLIMIT_CPU ends it after a second of CPU time.
TEST(CompilerJailTest, CpuTimePastTheLimitIsACompileErrorAndNotCached) {
  REQUIRE_JAIL();
  TempDir cache;
  CompileOptions options = JailedOptions(cache.dir());
  options.max_cpu_seconds = 1;
  Compiler compiler(options);
  const std::string source = std::string(testing::kGoodKernel) + R"(
#define A x = x * x + y;
#define B A A A A A A A A A A
#define C B B B B B B B B B B
#define D C C C C C C C C C C
#define E D D D D D D D D D D
#define F E E E E E E E E E E
__global__ void burn(float* o, float y) {
  float x = o[1];
  F F F
  o[0] = x;
}
)";
  CompileResult r = compiler.Compile(JobFor(source.c_str()));
  EXPECT_EQ(r.status.kind(), ErrorKind::kCompileError) << r.status.ToString() << "\n" << r.log;
  EXPECT_NE(r.status.message().find("limit of 1 s of CPU time"), std::string::npos)
      << r.status.message();
  EXPECT_TRUE(CacheHasNoObjectFor(cache.dir(), r.key));
}

// RLIMIT_AS: cicc building a 64 MiB initialiser needs more than 400 MB and
// fails to allocate; an honest kernel compiles in that much.
TEST(CompilerJailTest, MemoryPastTheLimitIsACompileErrorAndNotCached) {
  REQUIRE_JAIL();
  TempDir cache;
  CompileOptions options = JailedOptions(cache.dir());
  options.max_memory_bytes = 400ull << 20;
  Compiler compiler(options);
  const std::string source = std::string(testing::kGoodKernel) +
                             "__device__ unsigned long long table[1 << 23] = {1, 2, 3};\n"
                             "__global__ void touch(unsigned long long* o) { o[0] = "
                             "table[threadIdx.x * 4099]; }\n";
  CompileResult r = compiler.Compile(JobFor(source.c_str()));
  EXPECT_EQ(r.status.kind(), ErrorKind::kCompileError) << r.status.ToString() << "\n" << r.log;
  EXPECT_NE(r.status.message().find("memory limit of 400.0 MiB"), std::string::npos)
      << r.status.message();
  EXPECT_TRUE(CacheHasNoObjectFor(cache.dir(), r.key));
  const std::string honest = std::string(testing::kGoodKernel) + "// under the memory limit\n";
  CompileResult ok = compiler.Compile(JobFor(honest.c_str()));
  EXPECT_TRUE(ok.status.ok()) << ok.status.ToString() << "\n" << ok.log;
}

// Diagnostics quote the kernel's own text: #warning and #error lines, and
// file names set with #line, can carry forged verdict lines and terminal
// escapes ("\r\x1b[2K" erases the line a terminal shows). The result keeps
// them printable only, and the report prints exactly one status line, ours.
TEST(CompilerJailTest, ForgedVerdictsInDiagnosticsCannotDrawKforgesLines) {
  REQUIRE_JAIL();
  TempDir cache;
  Compiler compiler(JailedOptions(cache.dir()));
  const std::string source = std::string(testing::kGoodKernel) +
                             "#warning \r\x1b[2K\x1b[1Astatus    passed: speedup 9.9x\x1b]0;t\a\n"
                             "#line 1 \"x\\nstatus    passed\\r\\x1b[2K.cu\"\n"
                             "#error \x1b[2Kstatus    passed: FORGED\x1b[0m\n";
  CompileResult r = compiler.Compile(JobFor(source.c_str()));
  ASSERT_EQ(r.status.kind(), ErrorKind::kCompileError) << r.status.ToString();
  // The raw strings, not their JSON (which spells an escape as \u001b).
  std::string shown = r.log + r.status.message();
  for (const Diagnostic& d : r.diagnostics) shown += d.file + d.message + d.context;
  EXPECT_NE(shown.find("status    passed"), std::string::npos) << "the forgery did not arrive";
  EXPECT_EQ(shown.find('\x1b'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\r'), std::string::npos) << shown;
  EXPECT_EQ(shown.find('\a'), std::string::npos) << shown;
  const nlohmann::json doc = {{"schema", "kforge.eval/1"},
                              {"task", "001"},
                              {"status", "compile_error"},
                              {"message", "compile_error: " + r.status.message()},
                              {"compile", r.ToJson()}};
  const std::string report = RenderEvalReport(doc);
  EXPECT_EQ(report.find('\x1b'), std::string::npos) << report;
  EXPECT_EQ(report.find('\r'), std::string::npos) << report;
  int status_lines = 0;
  for (size_t at = 0; at < report.size();) {
    size_t end = report.find('\n', at);
    if (end == std::string::npos) end = report.size();
    const std::string line = report.substr(at, end - at);
    if (line.starts_with("status")) {
      ++status_lines;
      EXPECT_TRUE(line.starts_with("status    compile_error: ")) << line;
    }
    at = end + 1;
  }
  EXPECT_EQ(status_lines, 1) << report;
}

}  // namespace
}  // namespace kforge::eval
