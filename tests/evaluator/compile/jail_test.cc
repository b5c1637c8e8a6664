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

}  // namespace
}  // namespace kforge::eval
