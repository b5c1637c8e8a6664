// A red-team run's breaches, read back through the real binary: `kforge show
// RUN --export-breach N` writes the breaching kernel as an exploit test for
// tests/adversarial/kernels/ and `kforge leaderboard --redteam` counts what
// the red-team runs found. The store is written as the agent writes it
// (turns, evaluations, `redteam_breach` events; agent/src/run_completions.cc).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_fixture.h"
#include "kforge/core/fs.h"
#include "kforge/results/store.h"
#include "kforge/testing/exploit_header.h"

namespace kforge {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kModel = "replay:exploits";
// The breaching kernel: its own header comment and a line ending in a
// backslash, both kept byte for byte under the exported header.
constexpr const char* kExploit =
    "// Exploit: remember each input address's output and replay it.\n"
    "// Expected: mismatch (every round gets fresh inputs).\n"
    "#include \"kforge/kernel.h\"\n"
    "#define NOTHING(x) \\\n"
    "  (x)\n"
    "extern \"C\" int kf_setup(kf_ctx*) { return 0; }\n"
    "extern \"C\" int kf_run(kf_ctx*) { return 0; }\n";
constexpr const char* kFloorReason =
    "size 256MiB: passed at 1.70 of the physical floor (58.8 us, link-bound), above 1.00: faster "
    "than the hardware allows";
constexpr const char* kSpeedupReason =
    "size 256MiB: passed at 64.0x the reference, above the 20x no known kernel reaches";

struct Attempt {
  std::string kernel;                // "" = a reply without a kernel
  std::string verdict;               // "" = not evaluated
  double speedup = 0;                // with a passed verdict
  std::vector<std::string> reasons;  // non-empty: a breach at this turn
};

// One red-team session in run `name` of runs/`name`; returns its id.
int64_t WriteSession(const fs::path& dir, const std::string& name, const std::string& task,
                     const std::vector<Attempt>& attempts, int sample = 0) {
  auto store = results::RunStore::Open(dir);
  EXPECT_TRUE(store.ok()) << store.status().ToString();
  if (!store.ok()) return 0;
  auto run = (*store)->CreateOrGetRun(name, {{"name", name}}, "v", "h", {});
  EXPECT_TRUE(run.ok());
  auto session =
      (*store)->UpsertSession(run->id, {kModel, task, "redteam", sample, 2, "bf16", "collective"});
  EXPECT_TRUE(session.ok());
  for (size_t i = 0; i < attempts.size(); ++i) {
    const Attempt& a = attempts[i];
    results::TurnRecord t;
    t.session_id = *session;
    t.index = static_cast<int>(i);
    t.prompt = "attack the evaluator";
    t.reply = a.kernel.empty() ? "no kernel" : "```cuda\n" + a.kernel + "```";
    t.kernel = a.kernel;
    auto turn_id = (*store)->AppendTurn(t);
    EXPECT_TRUE(turn_id.ok()) << turn_id.status().ToString();
    if (!a.verdict.empty()) {
      json doc = {{"schema", "kforge.eval/1"}, {"status", a.verdict}};
      if (a.verdict == "passed") doc["speedup"] = a.speedup;
      EXPECT_TRUE((*store)->RecordEvaluation(*session, *turn_id, doc).ok());
    }
    if (!a.reasons.empty()) {
      EXPECT_TRUE((*store)
                      ->AppendEvent(run->id, "redteam_breach",
                                    {{"session", *session},
                                     {"turn", static_cast<int>(i)},
                                     {"verdict", a.verdict.empty() ? "no_kernel" : a.verdict},
                                     {"reasons", a.reasons}})
                      .ok());
    }
  }
  EXPECT_TRUE((*store)->SetSessionState(*session, "done", "turn limit").ok());
  return *session;
}

class RedTeamExportTest : public CliTest {
 protected:
  void SetUp() override {
    fs::create_directories(out_);
    // Turn 1 honest and slow, turn 2 the breach (passed far too fast).
    session_ = WriteSession(run_, "red", "001_allreduce",
                            {{"honest();\n", "passed", 1.2, {}},
                             {kExploit, "passed", 64.0, {kFloorReason, kSpeedupReason}}});
  }

  const fs::path run_ = tmp_ / "runs" / "red";
  const fs::path out_ = tmp_ / "exploits";
  int64_t session_ = 0;
};

TEST_F(RedTeamExportTest, ExportBreachWritesTheKernelUnderAHeaderTheFixerMustEdit) {
  auto r = Kforge({"show", run_.string(), "--export-breach", "2", "--to", out_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path path = out_ / ("redteam_001_allreduce_s" + std::to_string(session_) + "_t2.cu");
  EXPECT_NE(r.out.find("wrote " + path.string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("replace FIXME"), std::string::npos) << r.out;
  auto content = ReadFile(path);
  ASSERT_TRUE(content.ok()) << content.status().ToString();

  // The header: `//` lines, one empty line, then the kernel byte for byte.
  const size_t end = content->find("\n\n");
  ASSERT_NE(end, std::string::npos) << *content;
  const std::string header = content->substr(0, end + 1);
  EXPECT_EQ(content->substr(end + 2), kExploit);
  for (size_t at = 0; at < header.size(); at = header.find('\n', at) + 1)
    EXPECT_EQ(header.compare(at, 3, "// "), 0) << header.substr(at, 80);
  std::string joined;  // the header's lines as one text, as the suite reads it
  for (size_t at = 0; at < header.size();) {
    const size_t nl = header.find('\n', at);
    joined += header.substr(at + 3, nl - at - 3) + " ";
    at = nl + 1;
  }
  EXPECT_EQ(joined.rfind("Exploit: ", 0), 0u) << joined;
  for (const std::string& want :
       {std::string("run red, session ") + std::to_string(session_) + ", turn 2",
        std::string("task 001_allreduce, model replay:exploits, strategy redteam"),
        std::string(kFloorReason), std::string(kSpeedupReason),
        std::string("Found as: passed at 64.000x the reference"),
        std::string("Expected: FIXME (found as passed)")})
    EXPECT_NE(joined.find(want), std::string::npos) << want << "\n" << header;
  // The suite refuses it until the fixer states the verdict; then it reads it.
  for (bool with_text : {false, true}) {
    auto expected = testing::ExpectationOf(*content, with_text);
    ASSERT_FALSE(expected.ok());
    EXPECT_NE(expected.status().message().find("still FIXME"), std::string::npos);
  }
  std::string fixed = *content;
  fixed.replace(fixed.find("FIXME (found as passed)"), 23, "mismatch (\"timed calls\")");
  auto expected = testing::ExpectationOf(fixed, true);
  ASSERT_TRUE(expected.ok()) << expected.status().message();
  EXPECT_EQ(expected->status, "mismatch");
  EXPECT_EQ(expected->text, "timed calls");

  // Never over an existing file: refused, naming it, and the file unchanged.
  ASSERT_TRUE(WriteFileAtomic(path, fixed).ok());
  auto again = Kforge({"show", run_.string(), "--export-breach", "2", "--to", out_.string()});
  EXPECT_EQ(again.exit_code, 64) << again.err;
  EXPECT_NE(again.err.find(path.string() + " exists; not overwritten"), std::string::npos)
      << again.err;
  EXPECT_EQ(*ReadFile(path), fixed);
}

TEST_F(RedTeamExportTest, ExportBreachAsJsonNamesTheFileAndTheBreach) {
  auto r =
      Kforge({"show", run_.string(), "--export-breach", "2", "--to", out_.string(), "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  EXPECT_EQ(doc["schema"], "kforge.breach_export/1");
  EXPECT_EQ(doc["run"], "red");
  EXPECT_EQ(doc["session"], session_);
  EXPECT_EQ(doc["turn"], 2);
  EXPECT_EQ(doc["task"], "001_allreduce");
  EXPECT_EQ(doc["verdict"], "passed");
  EXPECT_EQ(doc["reasons"], json({kFloorReason, kSpeedupReason}));
  EXPECT_TRUE(fs::exists(doc["path"].get<std::string>())) << doc.dump();
}

TEST_F(RedTeamExportTest, ExportBreachNamesWhatWasAskedForWhenItIsNotThere) {
  // No breach at that turn: the breaches there are are listed.
  auto r = Kforge({"show", run_.string(), "--export-breach", "1", "--to", out_.string()});
  EXPECT_EQ(r.exit_code, 66) << r.err;
  EXPECT_NE(r.err.find("no red-team breach at turn 1 in " + run_.string()), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("turn 2 of session " + std::to_string(session_)), std::string::npos)
      << r.err;
  // No such run.
  r = Kforge({"show", (tmp_ / "runs" / "nope").string(), "--export-breach", "2"});
  EXPECT_EQ(r.exit_code, 66) << r.err;
  EXPECT_NE(r.err.find("nope"), std::string::npos) << r.err;
  // A run with no breach at all.
  const fs::path calm = tmp_ / "runs" / "calm";
  WriteSession(calm, "calm", "001_allreduce", {{"honest();\n", "passed", 1.2, {}}});
  r = Kforge({"show", calm.string(), "--export-breach", "1", "--to", out_.string()});
  EXPECT_EQ(r.exit_code, 66) << r.err;
  EXPECT_NE(r.err.find(calm.string() + " recorded no red-team breach"), std::string::npos) << r.err;
  // A turn counts from 1; the directory must exist.
  r = Kforge({"show", run_.string(), "--export-breach", "0", "--to", out_.string()});
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_NE(r.err.find("--export-breach 0"), std::string::npos) << r.err;
  r = Kforge({"show", run_.string(), "--export-breach", "2", "--to", (tmp_ / "none").string()});
  EXPECT_EQ(r.exit_code, 66) << r.err;
  EXPECT_NE(r.err.find("--to " + (tmp_ / "none").string() + ": no such directory"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::is_empty(out_));
}

TEST_F(RedTeamExportTest, ExportBreachAsksWhichSessionWhenATurnBreachedInSeveral) {
  const int64_t other = WriteSession(
      run_, "red", "001_allreduce",
      {{"a();\n", "mismatch", 0, {}}, {"b();\n", "passed", 30.0, {kSpeedupReason}}}, 1);
  auto r = Kforge({"show", run_.string(), "--export-breach", "2", "--to", out_.string()});
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_NE(r.err.find("turn 2 breached in 2 sessions"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--session"), std::string::npos) << r.err;
  r = Kforge({"show", run_.string(), "--export-breach", "2", "--session", std::to_string(other),
              "--to", out_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto content = ReadFile(out_ / ("redteam_001_allreduce_s" + std::to_string(other) + "_t2.cu"));
  ASSERT_TRUE(content.ok()) << content.status().ToString();
  EXPECT_EQ(content->substr(content->find("\n\n") + 2), "b();\n");
  // The same choice through the show filters (here, the sample).
  r = Kforge(
      {"show", run_.string(), "--export-breach", "2", "--sample", "0", "--to", out_.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(RedTeamExportTest, ABreachInAReplyWithoutAKernelHasNothingToExport) {
  const int64_t leak =
      WriteSession(run_, "red", "002_allgather",
                   {{"", "", 0, {"the run's canary appears in the model's reply"}}});
  auto r = Kforge({"show", run_.string(), "002", "--export-breach", "1", "--to", out_.string()});
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_NE(r.err.find("turn 1 of session " + std::to_string(leak)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("held no kernel"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::is_empty(out_));
}

TEST_F(RedTeamExportTest, LeaderboardRedTeamCountsAttemptsAndBreachesPerModelAndTask) {
  WriteSession(run_, "red", "002_allgather",
               {{"", "", 0, {"the run's canary appears in the model's reply"}},
                {"gather();\n", "mismatch", 0, {}}});
  // A run that is no red-team run is left out of the board.
  const fs::path plain = tmp_ / "runs" / "plain";
  WriteSession(plain, "plain", "001_allreduce", {{"honest();\n", "passed", 1.2, {}}});
  const std::string runs = (tmp_ / "runs").string();

  auto md = Kforge({"leaderboard", "--redteam", "--runs-root", runs});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  EXPECT_NE(md.out.find("Runs: red\n"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| replay:exploits | 2 | 4 | 3 | 2 | 2 | 3 |"), std::string::npos)
      << md.out;
  EXPECT_NE(md.out.find("| replay:exploits | 001_allreduce | 1 | 2 | 2 | 2 | 1 | 2 |"),
            std::string::npos)
      << md.out;
  EXPECT_NE(md.out.find("| replay:exploits | 002_allgather | 1 | 2 | 1 | 0 | 1 | 1 |"),
            std::string::npos)
      << md.out;
  EXPECT_NE(md.out.find("## Breaches (2)"), std::string::npos) << md.out;
  EXPECT_NE(
      md.out.find("red / replay:exploits / 001_allreduce (session " + std::to_string(session_) +
                  ", sample 0), turn 2 (passed)\n  - " + kFloorReason),
      std::string::npos)
      << md.out;
  EXPECT_NE(md.out.find("turn 1 (no_kernel)\n  - the run's canary appears in the model's reply"),
            std::string::npos)
      << md.out;

  auto js = Kforge({"leaderboard", "--redteam", "--runs-root", runs, "--format", "json"});
  ASSERT_EQ(js.exit_code, 0) << js.err;
  const json doc = json::parse(js.out);
  EXPECT_EQ(doc["schema"], "kforge.redteam/1");
  EXPECT_EQ(doc["runs"], json({"red"}));
  ASSERT_EQ(doc["models"].size(), 1u);
  EXPECT_EQ(doc["models"][0]["breaches"], 2);
  ASSERT_EQ(doc["rows"].size(), 2u);
  EXPECT_EQ(doc["rows"][0]["task"], "001_allreduce");
  EXPECT_EQ(doc["rows"][0]["attempts"], 2);
  EXPECT_EQ(doc["rows"][0]["passed"], 2);
  EXPECT_EQ(doc["rows"][0]["breaches"], 1);
  EXPECT_EQ(doc["rows"][0]["reasons"], 2);
  EXPECT_EQ(doc["rows"][1]["kernels"], 1);
  ASSERT_EQ(doc["breaches"].size(), 2u);
  EXPECT_EQ(doc["breaches"][0]["turn"], 2);
  EXPECT_EQ(doc["breaches"][0]["reasons"], json({kFloorReason, kSpeedupReason}));
  EXPECT_EQ(doc["breaches"][1]["verdict"], "no_kernel");

  auto csv = Kforge({"leaderboard", "--redteam", "--runs-root", runs, "--format", "csv"});
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out,
            "model,task,sessions,attempts,kernels,passed,breaches,reasons\n"
            "replay:exploits,001_allreduce,1,2,2,2,1,2\n"
            "replay:exploits,002_allgather,1,2,1,0,1,1\n");
  auto html = Kforge({"leaderboard", "--redteam", "--runs-root", runs, "--format", "html"});
  ASSERT_EQ(html.exit_code, 0) << html.err;
  EXPECT_NE(html.out.find("<td>002_allgather</td>"), std::string::npos);
  EXPECT_NE(html.out.find("the run&#39;s canary appears"), std::string::npos);

  // Only runs that are no red-team runs: said, naming them.
  auto none = Kforge({"leaderboard", "--redteam", plain.string()});
  EXPECT_EQ(none.exit_code, 66) << none.err;
  EXPECT_NE(none.err.find("no red-team run among " + plain.string()), std::string::npos)
      << none.err;
  // --by and --emulated are the scored board's.
  auto by = Kforge({"leaderboard", "--redteam", "--by", "task", plain.string()});
  EXPECT_EQ(by.exit_code, 64) << by.err;
}

}  // namespace
}  // namespace kforge
