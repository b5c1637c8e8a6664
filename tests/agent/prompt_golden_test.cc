// Golden files: everything a model reads in a session of each shipped strategy
// for a fixed problem (tests/agent/prompt_fixture.h), byte for byte. The first
// call (system and user message) is tests/agent/golden/<strategy>.txt; for a
// strategy of several turns, the second call, refining a kernel that did not
// compile (the recorded document golden/compile_error.eval.json), is
// <strategy>.turn2.txt. Any change to a template, the task card, the hardware
// card, the ABI header or the feedback composer shows up here as a diff to
// review; KFORGE_UPDATE_GOLDEN=1 rewrites the files (docs/agent.md).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "feedback.h"
#include "prompt_fixture.h"
#include "report/line_diff.h"
#include "session.h"

namespace kforge::agent {
namespace {

namespace fs = std::filesystem;
using testing::kRoot;

const fs::path kGolden = kRoot / "tests/agent/golden";

std::string ReadText(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream text;
  text << f.rdbuf();
  return text.str();
}

// One model call as the text of its messages, with the sampling parameters
// the strategy sends. Each message is followed by one newline of this
// rendering, so a blank line before a "=====" header means the message itself
// ends with a newline.
std::string RenderCall(const LlmCall& call) {
  std::string out = "===== parameters =====\n";
  if (call.temperature) out += fmt::format("temperature = {}\n", *call.temperature);
  if (call.max_output_tokens)
    out += fmt::format("max_output_tokens = {}\n", *call.max_output_tokens);
  if (call.reasoning_effort) out += fmt::format("reasoning_effort = {}\n", *call.reasoning_effort);
  if (!call.temperature && !call.max_output_tokens && !call.reasoning_effort)
    out += "(the provider's defaults)\n";
  out += "===== system =====\n" + call.system + "\n";
  for (const ChatTurn& m : call.messages) out += "===== " + m.role + " =====\n" + m.text + "\n";
  return out;
}

// Compares `text` with the golden file `name`, or rewrites it when
// KFORGE_UPDATE_GOLDEN=1.
void ExpectGolden(const std::string& name, const std::string& text) {
  const fs::path path = kGolden / name;
  const char* update = std::getenv("KFORGE_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << text;
    std::printf("rewrote %s\n", path.string().c_str());
    return;
  }
  ASSERT_TRUE(fs::exists(path)) << path << " is missing; KFORGE_UPDATE_GOLDEN=1 "
                                << "build/tests/agent/agent_prompt_test writes it";
  const std::string golden = ReadText(path);
  EXPECT_TRUE(golden == text)
      << path << " differs from what the model would see now (- golden, "
      << "+ now); if the change is meant, rerun with KFORGE_UPDATE_GOLDEN=1 "
      << "and review the diff of the golden file:\n"
      << results::UnifiedDiff(results::DiffLines(golden, text));
}

// A reply whose kernel is the demo's first, which does not compile.
std::string Reply(const std::string& kernel) {
  return "Plan: a barrier through the signal pad, then every rank sums all W inputs.\n\n```cuda\n" +
         kernel + "```\n";
}

TEST(PromptGolden, EveryStrategyMatchesItsGoldenFiles) {
  const std::string kernel = ReadText(kRoot / "examples/demo/kernels/allreduce_syntax.cu");
  const nlohmann::json doc = nlohmann::json::parse(ReadText(kGolden / "compile_error.eval.json"));
  for (const std::string& name : testing::ShippedStrategies()) {
    SCOPED_TRACE(name);
    const Strategy strategy = testing::GoldenStrategy(name);
    SessionSpec spec;
    spec.id = 1;
    spec.model = "golden:model";
    spec.task = testing::Allreduce().key;
    spec.world = testing::kWorld;
    spec.dtype = testing::kDtype;
    spec.strategy = &strategy;
    spec.prompt = testing::GoldenPrompt(strategy);
    Session session(spec);
    std::vector<int> first = session.InPhase(Phase::kWantReply);
    ASSERT_FALSE(first.empty());
    ExpectGolden(name + ".txt", RenderCall(session.BuildCall(first.front())));

    // Every candidate of the first round replies with the same kernel, which
    // fails to compile exactly as recorded.
    for (int c : first) {
      session.Start(c);
      session.OnReply(c, Reply(kernel), kernel, "", c + 1);
      session.Start(c);  // compiling
      FeedbackInput in;
      in.outcome = Outcome::kCompileError;
      in.eval = doc;
      in.source = kernel;
      in.kernel_name = "001_allreduce_turn0.cu";  // the name the document was recorded with
      in.turn = 1;
      in.turns = strategy.turns;
      in.link_peak_gbps = testing::HardwareCard().LinkPeakGbps();
      auto fb = ComposeFeedback(strategy, in);
      ASSERT_TRUE(fb.ok()) << fb.status().ToString();
      session.OnFinished(c, Outcome::kCompileError, 0, *fb, c + 1);
    }
    session.AdvanceRound();
    std::vector<int> second = session.InPhase(Phase::kWantReply);
    const fs::path turn2 = name + ".turn2.txt";
    if (strategy.turns == 1) {
      EXPECT_TRUE(second.empty());
      EXPECT_FALSE(fs::exists(kGolden / turn2)) << "a stale golden file: " << turn2;
      continue;
    }
    ASSERT_FALSE(second.empty());
    ExpectGolden(turn2.string(), RenderCall(session.BuildCall(second.front())));
  }
}

// `refine` with `profile = true`: the second call refines a correct but slow
// kernel (the demo's naive allreduce) whose evaluation carried a profile
// (golden/slow_profile.eval.json, hand-built with an H100's values), so the
// model reads the timings, what ptxas said and the profile's lines.
TEST(PromptGolden, AProfilingStrategysSecondCallShowsTheProfile) {
  const std::string kernel = ReadText(kRoot / "examples/demo/kernels/allreduce_naive.cu");
  const nlohmann::json doc = nlohmann::json::parse(ReadText(kGolden / "slow_profile.eval.json"));
  Strategy strategy = testing::GoldenStrategy("refine");
  strategy.profile = true;
  SessionSpec spec;
  spec.id = 1;
  spec.model = "golden:model";
  spec.task = testing::Allreduce().key;
  spec.world = testing::kWorld;
  spec.dtype = testing::kDtype;
  spec.strategy = &strategy;
  spec.prompt = testing::GoldenPrompt(strategy);
  Session session(spec);
  std::vector<int> first = session.InPhase(Phase::kWantReply);
  ASSERT_EQ(first.size(), 1u);
  const int c = first.front();
  session.Start(c);
  session.OnReply(c, Reply(kernel), kernel, "", 1);
  session.Start(c);  // compiling
  session.OnCompiled(c);
  session.Start(c);  // evaluating
  FeedbackInput in;
  in.outcome = Outcome::kSlow;
  in.eval = doc;
  in.source = kernel;
  in.kernel_name = "001_allreduce_turn0.cu";
  in.turn = 1;
  in.turns = strategy.turns;
  in.link_peak_gbps = testing::HardwareCard().LinkPeakGbps();
  auto fb = ComposeFeedback(strategy, in);
  ASSERT_TRUE(fb.ok()) << fb.status().ToString();
  ASSERT_NE(fb->find("Profile at 256MiB"), std::string::npos) << *fb;
  session.OnFinished(c, Outcome::kSlow, doc.value("speedup", 0.0), *fb, 1);
  session.AdvanceRound();
  std::vector<int> second = session.InPhase(Phase::kWantReply);
  ASSERT_EQ(second.size(), 1u);
  ExpectGolden("refine.profile.turn2.txt", RenderCall(session.BuildCall(second.front())));
}

}  // namespace
}  // namespace kforge::agent
