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
#include "kforge/testing/test_util.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;

struct Expectation {
  std::string status, text;
};

// The header comment's lines joined with spaces, then `Expected: STATUS ("TEXT")`.
Result<Expectation> ExpectationOf(const std::string& source) {
  std::string header;
  size_t at = 0;
  while (at < source.size() && source.compare(at, 2, "//") == 0) {
    size_t end = source.find('\n', at);
    if (end == std::string::npos) end = source.size();
    header += source.substr(at + 2, end - at - 2) + " ";
    at = end + 1;
  }
  const size_t e = header.find("Expected: ");
  if (e == std::string::npos)
    return Error(ErrorKind::kInvalidInput, "no `Expected: ` in the header");
  Expectation x;
  size_t s = e + 10;
  while (s < header.size() && header[s] == ' ') ++s;
  while (s < header.size() &&
         (std::isalpha(static_cast<unsigned char>(header[s])) || header[s] == '_'))
    x.status += header[s++];
  const size_t open = header.find("(\"", s), close = header.find("\")", open);
  if (x.status.empty() || open == std::string::npos || close == std::string::npos)
    return Error(ErrorKind::kInvalidInput, "the header needs `Expected: <status> (\"<text>\")`");
  x.text = header.substr(open + 2, close - open - 2);
  return x;
}

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
    auto expected = ExpectationOf(*source);
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
  EXPECT_FALSE(ExpectationOf("// Exploit: nothing said\nint x;\n").ok());
  EXPECT_FALSE(ExpectationOf("// Expected: mismatch\nint x;\n").ok());
  auto x = ExpectationOf("// Exploit: a.\n// Expected: policy_violation\n// (\"calls fork\").\n");
  ASSERT_TRUE(x.ok()) << x.status().message();
  EXPECT_EQ(x->status, "policy_violation");
  EXPECT_EQ(x->text, "calls fork");
}

}  // namespace
}  // namespace kforge::eval
