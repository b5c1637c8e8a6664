// The real tasks/ folders of the source tree, when there are any: every one
// must load, instantiate at every W, dtype and size, and its oracle must run.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "kforge/evaluator/task.h"
#include "kforge/evaluator/task_check.h"
#include "kforge/evaluator/task_select.h"

namespace kforge::eval {
namespace {

TEST(RealTasks, EveryTaskFolderValidates) {
  const std::filesystem::path root = std::filesystem::path(KFORGE_SOURCE_ROOT) / "tasks";
  bool any = false;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    any = any || std::filesystem::exists(e.path() / "task.toml");
  }
  if (!any) GTEST_SKIP() << "no task folders under " << root;
  auto tasks = LoadTasks(root);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  for (const Task& t : *tasks) {
    SCOPED_TRACE(t.key);
    Status shapes = ValidateShapes(t);
    EXPECT_TRUE(shapes.ok()) << shapes.ToString();
    if (!shapes.ok()) continue;
    // Small problems only, to stay quick; `kforge tasks validate` runs them all.
    auto oracle = CheckOracle(t, 0x5eed, 1 << 18);
    ASSERT_TRUE(oracle.ok()) << oracle.status().ToString();
    EXPECT_GT(oracle->problems, 0);
  }
}

// Every task has a physical floor at every bench size, world size and dtype:
// it is what a time that no GPU can reach is rejected against
// (docs/methodology.md), so a task without one has no plausibility check.
TEST(RealTasks, EveryBenchSizeHasAPhysicalFloor) {
  const std::filesystem::path root = std::filesystem::path(KFORGE_SOURCE_ROOT) / "tasks";
  if (!std::filesystem::exists(root / "001_allreduce" / "task.toml"))
    GTEST_SKIP() << "no task folders under " << root;
  auto tasks = LoadTasks(root);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  for (const Task& t : *tasks) {
    for (int w : t.world_sizes) {
      for (Dtype dt : t.dtypes) {
        for (const SizeSpec& size : t.bench_sizes) {
          auto p = Instantiate(t, w, dt, size, false);
          ASSERT_TRUE(p.ok()) << p.status().ToString();
          EXPECT_GT(p->floor_hbm_bytes + p->floor_flops, 0)
              << t.key << " W=" << w << " " << DtypeName(dt) << " " << size.label;
          if (w > 1 && t.category == "collective") {
            EXPECT_GT(p->floor_link_bytes, 0) << t.key << " W=" << w << " " << size.label;
          }
        }
      }
    }
  }
}

// A task ported from ParallelKernelBench names its problem first in its
// provenance ("PKB #N ..."), and N is the task's own number, so that a
// leaderboard's task can be set beside PKB's problem N and coverage counted.
// Ids from 101 on are beyond PKB (docs/beyond-pkb.md) and cite their codebase instead.
TEST(RealTasks, PkbProvenanceNamesTheTasksOwnProblem) {
  const std::filesystem::path root = std::filesystem::path(KFORGE_SOURCE_ROOT) / "tasks";
  if (!std::filesystem::exists(root / "001_allreduce" / "task.toml"))
    GTEST_SKIP() << "no task folders under " << root;
  auto tasks = LoadTasks(root);
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  int ported = 0, beyond = 0;
  for (const Task& t : *tasks) {
    if (t.id >= kFirstBeyondPkbId) {
      ++beyond;
      continue;
    }
    ASSERT_LE(t.id, kLastPkbId) << t.key << ": ids between PKB's and the beyond-PKB range";
    const std::string prefix = "PKB #";
    ASSERT_EQ(t.provenance.rfind(prefix, 0), 0u) << t.key << ": " << t.provenance.substr(0, 60);
    size_t end = prefix.size();
    while (end < t.provenance.size() && std::isdigit(static_cast<unsigned char>(t.provenance[end])))
      ++end;
    ASSERT_GT(end, prefix.size()) << t.key;
    EXPECT_EQ(std::stoi(t.provenance.substr(prefix.size(), end - prefix.size())), t.id) << t.key;
    ++ported;
  }
  EXPECT_EQ(ported + beyond, static_cast<int>(tasks->size()));
}

// A task beyond PKB names its production codebase instead of a PKB problem,
// states its expert kernel (or why there is none), and has one row in
// docs/beyond-pkb.md, "| id | [`key`](../tasks/key/) | ... |".
TEST(RealTasks, BeyondPkbTasksStateAnExpertAndHaveOneTableRow) {
  const std::filesystem::path source = std::filesystem::path(KFORGE_SOURCE_ROOT);
  if (!std::filesystem::exists(source / "tasks" / "001_allreduce" / "task.toml"))
    GTEST_SKIP() << "no task folders under " << source / "tasks";
  auto tasks = LoadTasks(source / "tasks");
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  std::ifstream in(source / "docs" / "beyond-pkb.md");
  ASSERT_TRUE(in) << "cannot read docs/beyond-pkb.md";
  std::map<std::string, int> rows;  // task key -> rows linking to it
  std::string line;
  while (std::getline(in, line)) {
    const std::string link = "](../tasks/";
    if (line.rfind("| ", 0) != 0) continue;
    const size_t at = line.find(link);
    if (at == std::string::npos) continue;
    const size_t start = at + link.size();
    const size_t end = line.find_first_of("/)", start);
    ASSERT_NE(end, std::string::npos) << line.substr(0, 80);
    ++rows[line.substr(start, end - start)];
  }
  for (const Task& t : *tasks) {
    if (t.id < kFirstBeyondPkbId) continue;
    SCOPED_TRACE(t.key);
    EXPECT_NE(t.provenance.rfind("PKB #", 0), 0u) << "a beyond-PKB task cites no PKB problem";
    ASSERT_TRUE(t.expert.has_value()) << "no [expert] section";
    EXPECT_TRUE(!t.expert->kernel.empty() || !t.expert->none.empty());
    EXPECT_FALSE(t.floor.sync_rounds.empty()) << "no [floor] sync_rounds";
    EXPECT_EQ(rows[t.key], 1) << "rows in docs/beyond-pkb.md";
  }
}

// docs/pkb.md has one table row per PKB problem, "| id | `name` | [`key`](../tasks/key/) | why |".
// Every id 1..87 appears once, and the row's task exists, has that id and cites "PKB #id", so the
// table cannot drift from the tasks.
TEST(RealTasks, PkbTableNamesEveryProblemOnceWithItsTask) {
  const std::filesystem::path source = std::filesystem::path(KFORGE_SOURCE_ROOT);
  if (!std::filesystem::exists(source / "tasks" / "001_allreduce" / "task.toml"))
    GTEST_SKIP() << "no task folders under " << source / "tasks";
  auto tasks = LoadTasks(source / "tasks");
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  std::map<std::string, const Task*> by_key;
  for (const Task& t : *tasks) by_key[t.key] = &t;

  std::ifstream in(source / "docs" / "pkb.md");
  ASSERT_TRUE(in) << "cannot read docs/pkb.md";
  std::map<int, int> seen;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("| ", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string c; std::getline(ss, c, '|');) {
      const size_t b = c.find_first_not_of(' ');
      const size_t e = c.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : c.substr(b, e - b + 1));
    }
    if (cells.empty() || cells[0].empty()) continue;
    bool numeric = true;
    for (char ch : cells[0]) numeric = numeric && std::isdigit(static_cast<unsigned char>(ch));
    if (!numeric) continue;  // the header row
    SCOPED_TRACE(line.substr(0, 80));
    const int id = std::stoi(cells[0]);
    ++seen[id];
    ASSERT_GE(cells.size(), 4u);
    const std::string& cell = cells[2];
    const std::string link = "](../tasks/";
    const size_t at = cell.find(link);
    ASSERT_NE(at, std::string::npos) << "no task link";
    const size_t start = at + link.size();
    const size_t end = cell.find_first_of("/)", start);
    ASSERT_NE(end, std::string::npos);
    const std::string key = cell.substr(start, end - start);
    EXPECT_EQ(cell.substr(0, at), "[`" + key + "`") << "link text and target name different tasks";
    EXPECT_TRUE(std::filesystem::exists(source / "tasks" / key / "task.toml")) << key;
    auto it = by_key.find(key);
    ASSERT_NE(it, by_key.end()) << key << " is not a loaded task";
    EXPECT_EQ(it->second->id, id) << key;  // 049 cites PKB #31 too: the id must match as well
    const std::string cite = "PKB #" + std::to_string(id);
    const std::string& prov = it->second->provenance;
    bool cited = false;
    for (size_t p = prov.find(cite); p != std::string::npos; p = prov.find(cite, p + 1)) {
      const size_t after = p + cite.size();
      if (after == prov.size() || !std::isdigit(static_cast<unsigned char>(prov[after])))
        cited = true;
    }
    EXPECT_TRUE(cited) << key << "'s provenance does not cite " << cite;
    EXPECT_FALSE(cells[3].empty()) << "no difference stated";
  }
  for (int id = 1; id <= 87; ++id) EXPECT_EQ(seen[id], 1) << "PKB #" << id << " rows";
  EXPECT_EQ(seen.size(), 87u) << "ids outside 1..87";
}

}  // namespace
}  // namespace kforge::eval
