#include "kforge/agent/extract.h"

#include <gtest/gtest.h>

namespace kforge::agent {
namespace {

const char* kKernel =
    "int kf_setup(kf_ctx* c) { return 0; }\nint kf_run(kf_ctx* ctx) {\n  return 0;\n}\n";

TEST(Extract, TakesTheBlockThatDefinesKfRun) {
  std::string reply =
      std::string("Plan: one pass.\n\n```bash\nmake\n```\n\n```cuda\n") + kKernel + "```\nDone.";
  Extraction x = ExtractKernel(reply);
  ASSERT_TRUE(x.ok) << x.problem;
  EXPECT_EQ(x.source, kKernel);
  EXPECT_EQ(x.blocks_seen, 2);
}

TEST(Extract, AcceptsCppAndUnlabelledFencesAndTildes) {
  for (std::string fence : {"```cpp", "```c++", "```", "~~~cuda", "```CUDA"}) {
    std::string close = fence.substr(0, 3);
    Extraction x = ExtractKernel(fence + "\n" + kKernel + close + "\n");
    EXPECT_TRUE(x.ok) << fence;
  }
}

TEST(Extract, ACallIsNotADefinition) {
  Extraction x = ExtractKernel("```cuda\nvoid f(kf_ctx* c) { kf_run(c); }\n```\n");
  EXPECT_FALSE(x.ok);
  EXPECT_NE(x.problem.find("None of the 1 code block"), std::string::npos);
}

TEST(Extract, NoBlockAtAll) {
  Extraction x = ExtractKernel("I think you should use NCCL.");
  EXPECT_FALSE(x.ok);
  EXPECT_NE(x.problem.find("no fenced code block"), std::string::npos);
}

TEST(Extract, ConflictingBlocksAreRejected) {
  std::string other = std::string(kKernel) + "// v2\n";
  Extraction x =
      ExtractKernel(std::string("```cuda\n") + kKernel + "```\nor\n```cuda\n" + other + "```\n");
  EXPECT_FALSE(x.ok);
  EXPECT_NE(x.problem.find("2 different code blocks"), std::string::npos);
}

TEST(Extract, IdenticalRepeatsAreFine) {
  std::string block = std::string("```cuda\n") + kKernel + "```\n";
  Extraction x = ExtractKernel(block + "again:\n" + block);
  EXPECT_TRUE(x.ok);
}

TEST(Extract, CutOffBlockIsReportedAsSuch) {
  Extraction x = ExtractKernel(std::string("```cuda\n") + kKernel + "__global__ void k(");
  EXPECT_FALSE(x.ok);
  EXPECT_NE(x.problem.find("cut off"), std::string::npos);
}

TEST(Extract, IgnoresNonCodeLanguages) {
  Extraction x = ExtractKernel(std::string("```text\n") + kKernel + "```\n");
  EXPECT_FALSE(x.ok);
}

}  // namespace
}  // namespace kforge::agent
