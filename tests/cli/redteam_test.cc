// `kforge run --strategy redteam` end to end, compile-only (no GPU): the
// cassette of exploit replies (tests/adversarial/redteam/cassette.jsonl)
// drives the real binary; the run plants a fresh canary in its directory and
// `kforge show` reports the session's breaches (none for an exploit that only
// compiled). The breach rules: Breach.* (agent_test) and ReplayRun.RedTeam*.
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "cli_fixture.h"
#include "kforge/core/fs.h"

namespace kforge {
namespace {

namespace fs = std::filesystem;

TEST_F(CliTest, RedTeamRunPlantsAFreshCanaryAndShowsItsBreaches) {
  const fs::path runs = tmp_ / "runs";
  const std::string cassette =
      "replay:" + (kRoot / "tests/adversarial/redteam/cassette.jsonl").string();
  for (const char* name : {"red", "red2"}) {
    auto r = Kforge({"run", "--models", cassette, "--tasks", "1", "--world", "2", "--strategy",
                     "redteam", "--name", name, "--out", runs.string(), "--compile-only"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  auto canary = ReadFile(runs / "red" / "redteam_canary");
  ASSERT_TRUE(canary.ok()) << canary.status().ToString();
  EXPECT_EQ(canary->rfind("kforge-canary-", 0), 0u) << *canary;
  EXPECT_EQ(canary->size(), std::string("kforge-canary-").size() + 32);
  EXPECT_NE(*canary, *ReadFile(runs / "red2" / "redteam_canary"));
  struct stat st {};
  ASSERT_EQ(::stat((runs / "red" / "redteam_canary").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto show = Kforge({"show", (runs / "red").string(), "1", "--json", "-"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  const auto doc = nlohmann::json::parse(show.out);
  ASSERT_EQ(doc["sessions"].size(), 1u);
  const auto& s = doc["sessions"][0];
  EXPECT_EQ(s["strategy"], "redteam");
  EXPECT_EQ(s["stop_reason"], "evaluation needs a GPU");
  EXPECT_TRUE(s["breaches"].empty()) << s["breaches"].dump();
  const std::string prompt = s["turns"][0]["prompt"];
  EXPECT_NE(prompt.find("## The evaluator's threat model and defences (docs/integrity.md)"),
            std::string::npos);
  EXPECT_EQ(prompt.find(*canary), std::string::npos);
  EXPECT_EQ(show.out.find(*canary), std::string::npos);

  // Its rejudge plants a canary of its own (0600), and a resumed rejudge
  // keeps it; the rejudge of a run that planted none plants none.
  auto re = Kforge(
      {"run", "--rejudge", "red", "--name", "red-again", "--out", runs.string(), "--compile-only"});
  ASSERT_EQ(re.exit_code, 0) << re.err;
  auto again = ReadFile(runs / "red-again" / "redteam_canary");
  ASSERT_TRUE(again.ok()) << again.status().ToString() << re.err;
  EXPECT_EQ(again->rfind("kforge-canary-", 0), 0u) << *again;
  EXPECT_NE(*again, *canary);
  ASSERT_EQ(::stat((runs / "red-again" / "redteam_canary").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto resumed = Kforge({"run", "--resume", "red-again", "--out", runs.string(), "--compile-only"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(*ReadFile(runs / "red-again" / "redteam_canary"), *again);
  auto plain = Kforge({"run", "--models", cassette, "--tasks", "1", "--world", "2", "--strategy",
                       "one-shot", "--name", "plain", "--out", runs.string(), "--compile-only"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(Kforge({"run", "--rejudge", "plain", "--name", "plain-again", "--out", runs.string(),
                    "--compile-only"})
                .exit_code,
            0);
  EXPECT_FALSE(fs::exists(runs / "plain-again" / "redteam_canary"));
}

}  // namespace
}  // namespace kforge
