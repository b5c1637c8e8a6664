#include "kforge/evaluator/task_card.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "kforge/abi_limits.h"
#include "task_fixture.h"

namespace kforge::eval {
namespace {

using testing::LoadOrDie;
using testing::Replace;
using testing::SumToml;
using testing::TempDir;

bool Has(const std::string& card, const std::string& s) {
  return card.find(s) != std::string::npos;
}

TEST(TaskCard, ShowsWhatAModelNeeds) {
  TempDir tmp;
  std::string toml = Replace(SumToml(), "shape = [\"N\"]\n\n[tol",
                             "shape = [\"N / W\"]\nranks = \"root\"\n\n[tol");
  toml = Replace(toml, "[policy]\nnccl = false", "[policy]\nharness_collectives = true");
  toml = Replace(toml, R"({ label = "odd", N = "1001" })", R"({ label = "odd", N = "1000" })");
  Task t = LoadOrDie(tmp.path(), "001_sum", toml);
  const std::string card = RenderTaskCard(t, 4, Dtype::kBF16);
  EXPECT_TRUE(Has(card, "# Task 001_sum: Sum over ranks")) << card;
  EXPECT_TRUE(Has(card, "W = 4 ranks")) << card;
  EXPECT_TRUE(Has(card, "T = bf16 (2 bytes")) << card;
  EXPECT_TRUE(Has(card, "Every rank holds x[N]")) << card;
  EXPECT_TRUE(Has(card, "| input (read-only) | x | T = bf16 | [N] | normal(mean 0, std 1)"))
      << card;
  EXPECT_TRUE(Has(card, "| output | y | T = bf16 | [N / W] | checked only on rank root |")) << card;
  EXPECT_TRUE(Has(card, "`root` = 0")) << card;
  // Concrete shapes at W = 4: odd has N = 1000 (y = 250), 1MiB has N = 524288 (y = 131072).
  EXPECT_TRUE(Has(card, "| odd | N = 1000 | [1000] | [250] |\n")) << card;
  EXPECT_TRUE(Has(card, "| 1MiB | N = 524288 | [524288] | [131072] | 1 MiB |")) << card;
  EXPECT_TRUE(Has(card, "`y` (bf16): atol = 0.02, rtol = 0.02")) << card;
  EXPECT_TRUE(Has(card, "speedup = baseline median time / your median time")) << card;
  EXPECT_TRUE(Has(card, "bytes = `N * elem`")) << card;
  EXPECT_TRUE(Has(card, "busbw = algbw * `2 * (W - 1) / W`")) << card;
  EXPECT_TRUE(Has(
      card, "- Harness collectives (`kf_all_reduce`, `kf_all_gather`, ..., `kf_barrier`): allowed"))
      << card;
  EXPECT_TRUE(Has(card, "- NCCL: not allowed")) << card;
  EXPECT_TRUE(Has(card, "kforge/kernel.h")) << card;
  // docs/abi.md: kf_run is required, kf_setup and kf_teardown optional; the
  // version is the header's.
  EXPECT_TRUE(Has(card, fmt::format("(ABI version {}) that defines `kf_run` (required) and, if it "
                                    "needs them, `kf_setup` and `kf_teardown` (optional).",
                                    KF_ABI_VERSION)))
      << card;
  EXPECT_TRUE(Has(card, "0xFF")) << card;

  // The same task at another W and dtype shows other numbers.
  const std::string card8 = RenderTaskCard(t, 8, Dtype::kF32);
  EXPECT_TRUE(Has(card8, "| odd | N = 1000 | [1000] | [125] |\n")) << card8;
  EXPECT_TRUE(Has(card8, "`y` (f32): atol = 1e-05, rtol = 1e-05")) << card8;
}

TEST(TaskCard, ShowsSizesThatDoNotInstantiate) {
  TempDir tmp;
  std::string toml = Replace(SumToml(), "shape = [\"N\"]\n\n[tol", "shape = [\"N / W\"]\n\n[tol");
  Task t = LoadOrDie(tmp.path(), "001_sum", toml);
  const std::string card = RenderTaskCard(t, 8, Dtype::kF32);  // N = 1001 is not divisible by 8
  EXPECT_TRUE(Has(card, "| odd | (does not instantiate: ")) << card;
  EXPECT_TRUE(Has(card, "| tiny | N = 8 | [8] | [1] |\n")) << card;
}

}  // namespace
}  // namespace kforge::eval
