#include "compile/policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <string_view>

#include "kforge/core/fs.h"
#include "test_kernels.h"

namespace kforge::eval {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& needle) {
  return std::any_of(v.begin(), v.end(),
                     [&](const std::string& s) { return s.find(needle) != std::string::npos; });
}

std::string Joined(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += s + "\n";
  return out;
}

Policy Allow(bool collectives, bool nccl, bool cublas) {
  Policy p;
  p.harness_collectives = collectives;
  p.nccl = nccl;
  p.cublas = cublas;
  return p;
}

TEST(PolicyTest, TaskPolicyGatesLibraries) {
  KernelSymbols s;
  s.imported = {"ncclAllReduce", "cublasLtMatmul", "cublasGemmEx",
                "kf_all_gather", "cudaMalloc",     "memcpy"};
  std::vector<std::string> none = CheckPolicy(s, "", Allow(false, false, false));
  EXPECT_EQ(none.size(), 4u) << Joined(none);
  EXPECT_TRUE(Contains(none, "calls ncclAllReduce: this task does not allow NCCL"));
  EXPECT_TRUE(Contains(none, "calls cublasLtMatmul: this task does not allow cuBLAS"));
  EXPECT_TRUE(Contains(none, "calls cublasGemmEx: this task does not allow cuBLAS"));
  EXPECT_TRUE(
      Contains(none, "calls kf_all_gather: this task does not allow the harness collectives"));
  EXPECT_TRUE(CheckPolicy(s, "", Allow(true, true, true)).empty());
  std::vector<std::string> only_nccl = CheckPolicy(s, "", Allow(true, true, false));
  EXPECT_EQ(only_nccl.size(), 2u) << Joined(only_nccl);
}

TEST(PolicyTest, CufftAndCudnnHaveTheirOwnSwitches) {
  KernelSymbols s;
  s.imported = {"cufftPlan1d", "cufftExecR2C", "cudnnCreate", "cudaMalloc"};
  std::vector<std::string> none = CheckPolicy(s, "", Policy{});
  EXPECT_EQ(none.size(), 3u) << Joined(none);
  EXPECT_TRUE(Contains(none, "calls cufftPlan1d: this task does not allow cuFFT"));
  EXPECT_TRUE(Contains(none, "calls cufftExecR2C: this task does not allow cuFFT"));
  EXPECT_TRUE(Contains(none, "calls cudnnCreate: this task does not allow cuDNN"));
  Policy fft;
  fft.cufft = true;
  std::vector<std::string> only_fft = CheckPolicy(s, "", fft);
  EXPECT_EQ(only_fft.size(), 1u) << Joined(only_fft);
  EXPECT_TRUE(Contains(only_fft, "cuDNN"));
  fft.cudnn = true;
  EXPECT_TRUE(CheckPolicy(s, "", fft).empty());
  // Headers, and exports that could interpose on the libraries.
  const std::string includes = "#include <cufftXt.h>\n#include \"cudnn_v9.h\"\n";
  std::vector<std::string> v = CheckPolicy(KernelSymbols{}, includes, Policy{});
  EXPECT_EQ(v.size(), 2u) << Joined(v);
  EXPECT_TRUE(Contains(v, "includes cufftXt.h: this task does not allow cuFFT"));
  EXPECT_TRUE(Contains(v, "includes cudnn_v9.h: this task does not allow cuDNN"));
  EXPECT_TRUE(CheckPolicy(KernelSymbols{}, includes, fft).empty());
  KernelSymbols exports;
  exports.exported = {"kf_run", "cufftExecC2C", "cudnnConvolutionForward"};
  v = CheckPolicy(exports, "", fft);
  EXPECT_EQ(v.size(), 2u) << Joined(v);
  EXPECT_TRUE(Contains(v, "defines cufftExecC2C"));
}

TEST(PolicyTest, EscapesAreAlwaysForbidden) {
  KernelSymbols s;
  s.imported = {"cuMulticastCreate",
                "dlsym",
                "cudaGetDriverEntryPointByVersion",
                "cuGetProcAddress_v2",
                "execvp",
                "posix_spawnp",
                "system",
                "socket",
                "ptrace",
                "kill",
                "setenv",
                "cudaDeviceReset",
                "cudaSetDevice",
                "cudaDeviceSetLimit",
                "pthread_create",
                "mprotect",
                "syscall",
                "_Fork",
                "__clone3",
                "wordexp",
                "sigqueue",
                "pidfd_getfd",
                "unshare",
                "umount2",
                "cuMemSetAccess",
                "cuMemRetainAllocationHandle"};
  std::vector<std::string> v = CheckPolicy(s, "", Allow(true, true, true));
  EXPECT_EQ(v.size(), s.imported.size()) << Joined(v);
  for (const std::string& name : s.imported)
    EXPECT_TRUE(Contains(v, "calls " + name + ": ")) << name;
  EXPECT_TRUE(Contains(v, "calls cuMulticastCreate: NVLink multicast is disabled"));
  EXPECT_TRUE(Contains(v, "calls cuMemSetAccess: a kernel may not change GPU memory mappings"));
  // Repeated imports are reported once; ordinary runtime calls pass.
  s.imported = {"dlopen",
                "dlopen",
                "cudaStreamCreateWithFlags",
                "cudaGraphLaunch",
                "cudaEventRecord",
                "cudaFuncSetAttribute",
                "pthread_mutex_lock",
                "__cudaRegisterFatBinary"};
  v = CheckPolicy(s, "", Policy{});
  ASSERT_EQ(v.size(), 1u) << Joined(v);
  EXPECT_NE(v[0].find("calls dlopen: "), std::string::npos) << v[0];
}

TEST(PolicyTest, DefiningLibraryFunctionsIsInterposition) {
  KernelSymbols s;
  s.exported = {"kf_run",        "kf_setup",      "kf_teardown", "cudaEventElapsedTime",
                "clock_gettime", "ncclAllReduce", "kf_barrier",  "cuda_copy_helper",
                "_Z4copyPKfPfl"};
  std::vector<std::string> v = CheckPolicy(s, "", Allow(true, true, true));
  EXPECT_EQ(v.size(), 4u) << Joined(v);
  for (const char* name :
       {"cudaEventElapsedTime", "clock_gettime", "ncclAllReduce", "kf_barrier"}) {
    EXPECT_TRUE(Contains(v, std::string("defines ") + name + ": ")) << name;
  }
}

TEST(PolicyTest, SourceScanSkipsCommentsButNotStrings) {
  KernelSymbols clean;
  EXPECT_TRUE(CheckPolicy(clean, "// no multimem here\n/* nor cuMulticast,\n multimem */ int x;\n",
                          Policy{})
                  .empty());
  EXPECT_TRUE(CheckPolicy(clean, "// #include <nccl.h>\n", Policy{}).empty());
  std::vector<std::string> v = CheckPolicy(
      clean, "asm(\"multimem.st.relaxed.sys.global.f32 [%0], %1;\" :: \"l\"(p), \"f\"(x));",
      Policy{});
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].find("uses multimem PTX instructions"), std::string::npos) << v[0];
  // A "//" inside a string does not start a comment.
  v = CheckPolicy(clean, "const char* s = \"http://x\"; // ok\nasm(\"multimem.ld_reduce\");",
                  Policy{});
  EXPECT_EQ(v.size(), 1u) << Joined(v);
  v = CheckPolicy(clean, "#include <nccl.h>\n#include \"cublasLt.h\"\n", Policy{});
  EXPECT_EQ(v.size(), 2u) << Joined(v);
  EXPECT_TRUE(Contains(v, "includes nccl.h: this task does not allow NCCL"));
  EXPECT_TRUE(Contains(v, "includes cublasLt.h: this task does not allow cuBLAS"));
  EXPECT_TRUE(
      CheckPolicy(clean, "#include <nccl.h>\n#include <cublasLt.h>\n", Allow(false, true, true))
          .empty());
}

TEST(PolicyTest, ReadingSomethingThatIsNotAnElfFails) {
  Result<std::filesystem::path> dir = MakeTempDir("kforge-policy-test");
  ASSERT_TRUE(dir.ok());
  std::filesystem::path text = *dir / "not.so";
  ASSERT_TRUE(WriteFileAtomic(text, "#!/bin/sh\necho not an elf\n").ok());
  EXPECT_EQ(ReadKernelSymbols(text).status().kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(ReadKernelSymbols(*dir / "absent.so").status().kind(), ErrorKind::kNotFound);
  std::filesystem::remove_all(*dir);
}

#define REQUIRE_NVCC()      \
  if (!testing::HaveNvcc()) \
  GTEST_SKIP() << "nvcc not found: " << testing::SharedCompiler().Nvcc().status().message()

TEST(PolicyTest, CompiledGoodKernelIsClean) {
  REQUIRE_NVCC();
  const CompileResult& r = testing::Kernels().good;
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  Result<std::vector<std::string>> v =
      CheckKernelPolicy(r.shared_object, testing::kGoodKernel, Policy{});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_TRUE(v->empty()) << Joined(*v);
}

TEST(PolicyTest, CompiledNcclKernelNeedsTheNcclPolicy) {
  REQUIRE_NVCC();
  const CompileResult& r = testing::Kernels().nccl;
  ASSERT_TRUE(r.status.ok()) << r.status.ToString() << "\n" << r.log;
  std::vector<std::string> denied =
      CheckKernelPolicy(r.shared_object, testing::kNcclKernel, Policy{}).value();
  EXPECT_EQ(denied.size(), 2u) << Joined(denied);
  EXPECT_TRUE(Contains(denied, "calls ncclAllReduce: this task does not allow NCCL"));
  EXPECT_TRUE(Contains(denied, "includes nccl.h"));
  std::vector<std::string> allowed =
      CheckKernelPolicy(r.shared_object, testing::kNcclKernel, Allow(false, true, false)).value();
  EXPECT_TRUE(allowed.empty()) << Joined(allowed);
}

// A kernel that plans a cuFFT transform: linked with -lcufft it compiles and
// passes the link check; the policy refuses it unless the task allows cuFFT.
TEST(PolicyTest, CompiledCufftKernelNeedsTheCufftPolicy) {
  REQUIRE_NVCC();
  const char* source = R"(#include <kforge/kernel.h>
#include <cufft.h>
static cufftHandle plan;
extern "C" int kf_setup(kf_ctx*) { return cufftPlan1d(&plan, 64, CUFFT_R2C, 1) == CUFFT_SUCCESS ? 0 : 1; }
extern "C" int kf_run(kf_ctx* c) {
  cufftSetStream(plan, c->stream);
  return cufftExecR2C(plan, (cufftReal*)c->inputs[0].data, (cufftComplex*)c->outputs[0].data);
}
)";
  CompileJob job = testing::JobFor(source);
  job.libraries = {"cufft"};
  CompileResult r = testing::SharedCompiler().Compile(job);
  ASSERT_TRUE(r.status.ok()) << r.status.ToString() << "\n" << r.log;
  std::vector<std::string> denied = CheckKernelPolicy(r.shared_object, source, Policy{}).value();
  EXPECT_TRUE(Contains(denied, "calls cufftPlan1d: this task does not allow cuFFT"))
      << Joined(denied);
  EXPECT_TRUE(Contains(denied, "includes cufft.h: this task does not allow cuFFT"));
  Policy allowed;
  allowed.cufft = true;
  std::vector<std::string> ok = CheckKernelPolicy(r.shared_object, source, allowed).value();
  EXPECT_TRUE(ok.empty()) << Joined(ok);
  // Without -lcufft (a task that forbids it) the link check names the call too.
  CompileResult unlinked = testing::SharedCompiler().Compile(testing::JobFor(source));
  EXPECT_FALSE(unlinked.status.ok());
  EXPECT_NE(unlinked.status.message().find("cufftPlan1d"), std::string::npos)
      << unlinked.status.message();
}

// A library the machine lacks is kNotFound, naming it, and is not cached as a
// failed compile: the task cannot be evaluated here, whatever the kernel.
TEST(PolicyTest, AMissingLibraryIsNamedNotACompileError) {
  REQUIRE_NVCC();
  CompileJob job = testing::JobFor(testing::kGoodKernel);
  job.libraries = {"kforge_no_such_library"};
  CompileResult r = testing::SharedCompiler().Compile(job);
  EXPECT_EQ(r.status.kind(), ErrorKind::kNotFound) << r.status.ToString();
  EXPECT_NE(r.status.message().find("libkforge_no_such_library.so"), std::string::npos)
      << r.status.message();
  EXPECT_FALSE(r.cache_hit);
}

TEST(PolicyTest, CompiledBadActorIsCaughtTwice) {
  REQUIRE_NVCC();
  const CompileResult& r = testing::Kernels().bad_actor;
  ASSERT_TRUE(r.status.ok()) << r.status.ToString() << "\n" << r.log;
  std::vector<std::string> v =
      CheckKernelPolicy(r.shared_object, testing::kBadActorKernel, Allow(true, true, true)).value();
  EXPECT_EQ(v.size(), 2u) << Joined(v);
  EXPECT_TRUE(Contains(v, "calls dlopen: a kernel may not load code"));
  EXPECT_TRUE(Contains(v, "uses multimem PTX instructions"));
}

// Sources and symbol names of megabytes, built to defeat a backtracking
// matcher, are scanned in one pass (std::regex overflowed the stack on them).
std::string Repeat(std::string_view piece, size_t bytes) {
  std::string out;
  out.reserve(bytes + piece.size());
  while (out.size() < bytes) out.append(piece);
  return out;
}

constexpr size_t kMegabyte = 1 << 20;

TEST(PolicyAdversarialTest, MegabyteIncludeLookalikes) {
  KernelSymbols clean;
  std::string source = Repeat("#include <", kMegabyte) + Repeat("#", kMegabyte) + "#include <nccl" +
                       Repeat("x", kMegabyte) + ">\n" + "# include <cublas" +
                       Repeat("_", kMegabyte) + ".hh>\n";
  EXPECT_TRUE(CheckPolicy(clean, source, Policy{}).empty());
  std::vector<std::string> v = CheckPolicy(clean, source + "#include \"cublas_v2.h\"\n", Policy{});
  ASSERT_EQ(v.size(), 1u) << Joined(v);
  EXPECT_EQ(v[0], "includes cublas_v2.h: this task does not allow cuBLAS");
}

TEST(PolicyAdversarialTest, MegabyteOfWhiteSpaceInsideAnInclude) {
  KernelSymbols clean;
  std::string source =
      "#" + Repeat(" \t", kMegabyte) + "include" + Repeat("\n", kMegabyte) + "<nccl_net.h>\n";
  std::vector<std::string> v = CheckPolicy(clean, source, Policy{});
  ASSERT_EQ(v.size(), 1u) << Joined(v);
  EXPECT_EQ(v[0], "includes nccl_net.h: this task does not allow NCCL");
  // Digits are not part of an NCCL header name; the mismatched quotes still count.
  EXPECT_TRUE(CheckPolicy(clean, "#include <nccl2.h>\n", Policy{}).empty());
  EXPECT_EQ(CheckPolicy(clean, "#include \"nccl.h>\n", Policy{}).size(), 1u);
}

TEST(PolicyAdversarialTest, MegabyteCommentsAndStrings) {
  KernelSymbols clean;
  EXPECT_TRUE(CheckPolicy(clean, "/*" + Repeat("#include <nccl.h> ", kMegabyte), Policy{}).empty());
  std::vector<std::string> v =
      CheckPolicy(clean, "\"" + Repeat("\\\"{", kMegabyte) + "#include <nccl.h>", Policy{});
  EXPECT_EQ(v.size(), 1u) << Joined(v);
}

TEST(PolicyAdversarialTest, MegabyteSymbolNames) {
  KernelSymbols s;
  std::string tail = Repeat("a", 2 * kMegabyte);
  s.exported = {"cudaX" + tail,    "cuda_" + tail,  "cu" + tail,
                "cublasLt" + tail, "pncclZ" + tail, "cuM\n" + tail};
  std::vector<std::string> v = CheckPolicy(s, "", Allow(true, true, true));
  ASSERT_EQ(v.size(), 3u);
  EXPECT_TRUE(v[0].starts_with("defines cudaXaaa")) << v[0].substr(0, 40);
  EXPECT_TRUE(v[1].starts_with("defines cublasLtaaa")) << v[1].substr(0, 40);
  EXPECT_TRUE(v[2].starts_with("defines pncclZaaa")) << v[2].substr(0, 40);
}

}  // namespace
}  // namespace kforge::eval
