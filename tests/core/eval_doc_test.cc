// The verdict and the one reader of a kforge.eval/1 document's summary.
#include "kforge/core/eval_doc.h"

#include <gtest/gtest.h>

#include <set>

namespace kforge {
namespace {

using nlohmann::json;

TEST(VerdictTest, EveryVerdictHasItsOwnNameAndParsesBack) {
  std::set<std::string_view> names;
  for (Verdict v : kAllVerdicts) {
    names.insert(VerdictName(v));
    ASSERT_TRUE(ParseVerdict(VerdictName(v))) << VerdictName(v);
    EXPECT_EQ(*ParseVerdict(VerdictName(v)), v);
  }
  EXPECT_EQ(names.size(), std::size(kAllVerdicts));
  // The names are the documented statuses (docs/eval-result.md).
  EXPECT_EQ(VerdictName(Verdict::kPassed), "passed");
  EXPECT_EQ(VerdictName(Verdict::kIntegrityViolation), "integrity_violation");
  EXPECT_EQ(VerdictName(Verdict::kTimeout), "timeout");
  EXPECT_FALSE(ParseVerdict("error"));
  EXPECT_FALSE(ParseVerdict("Passed"));
  EXPECT_FALSE(ParseVerdict(""));
}

TEST(VerdictTest, AnErrorKindMapsToTheKernelsVerdictOrToTheHarness) {
  EXPECT_EQ(VerdictFor(ErrorKind::kOk), Verdict::kPassed);
  EXPECT_EQ(VerdictFor(ErrorKind::kDeadlock), Verdict::kTimeout);
  EXPECT_EQ(VerdictFor(ErrorKind::kTimeout), Verdict::kTimeout);
  EXPECT_EQ(VerdictFor(ErrorKind::kMismatch), Verdict::kMismatch);
  EXPECT_EQ(VerdictFor(ErrorKind::kIntegrityViolation), Verdict::kIntegrityViolation);
  // Failures that are not the kernel's are never charged to it.
  for (ErrorKind k : {ErrorKind::kHarness, ErrorKind::kIo, ErrorKind::kInternal,
                      ErrorKind::kSlotLost, ErrorKind::kCancelled}) {
    EXPECT_EQ(VerdictFor(k), Verdict::kHarnessError) << ErrorKindName(k);
  }
}

TEST(VerdictTest, OnlyCompiledAndHarnessErrorsLeaveTheKernelUnjudged) {
  for (Verdict v : kAllVerdicts) {
    const bool unjudged = v == Verdict::kCompiled || v == Verdict::kHarnessError;
    EXPECT_EQ(JudgesTheKernel(v), !unjudged) << VerdictName(v);
  }
  // A kernel rejected for breaking the sandbox ran, and was judged.
  EXPECT_TRUE(CameFromAGpu(Verdict::kIntegrityViolation));
  EXPECT_FALSE(CameFromAGpu(Verdict::kCompileError));
  EXPECT_FALSE(CameFromAGpu(Verdict::kCompiled));
}

TEST(EvalSummaryTest, ReadsTheIndexedFields) {
  json doc = {
      {"schema", "kforge.eval/1"},
      {"status", "passed"},
      {"speedup", 1.5},
      {"expert_speedup", 0.75},
      {"emulated", true},
      {"world", 4},
      {"seconds", 2.5},
      {"message", "ok"},
      {"timing",
       {{{"bytes", 1 << 20}, {"busbw_gbps", 55.5}}, {{"bytes", 1024}, {"busbw_gbps", 9.0}}}}};
  auto s = ReadEvalSummary(doc);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->verdict, Verdict::kPassed);
  EXPECT_EQ(s->speedup, 1.5);
  EXPECT_EQ(s->expert_speedup, 0.75);
  EXPECT_EQ(s->busbw_gbps, 55.5) << "the largest bench size's";
  EXPECT_TRUE(s->emulated);
  EXPECT_EQ(s->world, 4);
  // A speedup on a failed document is not trusted.
  doc["status"] = "mismatch";
  s = ReadEvalSummary(doc);
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->speedup);
  EXPECT_FALSE(s->expert_speedup);
}

TEST(EvalSummaryTest, RefusesAStatusThatIsNoVerdictNamingTheField) {
  for (const char* text :
       {R"({"schema":"kforge.eval/1","status":"ok"})", R"({"schema":"kforge.eval/1"})",
        R"({"schema":"kforge.eval/2","status":"passed"})", R"([1])",
        R"({"status":"passed","speedup":0})",
        R"({"schema":"kforge.eval/1","status":"passed","speedup":1,"expert_speedup":-2})"}) {
    auto s = ParseEvalSummary(text);
    ASSERT_FALSE(s.ok()) << text;
    EXPECT_EQ(s.status().kind(), ErrorKind::kInvalidInput) << text;
  }
  auto s = ParseEvalSummary(R"({"schema":"kforge.eval/1","status":"ok"})");
  EXPECT_NE(s.status().message().find("field \"status\" is \"ok\""), std::string::npos)
      << s.status().message();
  EXPECT_FALSE(ParseEvalSummary("{not json").ok());
}

}  // namespace
}  // namespace kforge
