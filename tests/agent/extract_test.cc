#include "extract.h"

#include <gtest/gtest.h>

#include <string>
#include <string_view>

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

// Replies of several megabytes built to defeat a backtracking matcher: each
// must be handled in one pass (std::regex overflowed the stack at ~60 KB).
std::string Repeat(std::string_view piece, size_t bytes) {
  std::string out;
  out.reserve(bytes + piece.size());
  while (out.size() < bytes) out.append(piece);
  return out;
}

constexpr size_t kMegabyte = 1 << 20;

TEST(ExtractAdversarial, MegabyteOfKfRunOpenings) {
  Extraction x = ExtractKernel("```cuda\n" + Repeat("kf_run(", 2 * kMegabyte) + "\n```\n");
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.blocks_seen, 1);
  EXPECT_NE(x.problem.find("None of the 1 code block"), std::string::npos) << x.problem;
}

TEST(ExtractAdversarial, DefinitionAfterAMegabyteOfOpenings) {
  std::string body = Repeat("kf_run(", kMegabyte) + ";\n" + kKernel;
  Extraction x = ExtractKernel("```cuda\n" + body + "```\n");
  ASSERT_TRUE(x.ok) << x.problem;
  EXPECT_EQ(x.source, body);
}

TEST(ExtractAdversarial, OpeningsThatShareOneClosingParenthesis) {
  // Every occurrence's parameter list ends at the same ')', which is followed
  // by a megabyte of white space and no '{'.
  std::string body = Repeat("kf_run( ", kMegabyte) + ")" + Repeat(" \n", kMegabyte) + "x\n";
  Extraction x = ExtractKernel("```cuda\n" + body + "```\n");
  EXPECT_FALSE(x.ok);
  EXPECT_NE(x.problem.find("None of the 1 code block"), std::string::npos) << x.problem;
}

TEST(ExtractAdversarial, WhiteSpaceBeforeTheBodyIsStillADefinition) {
  std::string body = "int kf_run" + Repeat(" \t", kMegabyte) + "(kf_ctx* c)" +
                     Repeat("\n", kMegabyte) + "{ return 0; }\n";
  Extraction x = ExtractKernel("```cuda\n" + body + "```\n");
  ASSERT_TRUE(x.ok) << x.problem;
  EXPECT_EQ(x.source, body);
}

TEST(ExtractAdversarial, DeeplyNestedBraces) {
  std::string body = std::string(kKernel) + "void f() " + Repeat("{", 2 * kMegabyte) +
                     Repeat("}", 2 * kMegabyte) + "\n";
  Extraction x = ExtractKernel("```cuda\n" + body + "```\n");
  ASSERT_TRUE(x.ok) << x.problem;
  EXPECT_EQ(x.source, body);
}

TEST(ExtractAdversarial, MegabyteOfUnterminatedFences) {
  // Only the first fence opens a block; the rest are its content (their
  // marker line is not a bare ```), and the block never closes.
  Extraction x = ExtractKernel(Repeat("```cuda\n", kMegabyte));
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.blocks_seen, 1);
  EXPECT_NE(x.problem.find("None of the 1 code block"), std::string::npos) << x.problem;
}

TEST(ExtractAdversarial, MegabyteOfEmptyFencedBlocks) {
  std::string reply = Repeat("```\n```\n", kMegabyte);
  Extraction x = ExtractKernel(reply);
  EXPECT_FALSE(x.ok);
  EXPECT_EQ(x.blocks_seen, static_cast<int>(reply.size() / 8));
}

TEST(ExtractAdversarial, CutOffAfterAMegabyteIsReportedAsSuch) {
  Extraction x = ExtractKernel(std::string("```cuda\n") + kKernel + Repeat("kf_run(", kMegabyte));
  EXPECT_FALSE(x.ok);
  EXPECT_NE(x.problem.find("cut off"), std::string::npos) << x.problem;
}

TEST(ExtractAdversarial, OnlyWholeWordsCount) {
  EXPECT_FALSE(ExtractKernel("```cuda\nint my_kf_run(int a) { return a; }\n```\n").ok);
  EXPECT_FALSE(ExtractKernel("```cuda\nint kf_runner(int a) { return a; }\n```\n").ok);
  EXPECT_FALSE(ExtractKernel("```cuda\nint kf_run(int a);\n```\n").ok);
  EXPECT_FALSE(ExtractKernel("```cuda\nint kf_run(int a) ;{\n```\n").ok);
  EXPECT_TRUE(ExtractKernel("```cuda\n(kf_run\v(int a)\f{}\n```\n").ok);
}

}  // namespace
}  // namespace kforge::agent
