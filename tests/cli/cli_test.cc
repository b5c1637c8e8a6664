// The kforge CLI end to end: every mistake gets a clear message and an exit
// status from the one table (apps/kforge/exit_codes.h, docs/cli.md).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "../providers/test_server.h"
#include "cli_fixture.h"
#include "kforge/core/fs.h"
#include "kforge/core/subprocess.h"
#include "kforge/results/fixture.h"
#include "kforge/results/store.h"
#include "kforge/testing/test_util.h"

namespace kforge {
namespace {

namespace fs = std::filesystem;

TEST_F(CliTest, UsageErrorsExit64NotCli11Codes) {
  EXPECT_EQ(Kforge({}).exit_code, 64);
  auto typo = Kforge({"run", "--modles", Cassette(), "--tasks", "1"});
  EXPECT_EQ(typo.exit_code, 64);
  EXPECT_NE(typo.err.find("--modles"), std::string::npos) << typo.err;
  EXPECT_EQ(typo.err.find("run_file"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("did you mean --models?"), std::string::npos) << typo.err;
  auto help = Kforge({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Exit status"), std::string::npos) << help.out;
}

// Durations, dollars and tokens: a bad value is named plainly, without the
// range CLI11 would spell out to 1.8e308.
TEST_F(CliTest, NegativeOrNonNumericAmountsAreRefusedPlainly) {
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--evaluator-liveness", "-3"}, {"--budget-usd", "abc"}, {"--baseline-reuse", "inf"}}) {
    auto r = Kforge({"run", "--models", Cassette(), "--tasks", "1", flag, value, "--name", "amt",
                     "--out", tmp_.string()});
    EXPECT_EQ(r.exit_code, 64) << r.err;
    EXPECT_NE(r.err.find(flag + ": expected a number >= 0, not '" + value + "'"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("1797693"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(tmp_ / "amt"));
}

TEST_F(CliTest, RunRefusesUnusableModelsBeforeCreatingAStore) {
  auto r = Kforge({"run", "--models", "bogus:foo", "--tasks", "1", "--name", "badprov", "--out",
                   tmp_.string()});
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(tmp_ / "badprov"));
  auto missing = Kforge({"run", "--models", "replay:" + (tmp_ / "nope.jsonl").string(), "--tasks",
                         "1", "--name", "nocassette", "--out", tmp_.string()});
  EXPECT_EQ(missing.exit_code, 64) << missing.err;
  EXPECT_FALSE(fs::exists(tmp_ / "nocassette"));
}

TEST_F(CliTest, WorldAndDtypeTheTaskDoesNotDeclareAreRefusedEverywhere) {
  auto run = Kforge({"run", "--models", Cassette(), "--tasks", "001", "--world", "3", "--name",
                     "w3", "--out", tmp_.string()});
  EXPECT_EQ(run.exit_code, 64) << run.err;
  EXPECT_NE(run.err.find("supports W in {2, 4, 8}, not 3"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(tmp_ / "w3"));
  auto prompt = Kforge({"prompt", "--task", "1", "--dtype", "f16", "--hardware", "h100_8"});
  EXPECT_EQ(prompt.exit_code, 64) << prompt.err;
  EXPECT_NE(prompt.err.find("not f16"), std::string::npos) << prompt.err;
  const std::string kernel = (kRoot / "tasks/001_allreduce/solutions/oneshot.cu").string();
  auto eval = Kforge({"eval", "--task", "allreduce", "--kernel", kernel, "--world", "3"});
  EXPECT_EQ(eval.exit_code, 64) << eval.err;
  // --tasks 001 and --task 001 mean the same task.
  auto p = Kforge({"prompt", "--task", "001", "--hardware", "h100_8"});
  EXPECT_EQ(p.exit_code, 0) << p.err;
}

TEST_F(CliTest, ReusingARunNameIsRefusedSayingWhatDiffers) {
  {
    auto store = results::RunStore::Open(tmp_ / "same");
    ASSERT_TRUE(store.ok());
    nlohmann::json config = {{"name", "same"},       {"models", {Cassette()}}, {"tasks", {"1"}},
                             {"strategy", "refine"}, {"repeats", 1},           {"world", 2},
                             {"dtype", ""},          {"out", tmp_.string()}};
    ASSERT_TRUE((*store)->CreateOrGetRun("same", config, "v", "", {}).ok());
  }
  auto r = Kforge({"run", "--models", Cassette(), "--tasks", "2", "--strategy", "one-shot",
                   "--name", "same", "--out", tmp_.string()});
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_NE(r.err.find("run 'same' already exists"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("strategy: \"refine\" -> \"one-shot\""), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--resume same"), std::string::npos) << r.err;
}

TEST_F(CliTest, CompareValidatesEveryOption) {
  for (const char* name : {"a", "b"}) {
    results::FixtureSpec spec;
    spec.run_name = name;
    spec.tasks = 2;
    ASSERT_TRUE(results::WriteFixtureRun(tmp_ / name, spec).ok());
  }
  const std::string a = (tmp_ / "a").string(), b = (tmp_ / "b").string();
  EXPECT_EQ(Kforge({"compare", a, b}).exit_code, 0);
  auto conf = Kforge({"compare", a, b, "--confidence", "5"});
  EXPECT_EQ(conf.exit_code, 64);
  EXPECT_NE(conf.err.find("--confidence 5"), std::string::npos) << conf.err;
  EXPECT_EQ(conf.out.find("500%"), std::string::npos) << conf.out;
  EXPECT_EQ(Kforge({"compare", a, b, "--resamples", "0"}).exit_code, 64);
  EXPECT_EQ(Kforge({"compare", a, b, "--format", "xml"}).exit_code, 64);
  EXPECT_EQ(Kforge({"serve", a, "--port", "99999"}).exit_code, 64);
  // show's TASK takes the same selectors as every other command.
  auto show = Kforge({"show", a, "1"});
  EXPECT_EQ(show.exit_code, 0) << show.err;
  EXPECT_EQ(Kforge({"show", a, "nosuchtask"}).exit_code, 66);
}

// Without a GPU, eval falls back to compile-only: that is not a pass.
TEST_F(CliTest, EvalWithoutAGpuIsNotEvaluatedAndExitsEight) {
  const std::string kernel = (kRoot / "tasks/001_allreduce/solutions/oneshot.cu").string();
  auto r = Kforge({"eval", "--task", "1", "--kernel", kernel, "--world", "2"},
                  {{"CUDA_VISIBLE_DEVICES", ""}});
  EXPECT_EQ(r.exit_code, 8) << r.out << r.err;
  EXPECT_NE(r.out.find("NOT EVALUATED"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("world 0"), std::string::npos) << r.out;
  // Asked for explicitly, compile-only succeeds.
  auto asked = Kforge({"eval", "--task", "1", "--kernel", kernel, "--compile-only"});
  EXPECT_EQ(asked.exit_code, 0) << asked.out << asked.err;
}

// The eval report names the world asked for ("-" when none: nothing was
// placed), and `--json -` is the document alone on stdout, never a file "-".
TEST_F(CliTest, EvalShowsTheAskedWorldAndWritesJsonDashToStdout) {
  const std::string kernel = (kRoot / "tasks/001_allreduce/solutions/oneshot.cu").string();
  auto asked =
      Kforge({"eval", "--task", "1", "--kernel", kernel, "--compile-only", "--world", "4"});
  ASSERT_EQ(asked.exit_code, 0) << asked.out << asked.err;
  EXPECT_NE(asked.out.find("world 4"), std::string::npos) << asked.out;
  auto any = Kforge({"eval", "--task", "1", "--kernel", kernel, "--compile-only"});
  ASSERT_EQ(any.exit_code, 0) << any.out << any.err;
  EXPECT_NE(any.out.find("world -"), std::string::npos) << any.out;
  EXPECT_EQ(any.out.find("world 0"), std::string::npos) << any.out;

  auto json = Kforge({"eval", "--task", "1", "--kernel", kernel, "--compile-only", "--json", "-"});
  const bool stray = fs::exists(kRoot / "-");
  if (stray) fs::remove(kRoot / "-");
  ASSERT_EQ(json.exit_code, 0) << json.out << json.err;
  EXPECT_FALSE(stray) << "--json - wrote a file named '-'";
  const nlohmann::json doc = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_TRUE(doc.is_object()) << json.out;
  EXPECT_EQ(doc["status"], "compiled");
  EXPECT_EQ(json.out.find("task      "), std::string::npos) << "the report went to stdout too";
}

// Published outputs get the mode any new file gets under the umask (a web
// server must read an HTML leaderboard); the store stays as it was.
TEST_F(CliTest, OutputFilesFollowTheUmask) {
  results::FixtureSpec spec;
  spec.run_name = "fx";
  spec.tasks = 2;
  ASSERT_TRUE(results::WriteFixtureRun(tmp_ / "fx", spec).ok());
  const std::string kernel = (kRoot / "tasks/001_allreduce/solutions/oneshot.cu").string();
  for (const mode_t mask : {mode_t{022}, mode_t{027}}) {
    const mode_t old = umask(mask);  // the children inherit it
    const std::string tag = std::to_string(mask);
    const fs::path html = tmp_ / ("lb" + tag + ".html"), jsonl = tmp_ / ("x" + tag + ".jsonl"),
                   eval = tmp_ / ("e" + tag + ".json");
    auto lb =
        Kforge({"leaderboard", (tmp_ / "fx").string(), "--format", "html", "-o", html.string()});
    auto ex = Kforge({"results", "export", (tmp_ / "fx").string(), "-o", jsonl.string()});
    auto ev = Kforge(
        {"eval", "--task", "1", "--kernel", kernel, "--compile-only", "--json", eval.string()});
    umask(old);
    ASSERT_EQ(lb.exit_code, 0) << lb.err;
    ASSERT_EQ(ex.exit_code, 0) << ex.err;
    ASSERT_EQ(ev.exit_code, 0) << ev.err;
    const auto want = static_cast<fs::perms>(0666 & ~mask);
    for (const fs::path& p : {html, jsonl, eval}) {
      EXPECT_EQ(fs::status(p).permissions(), want) << p << " under umask 0" << std::oct << mask;
    }
  }
}

// A run stopped by its deadline continues when a resume moves the deadline;
// what a resume cannot change is refused, naming the flags.
TEST_F(CliTest, AResumeExtendsTheDeadlineAndRefusesWhatItCannotChange) {
  const std::string out = (tmp_ / "runs").string();
  auto turns = [&]() {
    int n = 0;
    auto store = results::RunStore::Open(tmp_ / "runs" / "dl", true);
    EXPECT_TRUE(store.ok());
    if (!store.ok()) return -1;
    auto runs = (*store)->ListRuns();
    if (!runs.ok() || runs->empty()) return -1;
    auto sessions = (*store)->ListSessions(runs->front().id);
    if (!sessions.ok()) return -1;
    for (const auto& s : *sessions) n += s.turns_done;
    return n;
  };
  auto first = Kforge({"run", "--models", Cassette(), "--tasks", "1", "--name", "dl", "--out", out,
                       "--compile-only", "--deadline", "2020-01-01T00:00"});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(turns(), 0) << "the deadline had passed";
  // Said, not silent: a deadline already past stops the run before its first call.
  EXPECT_NE(first.err.find("the deadline is already past"), std::string::npos) << first.err;
  EXPECT_NE(first.err.find("kforge run --resume dl --deadline"), std::string::npos) << first.err;

  auto refused = Kforge({"run", "--resume", "dl", "--out", out, "--tasks", "2", "--turns", "9"});
  EXPECT_EQ(refused.exit_code, 64) << refused.err;
  EXPECT_NE(refused.err.find("--tasks, --turns would change what it asks"), std::string::npos)
      << refused.err;

  auto resumed =
      Kforge({"run", "--resume", "dl", "--out", out, "--compile-only", "--deadline", "+1h"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_NE(resumed.err.find("resuming 'dl' with deadline 2020-01-01T00:00 -> "), std::string::npos)
      << resumed.err;
  EXPECT_GT(turns(), 0) << resumed.err;
  auto stored = results::RunStore::Open(tmp_ / "runs" / "dl", true);
  ASSERT_TRUE(stored.ok());
  auto runs = (*stored)->ListRuns();
  ASSERT_TRUE(runs.ok() && !runs->empty());
  const double deadline = runs->front().config.value("deadline_unix", 0.0);
  EXPECT_GT(deadline, static_cast<double>(std::time(nullptr))) << "the new deadline is stored";
}

std::vector<std::string> EntriesOf(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// The reference is compiled by its own compiler into a cache of its own:
// nothing built from a candidate's source can be loaded as the baseline, even
// when the candidate is the reference's text byte for byte.
TEST_F(CliTest, ReferencesAreCompiledIntoTheirOwnCache) {
  const fs::path cache = tmp_ / "cache" / "kforge";
  const std::string solution = (kRoot / "tasks/001_allreduce/solutions/oneshot.cu").string();
  auto r = Kforge({"eval", "--task", "1", "--kernel", solution, "--compile-only"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto candidates = EntriesOf(cache / "kernels");
  const auto references = EntriesOf(cache / "trusted" / "kernels");
  ASSERT_EQ(candidates.size(), 1u);
  ASSERT_EQ(references.size(), 1u);
  EXPECT_NE(candidates[0], references[0]);
  // The reference evaluated as a candidate lands in the candidates' cache; the
  // trusted cache is only read, a hit.
  const std::string reference = (kRoot / "tasks/001_allreduce/reference.cu").string();
  auto again =
      Kforge({"eval", "--task", "1", "--kernel", reference, "--trusted", "--compile-only"});
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_EQ(EntriesOf(cache / "kernels").size(), 2u);
  EXPECT_EQ(EntriesOf(cache / "trusted" / "kernels"), references);
  auto du = Kforge({"cache", "du"});
  EXPECT_NE(du.out.find("trusted/kernels"), std::string::npos) << du.out;
  auto clean = Kforge({"cache", "clean"});
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  EXPECT_FALSE(fs::exists(cache / "kernels"));
  EXPECT_FALSE(fs::exists(cache / "trusted"));
}

nlohmann::json ParseJson(const std::string& text) {
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

// The table's columns line up whatever the longest key, dtypes or source:
// every row's title starts where the header's TITLE does. PKB's problems cite
// their number; the tasks beyond PKB (ids from 101) their codebase, and every
// one of those names its expert kernel or "none".
TEST_F(CliTest, TasksListColumnsLineUp) {
  auto r = Kforge({"tasks", "list"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines;
  for (size_t at = 0, nl; at < r.out.size(); at = nl + 1) {
    nl = r.out.find('\n', at);
    if (nl == std::string::npos) nl = r.out.size();
    lines.push_back(r.out.substr(at, nl - at));
  }
  ASSERT_GT(lines.size(), 40u);
  const size_t title = lines[0].find("TITLE");
  const size_t source = lines[0].find("SOURCE");
  const size_t expert = lines[0].find("EXPERT");
  ASSERT_NE(title, std::string::npos);
  ASSERT_NE(expert, std::string::npos);
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    ASSERT_GT(lines[i].size(), title) << lines[i];
    EXPECT_EQ(lines[i][title - 1], ' ') << lines[i];
    EXPECT_NE(lines[i][title], ' ') << lines[i];
    const bool beyond = std::stoi(lines[i].substr(0, 3)) >= 101;
    EXPECT_EQ(lines[i].compare(source, 5, "PKB #") == 0, !beyond) << lines[i];
    if (beyond) {
      EXPECT_NE(lines[i].compare(expert, 2, "- "), 0) << lines[i];
    }
  }
}

// --json -: the document alone on stdout; --json FILE: the table as before and
// the document in the file.
TEST_F(CliTest, TasksListJson) {
  auto r = Kforge({"tasks", "list", "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = ParseJson(r.out);
  ASSERT_TRUE(doc.is_object()) << r.out;
  EXPECT_EQ(doc["schema"], "kforge.tasks/1");
  ASSERT_TRUE(doc["tasks"].is_array());
  const nlohmann::json* allreduce = nullptr;
  for (const auto& t : doc["tasks"]) {
    if (t["key"] == "001_allreduce") allreduce = &t;
  }
  ASSERT_NE(allreduce, nullptr) << r.out;
  EXPECT_EQ((*allreduce)["id"], 1);
  EXPECT_EQ((*allreduce)["name"], "allreduce");
  EXPECT_EQ((*allreduce)["world_sizes"], nlohmann::json::array({2, 4, 8}));
  EXPECT_TRUE((*allreduce)["dtypes"].is_array());

  const fs::path file = tmp_ / "tasks.json";
  auto both = Kforge({"tasks", "list", "--json", file.string()});
  ASSERT_EQ(both.exit_code, 0) << both.err;
  EXPECT_NE(both.out.find("KEY"), std::string::npos) << both.out;
  auto text = ReadFile(file);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(ParseJson(*text), doc);
  // An unwritable destination is named (its parent is a file).
  const std::string bad_path = (file / "x.json").string();
  auto bad = Kforge({"tasks", "list", "--json", bad_path});
  EXPECT_EQ(bad.exit_code, 1) << bad.err;
  EXPECT_NE(bad.err.find(bad_path), std::string::npos) << bad.err;
}

// The user's registry ($XDG_CONFIG_HOME/kforge/models.toml) is read by every
// command that resolves models.
TEST_F(CliTest, ModelsJsonIncludesTheUserRegistry) {
  ASSERT_TRUE(WriteFileAtomic(tmp_ / "xdg/kforge/models.toml", R"(
[providers.mybox]
wire = "openai_chat"
base_url = "http://127.0.0.1:9/v1"
key_required = false
[models."mybox:local-7b"]
context = 32768
price = { input = 0.25, output = 0.5 }
)")
                  .ok());
  auto r = Kforge({"models", "--json", "-"}, {{"XDG_CONFIG_HOME", (tmp_ / "xdg").string()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = ParseJson(r.out);
  ASSERT_TRUE(doc.is_object()) << r.out;
  EXPECT_EQ(doc["schema"], "kforge.models/1");
  const nlohmann::json* mine = nullptr;
  bool builtin = false;
  for (const auto& m : doc["models"]) {
    if (m["spec"] == "mybox:local-7b") mine = &m;
    if (m["spec"] == "openai:gpt-5.5") builtin = true;
  }
  EXPECT_TRUE(builtin);
  ASSERT_NE(mine, nullptr) << r.out;
  EXPECT_EQ((*mine)["wire"], "openai_chat");
  EXPECT_DOUBLE_EQ((*mine)["usd_per_mtok"]["input"].get<double>(), 0.25);
  EXPECT_TRUE((*mine)["usd_per_mtok"]["cached_input"].is_null());
  // Without the user file the model is unknown.
  auto without = Kforge({"models", "--json", "-"}, {{"XDG_CONFIG_HOME", (tmp_ / "none").string()}});
  EXPECT_EQ(without.out.find("mybox:local-7b"), std::string::npos);
}

TEST_F(CliTest, ShowJson) {
  results::FixtureSpec spec;
  spec.run_name = "fx";
  spec.tasks = 2;
  ASSERT_TRUE(results::WriteFixtureRun(tmp_ / "fx", spec).ok());
  auto r = Kforge({"show", (tmp_ / "fx").string(), "1", "--json", "-"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json doc = ParseJson(r.out);
  ASSERT_TRUE(doc.is_object()) << r.out.substr(0, 500);
  EXPECT_EQ(doc["schema"], "kforge.show/1");
  ASSERT_FALSE(doc["sessions"].empty());
  for (const auto& s : doc["sessions"]) {
    EXPECT_EQ(s["task"].get<std::string>().substr(0, 3), "001");
    ASSERT_FALSE(s["turns"].empty());
    EXPECT_EQ(s["turns"][0]["turn"], 1);  // counted from 1, as in the text
    EXPECT_TRUE(s["turns"][0]["evaluations"].is_array());
  }
  EXPECT_EQ(Kforge({"show", (tmp_ / "fx").string(), "nosuchtask", "--json", "-"}).exit_code, 66);
}

// A run file's `registry` (relative to the file) and the run summary as JSON.
// The deadline has passed, so nothing is sent to the (unreachable) server.
TEST_F(CliTest, RunReadsTheRunFilesRegistryAndWritesItsSummaryAsJson) {
  ASSERT_TRUE(WriteFileAtomic(tmp_ / "conf/reg.toml", R"(
[providers.mybox]
wire = "openai_chat"
base_url = "http://127.0.0.1:9/v1"
key_required = false
)")
                  .ok());
  ASSERT_TRUE(WriteFileAtomic(tmp_ / "conf/run.toml",
                              "name = \"withreg\"\n"
                              "models = [\"mybox:local-7b\"]\n"
                              "tasks = [\"1\"]\n"
                              "registry = \"reg.toml\"\n"
                              "compile_only = true\n")
                  .ok());
  const std::string out = (tmp_ / "runs").string();
  const fs::path summary = tmp_ / "summary.json";
  auto r = Kforge({"run", (tmp_ / "conf/run.toml").string(), "--out", out, "--deadline", "1",
                   "--json", summary.string()},
                  {{"XDG_CONFIG_HOME", (tmp_ / "none").string()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto text = ReadFile(summary);
  ASSERT_TRUE(text.ok()) << r.err;
  const nlohmann::json doc = ParseJson(*text);
  ASSERT_TRUE(doc.is_object()) << *text;
  EXPECT_EQ(doc["schema"], "kforge.run_summary/1");
  EXPECT_EQ(doc["name"], "withreg");
  EXPECT_TRUE(doc["compile_only"].get<bool>());
  ASSERT_EQ(doc["sessions"].size(), 1u);
  EXPECT_EQ(doc["sessions"][0]["model"], "mybox:local-7b");
  EXPECT_EQ(doc["sessions"][0]["task"], "001_allreduce");
  EXPECT_TRUE(doc["models"].contains("mybox:local-7b"));
  // The table still went to stdout.
  EXPECT_NE(r.out.find("store:"), std::string::npos) << r.out;

  // --registry on the command line does the same; without either the
  // provider is unknown and nothing is stored.
  ASSERT_TRUE(WriteFileAtomic(tmp_ / "conf/bare.toml",
                              "name = \"noreg\"\n"
                              "models = [\"mybox:local-7b\"]\n"
                              "tasks = [\"1\"]\n")
                  .ok());
  auto unknown = Kforge({"run", (tmp_ / "conf/bare.toml").string(), "--out", out},
                        {{"XDG_CONFIG_HOME", (tmp_ / "none").string()}});
  EXPECT_EQ(unknown.exit_code, 64) << unknown.err;
  EXPECT_NE(unknown.err.find("unknown provider 'mybox'"), std::string::npos) << unknown.err;
  auto flag = Kforge(
      {"run", (tmp_ / "conf/bare.toml").string(), "--out", out, "--registry",
       (tmp_ / "conf/reg.toml").string(), "--deadline", "1", "--compile-only", "--json", "-"},
      {{"XDG_CONFIG_HOME", (tmp_ / "none").string()}});
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_EQ(ParseJson(flag.out)["name"], "noreg") << flag.out;
}

// N29: two deployments behind one spec (OPENAI_BASE_URL moved) share no
// answers; a cache hit is said with the task; --no-cache asks again.
TEST_F(CliTest, RunCachesPerEndpointSaysEveryHitAndNoCacheAsks) {
  providers::testing::Reply reply;
  reply.body = R"({"id":"c1","object":"chat.completion","model":"gpt-test",
    "choices":[{"index":0,"message":{"role":"assistant","content":"No kernel today."},
    "finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":5}})";
  providers::testing::TestServer a, b;
  a.SetDefault(reply);
  b.SetDefault(reply);
  const std::string out = (tmp_ / "runs").string();
  auto run = [&](const std::string& name, const std::string& url, bool no_cache) {
    std::vector<std::string> args = {"run",    "--models",   "openai:gpt-test", "--tasks",
                                     "1",      "--strategy", "one-shot",        "--compile-only",
                                     "--name", name,         "--out",           out};
    if (no_cache) args.push_back("--no-cache");
    return Kforge(args, {{"OPENAI_BASE_URL", url + "/v1"}, {"OPENAI_API_KEY", "sk-test-cli"}});
  };
  auto first = run("on_a", a.url(), false);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_EQ(a.count(), 1u);
  auto second = run("on_b", b.url(), false);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(b.count(), 1u) << "server B was answered from server A's cached reply\n" << second.err;
  EXPECT_EQ(second.err.find("answered from the response cache"), std::string::npos) << second.err;

  auto cached = run("on_b_again", b.url(), false);
  ASSERT_EQ(cached.exit_code, 0) << cached.err;
  EXPECT_EQ(b.count(), 1u);
  EXPECT_NE(cached.err.find("providers: openai:gpt-test (task 001_allreduce, sample 0, turn 1): "
                            "answered from the response cache"),
            std::string::npos)
      << cached.err;

  auto fresh = run("on_b_fresh", b.url(), true);
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(b.count(), 2u);
  EXPECT_EQ(fresh.err.find("answered from the response cache"), std::string::npos) << fresh.err;
}

// The help: commands in groups, defaults shown (not sentinels), examples.
TEST_F(CliTest, HelpGroupsCommandsShowsDefaultsAndExamples) {
  auto help = Kforge({"--help"});
  ASSERT_EQ(help.exit_code, 0);
  std::vector<size_t> at;
  for (const char* group : {"\nEvaluate:\n", "\nRun:\n", "\nResults:\n", "\nModels:\n"}) {
    at.push_back(help.out.find(group));
    EXPECT_NE(at.back(), std::string::npos) << group << help.out;
  }
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end())) << help.out;  // in that order
  // Each command under its group: eval before Run's heading, leaderboard after Results'.
  const size_t eval = help.out.find("\n  eval");
  const size_t leaderboard = help.out.find("\n  leaderboard");
  const size_t results = help.out.find("\nResults:\n");
  ASSERT_NE(eval, std::string::npos) << help.out;
  ASSERT_NE(leaderboard, std::string::npos) << help.out;
  EXPECT_LT(help.out.find("\nEvaluate:\n"), eval);
  EXPECT_GT(leaderboard, results);
  EXPECT_NE(help.out.find("Examples:\n  kforge tasks list"), std::string::npos) << help.out;
  EXPECT_NE(help.out.find("Exit status"), std::string::npos);

  auto run = Kforge({"run", "--help"});
  ASSERT_EQ(run.exit_code, 0);
  EXPECT_NE(run.out.find("--out TEXT=runs"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("=-1"), std::string::npos) << run.out;  // unset budgets
  EXPECT_EQ(run.out.find("=0 "), std::string::npos) << run.out;
}

// `cache du` and `cache clean` on the compile cache under $XDG_CACHE_HOME/kforge.
TEST_F(CliTest, CacheDuAndClean) {
  const fs::path root = tmp_ / "cache/kforge";
  ASSERT_TRUE(WriteFileAtomic(root / "kernels/aaaa/kernel.so", std::string(3000, 'x')).ok());
  ASSERT_TRUE(WriteFileAtomic(root / "kernels/bbbb/kernel.so", std::string(1000, 'y')).ok());
  ASSERT_TRUE(WriteFileAtomic(root / "responses/cc/r.json", "{}").ok());
  auto du = Kforge({"cache", "du"});
  ASSERT_EQ(du.exit_code, 0) << du.err;
  EXPECT_NE(du.out.find("3.9 KiB       2 entries       2 files"), std::string::npos) << du.out;
  auto clean = Kforge({"cache", "clean"});
  ASSERT_EQ(clean.exit_code, 0) << clean.err;
  EXPECT_NE(clean.out.find("2 entries, 3.9 KiB"), std::string::npos) << clean.out;
  EXPECT_FALSE(fs::exists(root / "kernels"));
  EXPECT_TRUE(fs::exists(root / "responses/cc/r.json"));  // answers cost money: kept
  ASSERT_EQ(Kforge({"cache", "clean", "--responses"}).exit_code, 0);
  EXPECT_FALSE(fs::exists(root / "responses"));
}

}  // namespace
}  // namespace kforge
