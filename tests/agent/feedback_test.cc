#include "feedback.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "extract.h"
#include "test_util.h"

namespace kforge::agent {
namespace {

using nlohmann::json;

const Strategy& Refine() {
  static Strategy s = *FindStrategy("refine", testing::PromptsDir());
  return s;
}

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_TRUE(f.good()) << path;
  return text.str();
}

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::string Compose(FeedbackInput in) {
  auto r = ComposeFeedback(Refine(), in);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : "";
}

TEST(Feedback, CompileErrorsQuoteTheSourceAndDeduplicate) {
  FeedbackInput in;
  in.outcome = Outcome::kCompileError;
  in.kernel_name = "k.cu";
  in.source = "line one\n  int x = y\nline three\n";
  in.turn = 1;
  in.turns = 4;
  json d1 = {{"file", "k.cu"},
             {"line", 2},
             {"column", 11},
             {"severity", "error"},
             {"message", "expected a ';'"}};
  json warn = {{"file", "k.cu"}, {"line", 1}, {"severity", "warning"}, {"message", "unused"}};
  in.eval = {{"status", "compile_error"}, {"compile", {{"diagnostics", {d1, d1, warn}}}}};
  std::string fb = Compose(in);
  EXPECT_NE(fb.find("line 2:11: expected a ';'"), std::string::npos) << fb;
  EXPECT_NE(fb.find("    int x = y"), std::string::npos) << fb;
  EXPECT_EQ(fb.find("unused"), std::string::npos);
  EXPECT_EQ(fb.find("expected a ';'"), fb.rfind("expected a ';'"));  // once
  EXPECT_NE(fb.find("Turn 1 of 4"), std::string::npos);
  EXPECT_NE(fb.find("send the complete corrected kernel"), std::string::npos);
}

// The compile error of the demo's first allreduce kernel, as `kforge eval` recorded
// it (real nvcc output): the source line with a caret under the column, and no
// blank lines left by the template's skipped sections.
TEST(Feedback, CompileErrorShowsTheLineWithACaretAndNoStrayBlankLines) {
  const std::filesystem::path root(KFORGE_SOURCE_ROOT);
  FeedbackInput in;
  in.outcome = Outcome::kCompileError;
  in.kernel_name = "001_allreduce_turn0.cu";
  in.source = ReadText(root / "examples/demo/kernels/allreduce_syntax.cu");
  in.eval = json::parse(ReadText(root / "tests/agent/golden/compile_error.eval.json"));
  in.turn = 1;
  in.turns = 4;
  EXPECT_EQ(Compose(in),
            "Turn 1 of 4: the kernel did not compile.\n"
            "\n"
            "- line 54:3: expected a \";\"\n"
            "      if (x->numel > 0) {\n"
            "      ^\n"
            "\n"
            "Fix the errors and send the complete corrected kernel in one ```cuda block.\n");
  in.turn = 4;  // the last turn asks for nothing
  EXPECT_EQ(Compose(in),
            "Turn 4 of 4: the kernel did not compile.\n"
            "\n"
            "- line 54:3: expected a \";\"\n"
            "      if (x->numel > 0) {\n"
            "      ^\n");
}

TEST(Feedback, CaretKeepsTabsAndUnknownColumnsShowNoCaret) {
  FeedbackInput in;
  in.outcome = Outcome::kCompileError;
  in.kernel_name = "k.cu";
  in.source = "\tint x = y\n";
  in.turns = 4;
  json col = {{"file", "k.cu"}, {"line", 1}, {"column", 10}, {"message", "m1"}};
  json nocol = {{"file", "k.cu"}, {"line", 1}, {"message", "m2"}};
  in.eval = {{"status", "compile_error"}, {"compile", {{"diagnostics", {col, nocol}}}}};
  std::string fb = Compose(in);
  EXPECT_NE(fb.find("- line 1:10: m1\n    \tint x = y\n    \t        ^\n"), std::string::npos)
      << fb;
  EXPECT_NE(fb.find("- line 1: m2\n    \tint x = y\n\nFix"), std::string::npos) << fb;
}

TEST(Feedback, CompileLogShownWhenNoDiagnosticParsed) {
  FeedbackInput in;
  in.outcome = Outcome::kCompileError;
  in.eval = {{"status", "compile_error"}, {"compile", {{"log", "ptxas fatal: something odd"}}}};
  EXPECT_NE(Compose(in).find("ptxas fatal: something odd"), std::string::npos);
}

TEST(Feedback, ManyErrorsAreCappedWithACount) {
  FeedbackInput in;
  in.outcome = Outcome::kCompileError;
  json diags = json::array();
  for (int i = 1; i <= 10; ++i)
    diags.push_back({{"line", i}, {"severity", "error"}, {"message", "e" + std::to_string(i)}});
  in.eval = {{"status", "compile_error"}, {"compile", {{"diagnostics", diags}}}};
  std::string fb = Compose(in);
  EXPECT_NE(fb.find("(4 more distinct error(s)"), std::string::npos) << fb;
  EXPECT_EQ(fb.find("e7"), std::string::npos);
}

TEST(Feedback, MismatchNamesRanksValuesAndHints) {
  FeedbackInput in;
  in.outcome = Outcome::kMismatch;
  json mm = {{"rank", 3},
             {"output", "y"},
             {"bad_count", 12},
             {"nan_count", 2},
             {"max_abs_err", 0.5},
             {"max_rel_err", 0.25},
             {"first_bad", {{{"index", {3, 7}}, {"got", 1.0}, {"expected", 1.5}}}},
             {"hints", {"off by a factor of W (4)"}}};
  in.eval = {
      {"status", "mismatch"},
      {"correctness",
       {{"trials", 5},
        {"passed_trials", 1},
        {"checks", {{{"size", "odd"}, {"trial", 1}, {"passed", false}, {"mismatches", {mm}}}}}}}};
  std::string fb = Compose(in);
  EXPECT_NE(fb.find("1 of 5 trials passed; wrong output on rank(s) 3"), std::string::npos) << fb;
  EXPECT_NE(fb.find("rank 3, output y: 12 wrong element(s), 2 NaN"), std::string::npos) << fb;
  EXPECT_NE(fb.find("at [3, 7]: got 1, expected 1.5"), std::string::npos) << fb;
  EXPECT_NE(fb.find("off by a factor of W (4)"), std::string::npos);
}

TEST(Feedback, RuntimeErrorAndHang) {
  FeedbackInput in;
  in.outcome = Outcome::kRuntimeError;
  in.eval = {
      {"status", "runtime_error"},
      {"error", {{"phase", "timing"}, {"rank", 2}, {"message", "CUDA error: misaligned address"}}}};
  std::string fb = Compose(in);
  EXPECT_NE(fb.find("phase: timing, rank 2"), std::string::npos) << fb;
  EXPECT_NE(fb.find("misaligned address"), std::string::npos);
  in.outcome = Outcome::kHang;
  in.eval = {{"status", "timeout"},
             {"timeout", {{"phase", "correctness"}, {"deadline_s", 60}, {"hung_ranks", {1, 3}}}}};
  fb = Compose(in);
  EXPECT_NE(fb.find("ranks that never finished: 1, 3"), std::string::npos) << fb;
  EXPECT_NE(fb.find("correctness (deadline 60 s)"), std::string::npos) << fb;
}

TEST(Feedback, TimingShowsSpeedupBusbwShareOfPeakAndSkew) {
  FeedbackInput in;
  in.outcome = Outcome::kSlow;
  in.link_peak_gbps = 450;
  in.eval = {{"status", "passed"},
             {"speedup", 0.8},
             {"timing",
              {{{"size", "1MiB"},
                {"baseline", {{"median_us", 30.0}}},
                {"candidate", {{"median_us", 37.5}, {"rank_median_us", {37.5, 30.0}}}},
                {"speedup", 0.8},
                {"busbw_gbps", 90.0},
                {"baseline_busbw_gbps", 112.5},
                {"roofline",
                 {{"floor_us", 9.0},
                  {"bound", "link"},
                  {"fraction", 0.24},
                  {"baseline_fraction", 0.3}}}}}}};
  std::string fb = Compose(in);
  EXPECT_NE(fb.find("| 1MiB | 30 | 37.5 | 0.8 | 90 | 112.5 | 20 |"), std::string::npos) << fb;
  EXPECT_NE(fb.find("- 1MiB: at 24% of its physical limit (floor 9 us, link-bound at the GPU's "
                    "peaks; the baseline: 30%)"),
            std::string::npos)
      << fb;
  EXPECT_NE(fb.find("ranks differ by 25%"), std::string::npos) << fb;
  EXPECT_NE(fb.find("speedup 0.8x"), std::string::npos);
}

// Where the task's expert kernel was timed, the model learns how far it is
// from the best human kernel, per size and over all; without one, nothing.
TEST(Feedback, FastAndSlowNameTheExpertBesideTheBaseline) {
  FeedbackInput in;
  in.outcome = Outcome::kFast;
  in.eval = {
      {"status", "passed"},
      {"speedup", 1.4},
      {"expert_speedup", 0.7},
      {"expert", {{"kernel", "solutions/auto.cu"}, {"technique", "vLLM one-shot all-reduce"}}},
      {"timing",
       {{{"size", "1MiB"},
         {"baseline", {{"median_us", 28.0}}},
         {"candidate", {{"median_us", 20.0}}},
         {"speedup", 1.4},
         {"expert", {{"median_us", 14.0}, {"speedup", 0.7}, {"over_baseline", 2.0}}}}}}};
  for (Outcome o : {Outcome::kFast, Outcome::kSlow}) {
    in.outcome = o;
    const std::string fb = Compose(in);
    EXPECT_NE(fb.find("Against the best known human kernel for this task (vLLM one-shot "
                      "all-reduce): yours runs at 0.7x its speed"),
              std::string::npos)
        << fb;
    EXPECT_NE(fb.find("- 1MiB: the expert kernel takes 14 us (2x the baseline); yours runs at "
                      "0.7x its speed"),
              std::string::npos)
        << fb;
  }
  in.eval.erase("expert_speedup");
  in.eval["timing"][0].erase("expert");
  const std::string plain = Compose(in);
  EXPECT_EQ(plain.find("expert"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("human"), std::string::npos) << plain;
}

// What ptxas said of each kernel (compile.resources) reaches the model when
// it is asked to go faster, capped at six functions.
TEST(Feedback, SlowAndFastShowWhatPtxasReportedOfEachKernel) {
  json resources = json::array();
  resources.push_back({{"name", "void ring<8>(bf16*, int)"},
                       {"summary",
                        "255 registers (at most 8 of 64 warps per SM); spills 96 B "
                        "stored, 96 B loaded"}});
  for (int i = 0; i < 9; ++i) {
    resources.push_back({{"name", "k" + std::to_string(i) + "()"}, {"summary", "12 registers"}});
  }
  resources.push_back("not an object");
  for (Outcome o : {Outcome::kSlow, Outcome::kFast}) {
    FeedbackInput in;
    in.outcome = o;
    in.turns = 3;
    in.eval = {{"status", "passed"}, {"speedup", 0.8}, {"compile", {{"resources", resources}}}};
    std::string fb = Compose(in);
    EXPECT_NE(fb.find("As compiled (ptxas"), std::string::npos) << fb;
    EXPECT_NE(fb.find("- void ring<8>(bf16*, int): 255 registers (at most 8 of 64 warps per SM); "
                      "spills 96 B stored, 96 B loaded"),
              std::string::npos)
        << fb;
    EXPECT_NE(fb.find("- k4(): 12 registers"), std::string::npos) << fb;
    EXPECT_EQ(fb.find("k5()"), std::string::npos) << fb;  // six lines at most
  }
  // No resources (an older document, or a failed compile): no section.
  FeedbackInput bare;
  bare.outcome = Outcome::kSlow;
  bare.eval = {{"status", "passed"}, {"speedup", 0.8}, {"compile", {{"resources", "odd"}}}};
  EXPECT_EQ(Compose(bare).find("As compiled"), std::string::npos);
}

TEST(Feedback, LastTurnDropsTheRequestForAnotherKernel) {
  FeedbackInput in;
  in.outcome = Outcome::kPolicyViolation;
  in.eval = {{"status", "policy_violation"}, {"policy", {{"violations", {"calls ncclSend"}}}}};
  in.turn = 4;
  in.turns = 4;
  std::string fb = Compose(in);
  EXPECT_NE(fb.find("- calls ncclSend"), std::string::npos);
  EXPECT_EQ(fb.find("Send the complete kernel"), std::string::npos) << fb;
}

// N41 of the 12-06 usability pass: the request for a kernel came twice (the
// extraction problem and the template each asked) and called kf_setup and
// kf_teardown required. Now the problem says what went wrong, the template
// asks once, and agrees with docs/abi.md.
TEST(Feedback, NoKernelAsksOnceAndCallsSetupAndTeardownOptional) {
  for (const char* reply : {"I would use a one-shot all-reduce.", "```python\nprint(1)\n```\n",
                            "```cuda\nint kf_run(kf_ctx* c) { return 0; }\n```\n```cuda\nint "
                            "kf_run(kf_ctx* c) { return 1; }\n```\n",
                            "```cuda\nint kf_run(kf_ctx* c) {"}) {
    SCOPED_TRACE(reply);
    Extraction x = ExtractKernel(reply);
    ASSERT_FALSE(x.ok);
    FeedbackInput in;
    in.outcome = Outcome::kNoKernel;
    in.extract_problem = x.problem;
    in.turn = 1;
    in.turns = 4;
    std::string fb = Compose(in);
    EXPECT_EQ(Count(fb, "Send"), 1u) << fb;
    EXPECT_EQ(Count(fb, "```cuda"), 1u) << fb;
    EXPECT_EQ(Count(fb, "kf_teardown"), 1u) << fb;
    EXPECT_NE(fb.find("that defines kf_run (kf_setup and kf_teardown are optional)."),
              std::string::npos)
        << fb;
  }
}

TEST(Feedback, ClassifiesDocuments) {
  EXPECT_EQ(ClassifyEvaluation({{"status", "passed"}, {"speedup", 1.2}}, false), Outcome::kFast);
  EXPECT_EQ(ClassifyEvaluation({{"status", "passed"}, {"speedup", 1.0}}, false), Outcome::kSlow);
  EXPECT_EQ(ClassifyEvaluation({{"status", "timeout"}}, false), Outcome::kHang);
  EXPECT_EQ(ClassifyEvaluation({{"status", "passed"}}, true), Outcome::kCompiled);
  EXPECT_EQ(ClassifyEvaluation({{"status", "compile_error"}}, true), Outcome::kCompileError);
  EXPECT_EQ(ClassifyEvaluation({{"status", "weird"}}, false), Outcome::kHarnessError);
}

}  // namespace
}  // namespace kforge::agent
