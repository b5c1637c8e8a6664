// Warm served groups (run/warm_groups.h) with the fake worker: a group
// refilled ahead is the one the next Acquire of its purpose and shape gets,
// no other shape or purpose gets it, a dead one is replaced, the waiting
// ranks stay under the cap, the pool leaves no process behind, and a
// disabled pool starts nothing ahead.
#include "run/warm_groups.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;

GroupOptions Shape(int world) {
  GroupOptions o;
  o.worker_path = KFORGE_FAKE_WORKER;
  o.role = "candidate";
  o.world = world;
  o.devices.assign(world, 0);
  o.emulated = true;  // the fake has no NCCL
  o.start_deadline_s = 10;
  o.capture_output = true;
  return o;
}

// This process's children, from /proc (every thread's list: a refill's
// workers are children of the thread that forked them).
std::set<pid_t> Children() {
  std::set<pid_t> pids;
  for (const auto& task : fs::directory_iterator("/proc/self/task")) {
    std::ifstream in(task.path() / "children");
    for (pid_t p; in >> p;) pids.insert(p);
  }
  return pids;
}

// The candidate directories in the temporary directory now.
std::set<fs::path> CandidateDirs() {
  std::set<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path()))
    if (e.path().filename().string().starts_with("kforge-candidate-")) dirs.insert(e.path());
  return dirs;
}

// Gone: reaped, not even a zombie.
bool Gone(pid_t pid) { return kill(pid, 0) != 0 && errno == ESRCH; }

class WarmGroupsTest : public ::testing::Test {
 protected:
  // Every fake rank behaves (other tests of this binary set misbehaviours),
  // and the groups' directories go to a temporary directory of this test's
  // own, so that tests running beside it (ctest -j) cannot add to those it
  // counts.
  void SetUp() override {
    for (int r = 0; r < 4; ++r) unsetenv(("KFORGE_WORKER_FAKE_" + std::to_string(r)).c_str());
    const char* was = std::getenv("TMPDIR");
    saved_tmpdir_ = was ? std::optional<std::string>(was) : std::nullopt;
    std::string tmpl = (fs::temp_directory_path() / "kforge-warm-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    private_tmp_ = tmpl;
    setenv("TMPDIR", private_tmp_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_tmpdir_) {
      setenv("TMPDIR", saved_tmpdir_->c_str(), 1);
    } else {
      unsetenv("TMPDIR");
    }
    std::error_code ec;
    fs::remove_all(private_tmp_, ec);
  }
  std::optional<std::string> saved_tmpdir_;
  fs::path private_tmp_;
};

TEST_F(WarmGroupsTest, TheNextAcquireOfTheShapeGetsTheGroupStartedAhead) {
  WarmGroups pool;
  pool.Refill("candidate", Shape(2));
  pool.Settle();
  ASSERT_EQ(pool.size(), 1u);
  const std::set<pid_t> before = Children();
  auto g = pool.Acquire("candidate", Shape(2));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->warm);
  ASSERT_EQ(g->group->pids().size(), 2u);
  for (pid_t pid : g->group->pids()) EXPECT_TRUE(before.contains(pid)) << pid;
  EXPECT_EQ(Children(), before);  // nothing was started for it
  EXPECT_EQ(pool.size(), 0u);
  // It works: its directory exists, its mailboxes are its ranks', and it answers.
  EXPECT_TRUE(fs::is_directory(g->dir));
  EXPECT_EQ(g->group->options().candidate_dir, g->dir.string());
  EXPECT_EQ(g->mailboxes.size(), 2u);
  auto pinged = g->group->All({{"op", "ping"}}, 5, "test");
  EXPECT_TRUE(pinged.ok()) << pinged.status().ToString();
  g->Discard();
}

TEST_F(WarmGroupsTest, AnAcquireWaitsForTheRefillUnderWay) {
  WarmGroups pool;
  pool.Refill("candidate", Shape(2));
  auto g = pool.Acquire("candidate", Shape(2));  // no Settle: the refill may still be starting
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->warm);
  g->Discard();
}

TEST_F(WarmGroupsTest, AnotherShapeNeverGetsIt) {
  WarmGroups pool;
  pool.Refill("candidate", Shape(2));
  pool.Settle();
  const std::set<pid_t> before = Children();
  GroupOptions other = Shape(2);
  other.candidate_nccl = true;  // fixed at spawn: another shape
  for (const GroupOptions& shape : {Shape(3), other}) {
    auto g = pool.Acquire("candidate", shape);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_FALSE(g->warm);
    for (pid_t pid : g->group->pids()) EXPECT_FALSE(before.contains(pid)) << pid;
    g->Discard();
  }
  EXPECT_EQ(pool.size(), 1u);  // still waiting for its own shape
  EXPECT_NE(ShapeKey(Shape(2)), ShapeKey(other));
  // The per-group parts are not the shape.
  GroupOptions same = Shape(2);
  same.candidate_dir = "/elsewhere";
  same.mailbox_fds = {7, 8};
  same.start_deadline_s = 99;
  EXPECT_EQ(ShapeKey(Shape(2)), ShapeKey(same));
}

// The reference and expert groups are started ahead like the candidate's,
// each for its own purpose: the next Acquire for that purpose gets it, and
// the others stay waiting for theirs.
TEST_F(WarmGroupsTest, AReferenceGroupAcquiredAfterARefillIsWarm) {
  WarmGroups pool;
  pool.Refill({{"candidate", Shape(2)}, {"reference", Shape(2)}, {"expert", Shape(2)}});
  pool.Settle();
  ASSERT_EQ(pool.size(), 3u);
  const std::set<pid_t> before = Children();
  ASSERT_EQ(before.size(), 6u);
  auto g = pool.Acquire("reference", Shape(2));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_TRUE(g->warm);
  for (pid_t pid : g->group->pids()) EXPECT_TRUE(before.contains(pid)) << pid;
  EXPECT_EQ(Children(), before);
  EXPECT_EQ(pool.size(), 2u);
  auto pinged = g->group->All({{"op", "ping"}}, 5, "test");
  EXPECT_TRUE(pinged.ok()) << pinged.status().ToString();
  g->Discard();
  for (const char* purpose : {"expert", "candidate"}) {
    auto w = pool.Acquire(purpose, Shape(2));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_TRUE(w->warm) << purpose;
    w->Discard();
  }
  EXPECT_EQ(pool.size(), 0u);
}

// A group started for one purpose is never handed to another, whatever the
// shape: a candidate's for a reference, a reference's for a candidate.
TEST_F(WarmGroupsTest, AGroupIsNeverHandedToAnotherPurpose) {
  for (const auto& [started_for, asked_for] :
       {std::pair{"candidate", "reference"}, std::pair{"reference", "candidate"},
        std::pair{"reference", "expert"}}) {
    WarmGroups pool;
    pool.Refill(started_for, Shape(2));
    pool.Settle();
    const std::set<pid_t> waiting = Children();
    ASSERT_EQ(waiting.size(), 2u);
    auto g = pool.Acquire(asked_for, Shape(2));
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    EXPECT_FALSE(g->warm) << started_for << " -> " << asked_for;
    for (pid_t pid : g->group->pids()) EXPECT_FALSE(waiting.contains(pid)) << pid;
    g->Discard();
    EXPECT_EQ(pool.size(), 1u);  // still waiting for its own purpose
    auto own = pool.Acquire(started_for, Shape(2));
    ASSERT_TRUE(own.ok()) << own.status().ToString();
    EXPECT_TRUE(own->warm);
    own->Discard();
  }
}

TEST_F(WarmGroupsTest, AGroupThatDiedWhileWaitingIsReplaced) {
  WarmGroups pool;
  pool.Refill("candidate", Shape(2));
  pool.Settle();
  std::set<pid_t> waiting = Children();
  ASSERT_EQ(waiting.size(), 2u);
  const pid_t victim = *waiting.begin();
  kill(victim, SIGKILL);
  siginfo_t info{};
  // Dead, left a zombie for the pool to notice.
  ASSERT_EQ(waitid(P_PID, static_cast<id_t>(victim), &info, WEXITED | WNOWAIT), 0);
  auto g = pool.Acquire("candidate", Shape(2));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_FALSE(g->warm);
  for (pid_t pid : g->group->pids()) EXPECT_FALSE(waiting.contains(pid)) << pid;
  for (pid_t pid : waiting) EXPECT_TRUE(Gone(pid)) << pid;  // its live rank was killed too
  auto pinged = g->group->All({{"op", "ping"}}, 5, "test");
  EXPECT_TRUE(pinged.ok()) << pinged.status().ToString();
  g->Discard();
}

TEST_F(WarmGroupsTest, DestroyingThePoolKillsItsGroupsAndRemovesTheirDirectories) {
  std::set<pid_t> waiting;
  std::set<fs::path> dirs;
  const std::set<fs::path> others = CandidateDirs();
  {
    WarmGroups pool;
    pool.Refill("candidate", Shape(2));
    pool.Refill("candidate", Shape(3));
    pool.Refill("candidate", Shape(3));  // one per shape: a second refill starts nothing
    pool.Refill({{"reference", Shape(2)}, {"expert", Shape(2)}});
    pool.Settle();
    EXPECT_EQ(pool.size(), 4u);
    waiting = Children();
    EXPECT_EQ(waiting.size(), 9u);
    for (const fs::path& d : CandidateDirs())
      if (!others.contains(d)) dirs.insert(d);
    EXPECT_EQ(dirs.size(), 4u);
  }
  EXPECT_TRUE(Children().empty());
  for (pid_t pid : waiting) EXPECT_TRUE(Gone(pid)) << pid;
  for (const fs::path& d : dirs) EXPECT_FALSE(fs::exists(d)) << d;
}

TEST_F(WarmGroupsTest, DestroyingThePoolWhileARefillRunsLeavesNothing) {
  {
    WarmGroups pool;
    pool.Refill({{"candidate", Shape(2)}, {"reference", Shape(2)}});
  }
  EXPECT_TRUE(Children().empty());
}

TEST_F(WarmGroupsTest, BeyondItsCapTheLongestWaitingGroupMakesWay) {
  WarmGroups pool(/*enabled=*/true, /*max_waiting_ranks=*/5);
  pool.Refill("candidate", Shape(1));
  pool.Settle();
  const std::set<pid_t> oldest = Children();
  ASSERT_EQ(oldest.size(), 1u);
  pool.Refill("candidate", Shape(2));
  pool.Refill("reference", Shape(3));  // 1 + 2 + 3 ranks: one too many
  pool.Settle();
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool.waiting_ranks(), 5);
  for (pid_t pid : oldest) EXPECT_TRUE(Gone(pid)) << pid;
  EXPECT_EQ(Children().size(), 5u);
  auto g = pool.Acquire("candidate", Shape(1));
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_FALSE(g->warm);
  auto c = pool.Acquire("candidate", Shape(2));
  auto r = pool.Acquire("reference", Shape(3));
  ASSERT_TRUE(c.ok() && r.ok());
  EXPECT_TRUE(c->warm);
  EXPECT_TRUE(r->warm);
  for (SpawnedGroup* done : {&*g, &*c, &*r}) done->Discard();
}

// One evaluation's groups, refilled together, never make way for each other:
// the most wanted (first) are started, the rest wait for room.
TEST_F(WarmGroupsTest, ARefillsOwnGroupsKeepTheirPlacesInOrder) {
  WarmGroups pool(/*enabled=*/true, /*max_waiting_ranks=*/4);
  pool.Refill({{"candidate", Shape(2)}, {"reference", Shape(2)}, {"expert", Shape(2)}});
  pool.Settle();
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_EQ(Children().size(), 4u);
  auto e = pool.Acquire("expert", Shape(2));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_FALSE(e->warm);
  e->Discard();
  // A later refill makes room with the longest-waiting group it does not
  // want (the reference), never with one it wants (the older candidate).
  const std::set<pid_t> waiting = Children();
  pool.Refill({{"candidate", Shape(2)}, {"expert", Shape(2)}});
  pool.Settle();
  EXPECT_EQ(pool.size(), 2u);
  auto r = pool.Acquire("reference", Shape(2));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->warm);
  r->Discard();
  for (const char* purpose : {"candidate", "expert"}) {
    auto w = pool.Acquire(purpose, Shape(2));
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    EXPECT_TRUE(w->warm) << purpose;
    if (std::string(purpose) == "candidate") {
      for (pid_t pid : w->group->pids()) EXPECT_TRUE(waiting.contains(pid)) << pid;
    }
    w->Discard();
  }
}

// The default cap is the MPS arithmetic of the header: with every rank of an
// evaluation at the largest world (harness, reference, candidate, expert)
// on one GPU, the waiting ranks keep the daemon within its clients; at W=8
// that is two groups, and a group larger than the cap never waits.
TEST_F(WarmGroupsTest, TheDefaultCapKeepsAnMpsDaemonWithinItsClients) {
  static_assert(kWaitingRanks + 4 * kMaxWorld <= kMpsClientsPerGpu);
  EXPECT_EQ(kWaitingRanks, 16);
  WarmGroups pool;
  pool.Refill({{"candidate", Shape(kMaxWorld)},
               {"reference", Shape(kMaxWorld)},
               {"expert", Shape(kMaxWorld)}});
  pool.Settle();
  EXPECT_EQ(pool.size(), 2u);
  EXPECT_EQ(pool.waiting_ranks(), 2 * kMaxWorld);
  EXPECT_EQ(Children().size(), static_cast<size_t>(2 * kMaxWorld));
  pool.Clear();
  WarmGroups small(/*enabled=*/true, /*max_waiting_ranks=*/2);
  small.Refill("candidate", Shape(3));
  small.Settle();
  EXPECT_EQ(small.size(), 0u);
  EXPECT_TRUE(Children().empty());
}

TEST_F(WarmGroupsTest, ClearKillsTheWaitingGroups) {
  WarmGroups pool;
  pool.Refill("candidate", Shape(2));
  pool.Settle();
  const std::set<pid_t> waiting = Children();
  pool.Clear();
  EXPECT_EQ(pool.size(), 0u);
  for (pid_t pid : waiting) EXPECT_TRUE(Gone(pid)) << pid;
}

TEST_F(WarmGroupsTest, DisabledStartsNothingAhead) {
  WarmGroups pool(/*enabled=*/false);
  pool.Refill("candidate", Shape(2));
  pool.Settle();
  EXPECT_EQ(pool.size(), 0u);
  EXPECT_TRUE(Children().empty());
  auto g = pool.Acquire("candidate", Shape(2));  // started now, on demand
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_FALSE(g->warm);
  EXPECT_EQ(Children().size(), 2u);
  g->Discard();
  EXPECT_TRUE(Children().empty());
}

TEST_F(WarmGroupsTest, AFailedRefillLeavesNothingAndAcquireReportsTheFailure) {
  WarmGroups pool;
  GroupOptions broken = Shape(2);
  broken.worker_path = "/nonexistent/kforge-worker";
  pool.Refill("candidate", broken);
  pool.Settle();
  EXPECT_EQ(pool.size(), 0u);
  auto g = pool.Acquire("candidate", broken);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().kind(), ErrorKind::kNotFound);
}

}  // namespace
}  // namespace kforge::eval
