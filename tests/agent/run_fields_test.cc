// The field table (kforge/agent/run_fields.h) against RunConfig itself: a
// member without a row, or a row the run file, the JSON or the differences
// do not honour, fails here.
#include "kforge/agent/run_fields.h"

#include <gtest/gtest.h>

#include <set>
#include <tuple>

namespace kforge::agent {
namespace {

// Every member of RunConfig. A new member makes this fail to compile
// ("RunConfig decomposes into N elements"): add it here, to Full() below and
// a row to agent/src/run_fields.cc.
auto Members(RunConfig& c) {
  auto& [name, models, tasks, strategy, turns, samples, repeats, world, dtype, gpus, hardware,
         compile_only, budgets, deadline_unix, llm_concurrency, compile_jobs, baseline_reuse_s,
         no_warm_groups, profile, timing_cap_s, out, tasks_dir, registries, evaluators,
         evaluators_dir, eval_token_file, evaluator_liveness_s, slurm_nodes, slurm_gpus_per_node,
         slurm_partition, slurm_time, rejudge_of, rejudge_of_store] = c;
  return std::tie(name, models, tasks, strategy, turns, samples, repeats, world, dtype, gpus,
                  hardware, compile_only, budgets, deadline_unix, llm_concurrency, compile_jobs,
                  baseline_reuse_s, no_warm_groups, profile, timing_cap_s, out, tasks_dir,
                  registries, evaluators, evaluators_dir, eval_token_file, evaluator_liveness_s,
                  slurm_nodes, slurm_gpus_per_node, slurm_partition, slurm_time, rejudge_of,
                  rejudge_of_store);
}
constexpr size_t kMembers = std::tuple_size_v<decltype(Members(std::declval<RunConfig&>()))>;

// Which members of `a` differ from `b`'s.
std::vector<bool> Differs(RunConfig a, RunConfig b) {
  return [&]<size_t... I>(std::index_sequence<I...>) {
    return std::vector<bool>{(std::get<I>(Members(a)) != std::get<I>(Members(b)))...};
  }
  (std::make_index_sequence<kMembers>());
}

// A config with every member away from its default.
RunConfig Full() {
  RunConfig c;
  c.name = "n";
  c.models = {"a:x", "b:y"};
  c.tasks = {"1", "category:collective"};
  c.strategy = "tree";
  c.turns = 3;
  c.samples = 2;
  c.repeats = 4;
  c.world = 8;
  c.dtype = "bf16";
  c.gpus = {2, 3};
  c.hardware = "h100_8";
  c.compile_only = true;
  c.budgets.run = {.usd = 1, .tokens = 2, .wall_s = 3};
  c.budgets.per_model.usd = 4;
  c.budgets.per_task.tokens = 5;
  c.deadline_unix = 1.7e9;
  c.llm_concurrency = 7;
  c.compile_jobs = 5;
  c.baseline_reuse_s = 30;
  c.no_warm_groups = true;
  c.profile = true;
  c.timing_cap_s = 0.2;
  c.out = "elsewhere";
  c.tasks_dir = "/t";
  c.registries = {"/r.toml"};
  c.evaluators = {"http://e:1"};
  c.evaluators_dir = "/ev";
  c.eval_token_file = "/tok";
  c.evaluator_liveness_s = 9;
  c.slurm_nodes = 2;
  c.slurm_gpus_per_node = 4;
  c.slurm_partition = "gpu";
  c.slurm_time = "1:00:00";
  c.rejudge_of = "orig";
  c.rejudge_of_store = "/runs/orig";
  return c;
}

TEST(RunFields, FullSetsEveryMember) {
  const std::vector<bool> set = Differs(Full(), RunConfig{});
  for (size_t i = 0; i < kMembers; ++i) EXPECT_TRUE(set[i]) << "member " << i << " of RunConfig";
}

// Each member is copied by exactly one row: CopyField, the flags' merge and
// the JSON all go through the rows.
TEST(RunFields, CoverEveryMemberOnce) {
  std::vector<int> rows_of(kMembers, 0);
  for (const RunField& f : RunFields()) {
    RunConfig one;
    CopyField(f, Full(), &one);
    const std::vector<bool> d = Differs(one, RunConfig{});
    int n = 0;
    for (size_t i = 0; i < kMembers; ++i) {
      rows_of[i] += d[i];
      n += d[i];
    }
    EXPECT_GT(n, 0) << f.json_key << " copies no member";
  }
  for (size_t i = 0; i < kMembers; ++i)
    EXPECT_EQ(rows_of[i], 1) << "member " << i << " of RunConfig is in " << rows_of[i] << " rows";
}

TEST(RunFields, EveryMemberRoundTripsThroughJson) {
  auto back = RunConfigFromJson(RunConfigToJson(Full()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const std::vector<bool> d = Differs(*back, Full());
  for (size_t i = 0; i < kMembers; ++i) EXPECT_FALSE(d[i]) << "member " << i << " was lost";
  EXPECT_EQ(*back, Full());
  auto defaults = RunConfigFromJson(RunConfigToJson(RunConfig{}));
  ASSERT_TRUE(defaults.ok());
  EXPECT_EQ(*defaults, RunConfig{});
}

// Each field is compared by RunConfigDifferences exactly when its role says
// it is part of what the run asks, under its JSON key.
TEST(RunFields, DifferencesFollowTheRoles) {
  for (const RunField& f : RunFields()) {
    RunConfig one;
    CopyField(f, Full(), &one);
    const std::vector<std::string> diff = RunConfigDifferences(RunConfig{}, one);
    if (!DifferencesCompare(f.role)) {
      EXPECT_TRUE(diff.empty()) << f.json_key;
      continue;
    }
    ASSERT_EQ(diff.size(), 1u) << f.json_key;
    EXPECT_EQ(diff[0].rfind(std::string(f.json_key) + ": ", 0), 0u) << diff[0];
  }
}

std::set<std::string> KeysWhere(bool (*pred)(FieldRole)) {
  std::set<std::string> out;
  for (const RunField& f : RunFields()) {
    if (pred(f.role)) out.insert(std::string(f.json_key));
  }
  return out;
}

// The roles as a user meets them (docs/agent.md, "Resume" and "Rejudge").
TEST(RunFields, WhoMayChangeWhat) {
  const std::set<std::string> asks = {"strategy", "turns", "samples", "repeats",
                                      "world",    "dtype", "hardware"};
  std::set<std::string> resume_refuses = asks;
  resume_refuses.insert({"name", "models", "tasks"});
  EXPECT_EQ(KeysWhere([](FieldRole r) { return !AResumeMayChange(r); }), resume_refuses);
  std::set<std::string> rejudge_refuses = asks;
  rejudge_refuses.insert({"deadline_unix", "budget"});
  EXPECT_EQ(KeysWhere([](FieldRole r) { return !ARejudgeTakes(r); }), rejudge_refuses);
  EXPECT_EQ(KeysWhere([](FieldRole r) { return !DifferencesCompare(r); }),
            (std::set<std::string>{"name", "out", "evaluators", "evaluators_dir", "eval_token_file",
                                   "evaluator_liveness_s", "slurm"}));
}

// Every run-file key is read (a value of the wrong shape is refused naming
// the key), and no other key is.
TEST(RunFields, EveryRunFileKeyIsRead) {
  const std::string head = "models = [\"a:x\"]\ntasks = [\"1\"]\n";
  for (const RunField& f : RunFields()) {
    if (f.key.empty() || f.key == "models" || f.key == "tasks") continue;
    auto c = ParseRunFile(head + std::string(f.key) + " = { x = [1] }\n", "r.toml");
    ASSERT_FALSE(c.ok()) << f.key;
    const std::string& m = c.status().message();
    EXPECT_EQ(m.rfind("r.toml:3: " + std::string(f.key), 0), 0u) << m;
    EXPECT_EQ(m.find(std::string(f.key) + ": unknown field"), std::string::npos) << m;
  }
  auto stored_only = ParseRunFile(head + "rejudge_of = \"x\"\n", "r.toml");
  EXPECT_EQ(stored_only.status().message(), "r.toml:3: rejudge_of: unknown field");
}

}  // namespace
}  // namespace kforge::agent
