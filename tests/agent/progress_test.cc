#include "kforge/agent/progress.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace kforge::agent {
namespace {

RunStats TwoModels() {
  RunStats s;
  s.elapsed_s = 600;
  s.models["fake:a"].sessions = 8;
  s.models["fake:a"].ended = 2;  // 300 s a session: 6 left, 30 minutes
  s.models["fake:b"].sessions = 4;
  s.models["fake:b"].ended = 0;
  s.models["fake:c"].sessions = 2;
  s.models["fake:c"].ended = 2;
  return s;
}

TEST(Progress, LiveLinesShowDoneOfTotalAndAnEtaPerModel) {
  const std::string text = RenderProgressLines(TwoModels());
  EXPECT_NE(text.find("fake:a"), std::string::npos);
  EXPECT_NE(text.find("2/8    done  ETA 30m"), std::string::npos) << text;
  EXPECT_NE(text.find("0/4    done  ETA ?"), std::string::npos) << text;
  EXPECT_NE(text.find("2/2    done  finished"), std::string::npos) << text;
}

TEST(Progress, DumbTerminalsAndPipesGetNoLiveView) {
  EXPECT_TRUE(WantsLiveView(true, "xterm-256color"));
  EXPECT_FALSE(WantsLiveView(true, "dumb"));
  EXPECT_FALSE(WantsLiveView(true, ""));
  EXPECT_FALSE(WantsLiveView(true, nullptr));
  EXPECT_FALSE(WantsLiveView(false, "xterm"));
}

// Not live: no cursor movement or erasing, whatever is drawn.
TEST(Progress, PlainViewWritesNoEscapeCodes) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  FakeClock clock;
  {
    ProgressView view(f, WantsLiveView(true, "dumb"), clock);
    view.Event("fake:a 001 turn 1: passed");
    view.Update(TwoModels(), true);
    view.Finish();
  }
  std::fflush(f);
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out += static_cast<char>(c);
  std::fclose(f);
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;

  // The live view does draw in place (so the check above can fail).
  std::FILE* g = std::tmpfile();
  ASSERT_NE(g, nullptr);
  {
    ProgressView live(g, true, clock);
    live.Update(TwoModels(), true);
    live.Update(TwoModels(), true);
  }
  std::fflush(g);
  std::rewind(g);
  std::string drawn;
  for (int c; (c = std::fgetc(g)) != EOF;) drawn += static_cast<char>(c);
  std::fclose(g);
  EXPECT_NE(drawn.find("\x1b[1A"), std::string::npos);
  EXPECT_NE(drawn.find("2/8"), std::string::npos) << drawn;
}

}  // namespace
}  // namespace kforge::agent
