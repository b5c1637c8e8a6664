// The exploit kernels that the compile step must refuse before any process runs
// them (tests/adversarial/kernels/static/): each is evaluated as a candidate for
// 001_allreduce, compile-only, through the real evaluator (nvcc jailed, the
// policy on the linked object), and must get the verdict its header states,
// `Expected: <status> ("<text>")`, with <text> among its reasons. No GPU needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "kforge/core/fs.h"
#include "kforge/evaluator/evaluate.h"
#include "kforge/evaluator/task.h"
#include "kforge/evaluator/task_select.h"
#include "kforge/testing/exploit_header.h"
#include "kforge/testing/test_util.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;
using testing::ExpectationOf;

TEST(AdversarialStatic, EveryKernelIsRefusedForItsOwnReason) {
  auto tasks = LoadTasks(TasksDir(""));
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  const Task* task = FindTask(*tasks, "001_allreduce");
  ASSERT_NE(task, nullptr);
  testing::TempDir cache("kforge-adversarial-cache");
  auto evaluator = MakeEvaluator(KFORGE_WORKER_PATH);
  std::vector<fs::path> kernels;
  for (const auto& e : fs::directory_iterator(KFORGE_STATIC_EXPLOITS)) {
    if (e.path().extension() == ".cu") kernels.push_back(e.path());
  }
  std::sort(kernels.begin(), kernels.end());
  ASSERT_GE(kernels.size(), 19u);
  for (const fs::path& k : kernels) {
    SCOPED_TRACE(k.filename().string());
    auto source = ReadFile(k);
    ASSERT_TRUE(source.ok());
    auto expected = ExpectationOf(*source, /*with_text=*/true);
    ASSERT_TRUE(expected.ok()) << expected.status().message();
    EvalOptions o;
    o.compile_only = true;
    o.cache_dir = cache.path();
    auto doc = evaluator->Evaluate(*task, *source, k.filename().string(), o);
    ASSERT_TRUE(doc.ok()) << doc.status().ToString();
    const std::string status = doc->value("status", ""), message = doc->value("message", "");
    EXPECT_EQ(status, expected->status) << message << "\n" << doc->dump(1).substr(0, 3000);
    // The reason is the message, or one of the policy's violations when there
    // are several (the message names the first).
    std::string reasons = message;
    if (doc->contains("policy")) reasons += (*doc)["policy"]["violations"].dump();
    EXPECT_NE(reasons.find(expected->text), std::string::npos)
        << "expected \"" << expected->text << "\" in: " << reasons;
    std::printf("%-34s %-18s %s\n", k.filename().c_str(), status.c_str(),
                message.substr(0, 110).c_str());
  }
}

// The header parser itself: a header without the expectation is an error, so
// a kernel cannot silently drop out of the check.
TEST(AdversarialStatic, HeaderWithoutAnExpectationIsAnError) {
  EXPECT_FALSE(ExpectationOf("// Exploit: nothing said\nint x;\n", true).ok());
  EXPECT_FALSE(ExpectationOf("// Expected: mismatch\nint x;\n", true).ok());
  EXPECT_FALSE(ExpectationOf("// Expected: mismatched (\"x\")\nint x;\n", true).ok());
  auto x =
      ExpectationOf("// Exploit: a.\n// Expected: policy_violation\n// (\"calls fork\").\n", true);
  ASSERT_TRUE(x.ok()) << x.status().message();
  EXPECT_EQ(x->status, "policy_violation");
  EXPECT_EQ(x->text, "calls fork");
}

// A breach exported by `kforge show --export-breach` says `Expected: FIXME`
// until its fixer states the verdict; the parser refuses it, whatever
// follows (CliTest.ExportBreach* checks the exported file itself).
TEST(AdversarialStatic, AnExportedBreachsFixmeIsAnError) {
  const std::string exported =
      "// Exploit: found by a red-team run.\n"
      "// Expected: FIXME (found as passed): the fixer replaces FIXME (\"x\").\n\nint x;\n";
  for (bool with_text : {true, false}) {
    auto x = ExpectationOf(exported, with_text);
    ASSERT_FALSE(x.ok());
    EXPECT_NE(x.status().message().find("still FIXME"), std::string::npos) << x.status().message();
  }
}

// Every exploit kernel, in both folders, states the verdict it must get: the
// GPU test names its files in a table, so an exported breach left
// `Expected: FIXME` there would otherwise go unnoticed on a CPU machine.
TEST(AdversarialKernels, EveryHeaderStatesTheVerdictItMustGet) {
  int kernels = 0;
  for (const char* dir : {KFORGE_ADVERSARIAL_KERNELS, KFORGE_STATIC_EXPLOITS}) {
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() != ".cu") continue;
      SCOPED_TRACE(e.path().string());
      auto source = ReadFile(e.path());
      ASSERT_TRUE(source.ok()) << source.status().ToString();
      const bool static_dir = std::string(dir) == KFORGE_STATIC_EXPLOITS;
      auto expected = ExpectationOf(*source, static_dir);
      EXPECT_TRUE(expected.ok()) << e.path().string() << ": " << expected.status().message();
      ++kernels;
    }
  }
  EXPECT_GE(kernels, 32);
}

}  // namespace
}  // namespace kforge::eval
