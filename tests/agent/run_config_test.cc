#include "kforge/agent/run_config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>

namespace kforge::agent {
namespace {

TEST(RunConfig, ParsesARunFileAndRoundTripsThroughJson) {
  auto c = ParseRunFile(
      "name = \"n\"\nmodels = [\"a:x\", \"b:y\"]\ntasks = \"category:collective\"\nturns = "
      "6\nworld = 8\n"
      "gpus = [0, 1]\n[budget]\nusd = 10.0\n[budget.per_model]\ntokens = "
      "1000\n[budget.per_task]\nusd = 0.5\n",
      "r.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->models, (std::vector<std::string>{"a:x", "b:y"}));
  EXPECT_EQ(c->tasks, std::vector<std::string>{"category:collective"});
  EXPECT_EQ(*c->turns, 6);
  EXPECT_EQ(c->world, 8);
  EXPECT_EQ(*c->budgets.run.usd, 10.0);
  EXPECT_EQ(*c->budgets.per_model.tokens, 1000);
  EXPECT_EQ(*c->budgets.per_task.usd, 0.5);
  auto back = RunConfigFromJson(RunConfigToJson(*c));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(RunConfigToJson(*back), RunConfigToJson(*c));
}

// `profile` (kforge run --profile): read from a run file, stored with the
// run, absent from an older run's config (off), and a difference a resume
// names.
TEST(RunConfig, ProfileIsReadStoredAndComparedAsAnEvaluationOption) {
  auto c = ParseRunFile("models = [\"a:x\"]\ntasks = [\"1\"]\nprofile = true\n", "r.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->profile);
  const nlohmann::json j = RunConfigToJson(*c);
  EXPECT_EQ(j.value("profile", false), true) << j.dump();
  auto back = RunConfigFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->profile);
  nlohmann::json older = j;
  older.erase("profile");
  auto old = RunConfigFromJson(older);
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_FALSE(old->profile);
  EXPECT_EQ(RunConfigDifferences(*old, *c), std::vector<std::string>{"profile: false -> true"});
}

TEST(RunConfig, RemoteEvaluationAndSlurmFromARunFile) {
  auto c = ParseRunFile(
      "models = [\"a:x\"]\ntasks = [\"1\"]\n"
      "evaluators = [\"http://gpu1:8780\", \"https://gpu2:8443\"]\n"
      "evaluators_dir = \"servers/workers\"\neval_token_file = \"/etc/kforge/token\"\n"
      "[slurm]\nnodes = 4\ngpus_per_node = 8\npartition = \"gpu\"\ntime = \"12:00:00\"\n",
      "/home/me/night.toml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->evaluators, (std::vector<std::string>{"http://gpu1:8780", "https://gpu2:8443"}));
  EXPECT_EQ(c->evaluators_dir, "/home/me/servers/workers");  // relative to the run file
  EXPECT_EQ(c->eval_token_file, "/etc/kforge/token");
  EXPECT_EQ(c->slurm_nodes, 4);
  EXPECT_EQ(c->slurm_gpus_per_node, 8);
  EXPECT_EQ(c->slurm_partition, "gpu");
  EXPECT_EQ(c->slurm_time, "12:00:00");
  auto back = RunConfigFromJson(RunConfigToJson(*c));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(RunConfigToJson(*back), RunConfigToJson(*c));
  // Where evaluations run is not part of what the run asks.
  RunConfig local = *c;
  local.evaluators.clear();
  local.slurm_nodes = 0;
  EXPECT_TRUE(RunConfigDifferences(*c, local).empty());

  auto bad_url =
      ParseRunFile("models = [\"a:x\"]\ntasks = [\"1\"]\nevaluators = [\"gpu1:8780\"]\n", "r.toml");
  ASSERT_FALSE(bad_url.ok());
  EXPECT_NE(bad_url.status().message().find("r.toml:3: evaluators: 'gpu1:8780'"), std::string::npos)
      << bad_url.status().message();
  auto bad_key = ParseRunFile("models = [\"a:x\"]\ntasks = [\"1\"]\n[slurm]\nnode = 2\n", "r.toml");
  ASSERT_FALSE(bad_key.ok());
  EXPECT_NE(bad_key.status().message().find("slurm.node: unknown field"), std::string::npos)
      << bad_key.status().message();
  auto just_table = ParseRunFile("models = [\"a:x\"]\ntasks = [\"1\"]\n[slurm]\n", "r.toml");
  ASSERT_TRUE(just_table.ok());
  EXPECT_EQ(just_table->slurm_nodes, 1);  // the table alone means one server
}

// The run file's durations: seconds >= 0, read, stored and defaulted.
TEST(RunConfig, DurationsAreSecondsAtLeastZero) {
  struct Field {
    const char* key;
    double RunConfig::*member;
    double default_s;
    const char* zero;  // what 0 means, as the error says
  };
  for (const Field& f : {Field{"baseline_reuse_s", &RunConfig::baseline_reuse_s,
                               eval::kDefaultBaselineReuseS, "timed around every candidate"},
                         Field{"evaluator_liveness_s", &RunConfig::evaluator_liveness_s,
                               eval::kDefaultEvaluatorLivenessS, "no health checks"}}) {
    const std::string head = "models = [\"a:x\"]\ntasks = [\"1\"]\n";
    for (double v : {0.0, 5.0}) {
      auto c = ParseRunFile(head + fmt::format("{} = {}\n", f.key, v), "r.toml");
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      EXPECT_EQ((*c).*f.member, v) << f.key;
      auto back = RunConfigFromJson(RunConfigToJson(*c));
      ASSERT_TRUE(back.ok());
      EXPECT_EQ((*back).*f.member, v) << f.key;
    }
    auto dflt = ParseRunFile(head, "r.toml");
    ASSERT_TRUE(dflt.ok());
    EXPECT_EQ((*dflt).*f.member, f.default_s) << f.key;
    for (const char* bad : {"-1", "\"long\"", "inf"}) {
      auto b = ParseRunFile(head + f.key + " = " + bad + "\n", "r.toml");
      ASSERT_FALSE(b.ok()) << bad;
      EXPECT_EQ(
          b.status().message(),
          fmt::format("r.toml:3: {}: expected a number of seconds >= 0 (0: {})", f.key, f.zero))
          << bad;
    }
  }
  EXPECT_EQ(eval::kDefaultBaselineReuseS, 600);
  EXPECT_EQ(eval::kDefaultEvaluatorLivenessS, 60);
}

// The run's timing cap: 0 (the evaluator's default) or 0.01-600 seconds, as
// `kforge eval --timing-cap` takes; read, stored, and refused naming the
// file, the line and the field.
TEST(RunConfig, TheTimingCapIsZeroOrWithinTheEvaluatorsRange) {
  const std::string head = "models = [\"a:x\"]\ntasks = [\"1\"]\n";
  auto dflt = ParseRunFile(head, "r.toml");
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt->timing_cap_s, 0);
  for (double v : {0.0, 0.01, 0.2, 600.0}) {
    auto c = ParseRunFile(head + fmt::format("timing_cap_s = {}\n", v), "r.toml");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->timing_cap_s, v);
    auto back = RunConfigFromJson(RunConfigToJson(*c));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(back->timing_cap_s, v);
  }
  for (const char* bad : {"0.001", "601", "-1", "\"short\"", "inf"}) {
    auto b = ParseRunFile(head + "timing_cap_s = " + bad + "\n", "r.toml");
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().message(),
              "r.toml:3: timing_cap_s: expected 0 (the evaluator's default (0.5 s)) or 0.01-600 "
              "seconds")
        << bad;
  }
}

// Like the servers themselves, how long to wait on them may change on resume;
// how long a baseline is reused is part of what the run asks.
TEST(RunConfig, EvaluatorLivenessIsNotPartOfWhatTheRunAsks) {
  RunConfig stored, asked;
  stored.models = asked.models = {"a:x"};
  stored.tasks = asked.tasks = {"1"};
  asked.evaluator_liveness_s = 5;
  EXPECT_TRUE(RunConfigDifferences(stored, asked).empty());
  asked.baseline_reuse_s = 0;
  EXPECT_EQ(RunConfigDifferences(stored, asked).size(), 1u);
}

TEST(RunConfig, ErrorsNameFileLineAndField) {
  auto c = ParseRunFile("models = [\"a\"]\ntasks = [\"1\"]\nworld = 0\n", "r.toml");
  EXPECT_EQ(c.status().message(), "r.toml:3: world: expected an integer >= 1");
  c = ParseRunFile("models = [\"a\"]\ntasks = [\"1\"]\n[budget]\ndollars = 3\n", "r.toml");
  EXPECT_EQ(c.status().message(),
            "r.toml:4: budget.dollars: unknown field (usd, tokens, wall_s, per_model, per_task)");
  c = ParseRunFile("tasks = [\"1\"]\n", "r.toml");
  EXPECT_EQ(c.status().message(), "r.toml:0: models: at least one model is required");
}

TEST(RunConfig, DifferencesNameEachFieldAskedDifferently) {
  RunConfig stored;
  stored.name = "same";
  stored.models = {"replay:x"};
  stored.tasks = {"1"};
  RunConfig asked = stored;
  asked.out = "elsewhere";
  EXPECT_TRUE(RunConfigDifferences(stored, asked).empty());
  asked.tasks = {"2"};
  asked.strategy = "one-shot";
  EXPECT_EQ(RunConfigDifferences(stored, asked),
            (std::vector<std::string>{"strategy: \"refine\" -> \"one-shot\"",
                                      "tasks: [\"1\"] -> [\"2\"]"}));
}

TEST(RunConfig, Deadlines) {
  EXPECT_DOUBLE_EQ(*ParseDeadline("+2h", 1000), 1000 + 7200);
  EXPECT_DOUBLE_EQ(*ParseDeadline("+90m", 0), 5400);
  EXPECT_DOUBLE_EQ(*ParseDeadline("1700000000", 0), 1.7e9);
  EXPECT_FALSE(ParseDeadline("tomorrow", 0).ok());
  EXPECT_DOUBLE_EQ(*ParseDeadline("+1.5h", 0), 5400);
}

// 2025-06-01T06:00:00Z is 1748757600.
TEST(RunConfig, DeadlinesHonourZones) {
  EXPECT_DOUBLE_EQ(*ParseDeadline("2025-06-01T06:00Z", 0), 1748757600);
  EXPECT_DOUBLE_EQ(*ParseDeadline("2025-06-01T06:00:30Z", 0), 1748757630);
  EXPECT_DOUBLE_EQ(*ParseDeadline("2025-06-01T08:00+02:00", 0), 1748757600);
  EXPECT_DOUBLE_EQ(*ParseDeadline("2025-06-01T00:30-0530", 0), 1748757600);
  EXPECT_DOUBLE_EQ(*ParseDeadline("2025-06-01T07:00+01", 0), 1748757600);
  EXPECT_DOUBLE_EQ(*ParseDeadline("2024-02-29T00:00Z", 0), 1709164800);  // leap day
}

TEST(RunConfig, DeadlinesWithoutAZoneAreLocalTime) {
  const char* old = std::getenv("TZ");
  const std::string saved = old ? old : "";
  setenv("TZ", "UTC-3", 1);  // POSIX sign: three hours east of UTC
  tzset();
  auto local = ParseDeadline("2025-06-01T09:00", 0);
  if (old) {
    setenv("TZ", saved.c_str(), 1);
  } else {
    unsetenv("TZ");
  }
  tzset();
  ASSERT_TRUE(local.ok()) << local.status().ToString();
  EXPECT_DOUBLE_EQ(*local, 1748757600);
}

TEST(RunConfig, DeadlinesRefuseTrailingTextAndNamesIt) {
  for (const char* bad :
       {"2025-06-01T06:00junk", "2025-06-01T06:00:00 UTC", "2025-06-01T06:00+2:00",
        "2025-06-01T06:00+25:00", "2025-13-01T06:00", "2025-02-30T06:00", "2025-06-01T24:00",
        "2025-06-01", "+2hours", "+h", "+-2h", "+2x", "1700000000abc", "", "1e400"}) {
    auto r = ParseDeadline(bad, 0);
    EXPECT_FALSE(r.ok()) << bad << " -> " << (r.ok() ? *r : 0);
    if (!r.ok()) {
      EXPECT_EQ(r.status().kind(), ErrorKind::kInvalidInput) << bad;
      EXPECT_NE(r.status().message().find(std::string("'") + bad + "'"), std::string::npos)
          << r.status().message();
    }
  }
  auto junk = ParseDeadline("2025-06-01T06:00junk", 0);
  EXPECT_NE(junk.status().message().find("unexpected 'junk'"), std::string::npos)
      << junk.status().message();
}

}  // namespace
}  // namespace kforge::agent
