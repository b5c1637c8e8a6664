// ptxas -v's report parsed into KernelResources, on output recorded from nvcc
// 13.0 (sm_90a), and removed from the log a model reads.
#include "kforge/evaluator/resource_usage.h"

#include <gtest/gtest.h>

#include <string>

namespace kforge::eval {
namespace {

// nvcc -arch=sm_90a -O3 -shared -Xptxas -v: two instantiations of a template
// with static shared memory and a stack, a kernel with dynamic shared memory
// only, and a small one.
constexpr const char* kTemplates =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function '_Z3BigILi1024EEvPfPKf' for 'sm_90a'\n"
    "ptxas info    : Function properties for _Z3BigILi1024EEvPfPKf\n"
    "    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 40 registers, used 1 barriers, 256 bytes cumulative stack size, 4096 "
    "bytes smem\n"
    "ptxas info    : Compile time = 29.187 ms\n"
    "ptxas info    : Compiling entry function '_Z3BigILi256EEvPfPKf' for 'sm_90a'\n"
    "ptxas info    : Function properties for _Z3BigILi256EEvPfPKf\n"
    "    256 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 40 registers, used 1 barriers, 256 bytes cumulative stack size, 1024 "
    "bytes smem\n"
    "ptxas info    : Compile time = 25.262 ms\n"
    "ptxas info    : Compiling entry function '_Z3DynPf' for 'sm_90a'\n"
    "ptxas info    : Function properties for _Z3DynPf\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 12 registers, used 1 barriers\n"
    "ptxas info    : Compile time = 1.147 ms\n";

// __launch_bounds__(1024, 2) on a kernel holding 96 floats per thread.
constexpr const char* kSpills =
    "ptxas info    : 0 bytes gmem\r\n"
    "ptxas info    : Compiling entry function '_Z5HeavyPfPKf' for 'sm_90a'\r\n"
    "ptxas info    : Function properties for _Z5HeavyPfPKf\r\n"
    "    1576 bytes stack frame, 1572 bytes spill stores, 3516 bytes spill loads\r\n"
    "ptxas info    : Used 32 registers, used 0 barriers, 1576 bytes cumulative stack size\r\n"
    "ptxas info    : Compile time = 55.059 ms\r\n";

// A __noinline__ device function comes after its caller, with properties only.
constexpr const char* kDeviceFunction =
    "ptxas info    : Compiling entry function '_Z1KPf' for 'sm_90a'\n"
    "ptxas info    : Function properties for _Z1KPf\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 32 registers, used 0 barriers\n"
    "ptxas info    : Compile time = 8.217 ms\n"
    "ptxas info    : Function properties for _Z6helperPfi\n"
    "    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
    "ptxas info    : Function properties for _Z4tinyv\n"
    "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";

TEST(ResourceUsage, ParsesEveryEntryFunctionOfARealReport) {
  std::vector<KernelResources> k = ParseResourceUsage(kTemplates);
  ASSERT_EQ(k.size(), 3u);
  EXPECT_EQ(k[0].name, "void Big<1024>(float*, float const*)");
  EXPECT_EQ(k[0].arch, "sm_90a");
  EXPECT_TRUE(k[0].entry);
  EXPECT_EQ(k[0].registers, 40);
  EXPECT_EQ(k[0].barriers, 1);
  EXPECT_EQ(k[0].shared_bytes, 4096);
  EXPECT_EQ(k[0].stack_bytes, 256);
  EXPECT_EQ(k[0].spill_store_bytes, 0);
  EXPECT_EQ(k[1].name, "void Big<256>(float*, float const*)");
  EXPECT_EQ(k[1].shared_bytes, 1024);
  EXPECT_EQ(k[2].name, "Dyn(float*)");
  EXPECT_EQ(k[2].registers, 12);
  EXPECT_EQ(k[2].shared_bytes, 0);
  // 40 registers: 1280 per warp, 51 warps of 64 by registers.
  EXPECT_EQ(k[0].WarpsPerSmByRegisters(), 51);
  EXPECT_EQ(k[0].MaxWarpsPerSm(), 64);
  EXPECT_EQ(k[2].WarpsPerSmByRegisters(), 64);
}

TEST(ResourceUsage, SpillsAndCarriageReturnsAreRead) {
  std::vector<KernelResources> k = ParseResourceUsage(kSpills);
  ASSERT_EQ(k.size(), 1u);
  EXPECT_EQ(k[0].name, "Heavy(float*, float const*)");
  EXPECT_EQ(k[0].registers, 32);
  EXPECT_EQ(k[0].stack_bytes, 1576);
  EXPECT_EQ(k[0].spill_store_bytes, 1572);
  EXPECT_EQ(k[0].spill_load_bytes, 3516);
}

TEST(ResourceUsage, DeviceFunctionsAreKeptOnlyWhenTheySpillOrUseAStack) {
  std::vector<KernelResources> k = ParseResourceUsage(kDeviceFunction);
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[0].name, "K(float*)");
  EXPECT_EQ(k[0].spill_store_bytes, 0);
  EXPECT_EQ(k[1].name, "helper(float*, int)");
  EXPECT_FALSE(k[1].entry);
  EXPECT_EQ(k[1].arch, "");
  EXPECT_EQ(k[1].stack_bytes, 16);
  EXPECT_EQ(k[1].spill_store_bytes, 8);
  EXPECT_EQ(k[1].WarpsPerSmByRegisters(), 0);
}

TEST(ResourceUsage, OccupancyByRegistersFollowsTheArch) {
  KernelResources k;
  k.registers = 255;  // 8160 per warp: 8 warps
  k.arch = "sm_90a";
  EXPECT_EQ(k.WarpsPerSmByRegisters(), 8);
  k.registers = 128;
  EXPECT_EQ(k.WarpsPerSmByRegisters(), 16);
  k.registers = 33;  // rounded to 40 per thread
  EXPECT_EQ(k.WarpsPerSmByRegisters(), 51);
  k.registers = 16;
  k.arch = "sm_89";  // 48 warps at most
  EXPECT_EQ(k.WarpsPerSmByRegisters(), 48);
  k.arch = "sm_100a";
  EXPECT_EQ(k.WarpsPerSmByRegisters(), 64);
  k.arch = "sm_999";
  EXPECT_EQ(k.WarpsPerSmByRegisters(), 0);
  k.arch = "compute_90";
  EXPECT_EQ(k.MaxWarpsPerSm(), 0);
}

TEST(ResourceUsage, SummarySaysWhatLimitsTheKernel) {
  std::vector<KernelResources> k = ParseResourceUsage(std::string(kTemplates) + kSpills);
  EXPECT_EQ(
      k[0].Summary(),
      "40 registers (at most 51 of 64 warps per SM), 4 KiB static shared memory, 256 B stack");
  EXPECT_EQ(k[2].Summary(), "12 registers");
  EXPECT_EQ(k[3].Summary(), "32 registers, 1576 B stack; spills 1572 B stored, 3516 B loaded");
  EXPECT_EQ(ParseResourceUsage(kDeviceFunction)[1].Summary(),
            "device function, 16 B stack; spills 8 B stored, 8 B loaded");
}

TEST(ResourceUsage, StrippingLeavesEverythingElse) {
  const std::string log = std::string(
                              "kernel.cu(3): warning #177-D: variable \"x\" was declared "
                              "but never referenced\n") +
                          kTemplates + kSpills + "ptxas warning : Registers are spilled\n";
  EXPECT_EQ(StripResourceUsage(log),
            "kernel.cu(3): warning #177-D: variable \"x\" was declared but never referenced\n"
            "ptxas warning : Registers are spilled\n");
  // A property-shaped line that follows no "Function properties" line stays.
  EXPECT_EQ(StripResourceUsage("    12 bytes stack frame, x\n"), "    12 bytes stack frame, x\n");
  EXPECT_EQ(StripResourceUsage("no newline at the end"), "no newline at the end");
}

TEST(ResourceUsage, JsonRoundTripsAndRefusesMalformedItems) {
  for (const KernelResources& k : ParseResourceUsage(std::string(kTemplates) + kDeviceFunction)) {
    nlohmann::json j = k.ToJson();
    EXPECT_EQ(j.at("warps_per_sm_by_registers"), k.WarpsPerSmByRegisters());
    std::optional<KernelResources> back = KernelResources::FromJson(j);
    ASSERT_TRUE(back.has_value()) << j.dump();
    EXPECT_EQ(*back, k);
  }
  EXPECT_FALSE(KernelResources::FromJson(nlohmann::json::array()).has_value());
  nlohmann::json bad = ParseResourceUsage(kSpills)[0].ToJson();
  bad["registers"] = "many";
  EXPECT_FALSE(KernelResources::FromJson(bad).has_value());
}

// Outside text: a kernel can make ptxas print as many functions, and as long
// names, as it likes. The parse stays linear and bounded.
TEST(ResourceUsage, HostileReportsAreBounded) {
  std::string many;
  for (int i = 0; i < 5000; ++i) {
    many +=
        "ptxas info    : Compiling entry function '_Z1kv' for 'sm_90a'\n"
        "ptxas info    : Used 99999999999999999999 registers, 123456789012 bytes smem\n";
  }
  std::vector<KernelResources> k = ParseResourceUsage(many);
  EXPECT_EQ(k.size(), kMaxKernelResources);
  EXPECT_EQ(k[0].registers, 0);  // an absurd count is not a number of registers
  EXPECT_EQ(k[0].shared_bytes, 123456789012);
  const std::string nested = "_Z1f" + std::string(100000, 'I') + "E";
  std::vector<KernelResources> n = ParseResourceUsage("ptxas info    : Compiling entry function '" +
                                                      nested + "' for 'sm_90a'\n");
  ASSERT_EQ(n.size(), 1u);
  EXPECT_LE(n[0].name.size(), 520u);
  EXPECT_TRUE(ParseResourceUsage("ptxas info    : Compiling entry function 'unterminated").empty());
  EXPECT_TRUE(ParseResourceUsage("ptxas info    : Used 12 registers\n").empty());  // no entry
}

}  // namespace
}  // namespace kforge::eval
