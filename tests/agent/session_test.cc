#include "session.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace kforge::agent {
namespace {

using testing::MakeStrategy;

SessionSpec Spec(const Strategy& s, bool compile_only = false) {
  SessionSpec spec;
  spec.id = 1;
  spec.model = "fake:m";
  spec.task = "001_allreduce";
  spec.world = 2;
  spec.strategy = &s;
  spec.prompt = {"SYSTEM", "FIRST PROMPT"};
  spec.compile_only = compile_only;
  return spec;
}

// Drives candidate `c` through reply -> finish with the given outcome.
void Finish(Session& s, int c, Outcome o, double speedup = 0) {
  s.Start(c);
  s.OnReply(c, "reply" + std::to_string(c), "kernel" + std::to_string(c), "", 100 + c);
  s.Start(c);
  s.OnCompiled(c);
  s.Start(c);
  s.OnFinished(c, o, speedup, "feedback" + std::to_string(c), 200 + c);
}

TEST(Session, RefineLastBuildsTheLineageConversation) {
  Strategy st = MakeStrategy("turns = 3\nrefine = \"last\"\n");
  Session s(Spec(st));
  ASSERT_EQ(s.InPhase(Phase::kWantReply), std::vector<int>{0});
  LlmCall first = s.BuildCall(0);
  EXPECT_EQ(first.system, "SYSTEM");
  ASSERT_EQ(first.messages.size(), 1u);
  EXPECT_EQ(first.messages[0].text, "FIRST PROMPT");
  Finish(s, 0, Outcome::kCompileError);
  EXPECT_TRUE(s.AdvanceRound());
  ASSERT_EQ(s.InPhase(Phase::kWantReply), std::vector<int>{1});
  EXPECT_EQ(s.candidate(1).parent, 0);
  EXPECT_EQ(s.candidate(1).prompt, "feedback0");
  Finish(s, 1, Outcome::kMismatch);
  s.AdvanceRound();
  LlmCall third = s.BuildCall(2);
  ASSERT_EQ(third.messages.size(), 5u);
  EXPECT_EQ(third.messages[1].role, "assistant");
  EXPECT_EQ(third.messages[1].text, "reply0");
  EXPECT_EQ(third.messages[2].text, "feedback0");
  EXPECT_EQ(third.messages[3].text, "reply1");
  EXPECT_EQ(third.messages[4].text, "feedback1");
  EXPECT_EQ(third.turn_index, 2);
  Finish(s, 2, Outcome::kSlow, 0.9);
  s.AdvanceRound();
  EXPECT_TRUE(s.Ended());
  EXPECT_STREQ(s.EndState(), "done");
  EXPECT_EQ(s.stop_reason(), "turn limit reached (3 round(s))");
  ASSERT_TRUE(s.BestCorrect());
  EXPECT_EQ(*s.BestCorrect(), 2);
}

TEST(Session, NoKernelFinishesWithoutEvaluation) {
  Strategy st = MakeStrategy("turns = 2\n");
  Session s(Spec(st));
  s.Start(0);
  s.OnReply(0, "prose only", "", "no block", 7);
  EXPECT_EQ(s.candidate(0).phase, Phase::kFinished);
  EXPECT_EQ(s.candidate(0).outcome, Outcome::kNoKernel);
  EXPECT_TRUE(s.InPhase(Phase::kWantCompile).empty());
}

TEST(Session, HistoryKeepsFirstPromptAndLastExchanges) {
  Strategy st = MakeStrategy("turns = 4\nhistory = 1\n");
  Session s(Spec(st));
  for (int c = 0; c < 3; ++c) {
    Finish(s, c, Outcome::kCompileError);
    s.AdvanceRound();
  }
  LlmCall call = s.BuildCall(3);
  ASSERT_EQ(call.messages.size(), 3u);
  EXPECT_EQ(call.messages[0].text, "FIRST PROMPT");
  EXPECT_EQ(call.messages[1].text, "reply2");
  EXPECT_EQ(call.messages[2].text, "feedback2");
}

TEST(Session, StopsAtTargetSpeedup) {
  Strategy st = MakeStrategy("turns = 5\n[stop]\nspeedup = 2.0\n");
  Session s(Spec(st));
  Finish(s, 0, Outcome::kFast, 1.5);
  s.AdvanceRound();
  EXPECT_FALSE(s.stop_requested());
  Finish(s, 1, Outcome::kFast, 2.5);
  s.AdvanceRound();
  EXPECT_TRUE(s.Ended());
  EXPECT_NE(s.stop_reason().find("target speedup"), std::string::npos);
  EXPECT_STREQ(s.EndState(), "done");
}

TEST(Session, StopsOnFirstCorrectWhenAsked) {
  Strategy st = MakeStrategy("turns = 5\n[stop]\non_correct = true\n");
  Session s(Spec(st));
  Finish(s, 0, Outcome::kRuntimeError);
  s.AdvanceRound();
  EXPECT_FALSE(s.stop_requested());
  Finish(s, 1, Outcome::kSlow, 0.7);
  s.AdvanceRound();
  EXPECT_EQ(s.stop_reason(), "correct kernel found");
}

TEST(Session, PatienceEndsAStalledSearch) {
  Strategy st = MakeStrategy("turns = 10\n[stop]\npatience = 2\n");
  Session s(Spec(st));
  Finish(s, 0, Outcome::kMismatch);
  s.AdvanceRound();
  Finish(s, 1, Outcome::kCompileError);  // worse
  s.AdvanceRound();
  EXPECT_FALSE(s.stop_requested());
  Finish(s, 2, Outcome::kMismatch);  // equal, not better
  s.AdvanceRound();
  EXPECT_EQ(s.stop_reason(), "no improvement in 2 round(s)");
}

TEST(Session, CompileOnlyStopsOnceAKernelCompiles) {
  Strategy st = MakeStrategy("turns = 4\n");
  Session s(Spec(st, true));
  Finish(s, 0, Outcome::kCompileError);
  s.AdvanceRound();
  EXPECT_FALSE(s.stop_requested());
  Finish(s, 1, Outcome::kCompiled);
  s.AdvanceRound();
  EXPECT_EQ(s.stop_reason(), "evaluation needs a GPU");
  EXPECT_STREQ(s.EndState(), "stopped");
}

TEST(Session, RoundWaitsForAllSamples) {
  Strategy st = MakeStrategy("turns = 2\nsamples = 3\n");
  Session s(Spec(st));
  EXPECT_EQ(s.InPhase(Phase::kWantReply).size(), 3u);
  Finish(s, 0, Outcome::kMismatch);
  Finish(s, 2, Outcome::kMismatch);
  EXPECT_FALSE(s.AdvanceRound());
  Finish(s, 1, Outcome::kMismatch);
  EXPECT_TRUE(s.AdvanceRound());
  EXPECT_EQ(s.InPhase(Phase::kWantReply), (std::vector<int>{3, 4, 5}));
  // refine = last: lineage j continues from candidate j.
  EXPECT_EQ(s.candidate(3).parent, 0);
  EXPECT_EQ(s.candidate(5).parent, 2);
}

TEST(Session, BestRefinesTheBestSoFar) {
  Strategy st = MakeStrategy("turns = 3\nsamples = 2\nrefine = \"best\"\n");
  Session s(Spec(st));
  Finish(s, 0, Outcome::kSlow, 0.9);
  Finish(s, 1, Outcome::kCompileError);
  s.AdvanceRound();
  EXPECT_EQ(s.candidate(2).parent, 0);
  EXPECT_EQ(s.candidate(3).parent, 0);
}

TEST(Session, BeamSpreadsOverTheTopCandidates) {
  Strategy st = MakeStrategy("turns = 3\nsamples = 4\nrefine = \"beam\"\nbeam = 2\n");
  Session s(Spec(st));
  Finish(s, 0, Outcome::kCompileError);
  Finish(s, 1, Outcome::kFast, 1.2);
  Finish(s, 2, Outcome::kMismatch);
  Finish(s, 3, Outcome::kFast, 1.8);
  s.AdvanceRound();
  EXPECT_EQ(s.candidate(4).parent, 3);
  EXPECT_EQ(s.candidate(5).parent, 1);
  EXPECT_EQ(s.candidate(6).parent, 3);
  EXPECT_EQ(s.candidate(7).parent, 1);
}

TEST(Session, StopWaitsForInFlightWork) {
  Strategy st = MakeStrategy("turns = 3\nsamples = 2\n");
  Session s(Spec(st));
  s.Start(0);
  s.RequestStop("budget: run spent $1 of $1");
  EXPECT_TRUE(s.InPhase(Phase::kWantReply).empty());  // sample 1 never starts
  EXPECT_FALSE(s.Ended());
  s.OnReply(0, "r", "k", "", 1);
  EXPECT_TRUE(s.InPhase(Phase::kWantCompile).empty());
  EXPECT_TRUE(s.Ended());
  EXPECT_STREQ(s.EndState(), "stopped");
}

}  // namespace
}  // namespace kforge::agent
