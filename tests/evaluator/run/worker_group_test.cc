#include "run/worker_group.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "kforge/core/eval_doc.h"
#include "protocol/mailbox.h"
#include "protocol/wait.h"
#include "run/worker_spawn.h"

namespace kforge::eval {
namespace {

class WorkerGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < 4; ++r) unsetenv(("KFORGE_WORKER_FAKE_" + std::to_string(r)).c_str());
    unsetenv("KFORGE_PIN_RANKS");
  }
  void TearDown() override { unsetenv("KFORGE_PIN_RANKS"); }
  Result<std::unique_ptr<WorkerGroup>> StartGroup(int world) {
    GroupOptions o;
    o.worker_path = KFORGE_FAKE_WORKER;
    o.world = world;
    o.devices.assign(world, 0);
    o.emulated = true;  // the fake has no NCCL
    o.start_deadline_s = 10;
    return WorkerGroup::Start(o);
  }
  // What each rank of a two-rank group of "affinity" fakes says of its cores.
  Result<std::vector<Message>> AffinityReplies() {
    for (int r = 0; r < 2; ++r)
      setenv(("KFORGE_WORKER_FAKE_" + std::to_string(r)).c_str(), "affinity", 1);
    KF_ASSIGN_OR_RETURN(auto g, StartGroup(2));
    return g->All({{"op", "ping"}}, 5, "test");
  }
};

TEST_F(WorkerGroupTest, AllRanksAnswerInOrder) {
  auto g = StartGroup(3);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto r = (*g)->All({{"op", "ping"}}, 5, "test");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*r)[i].body["rank"], i);
}

TEST_F(WorkerGroupTest, HungRanksAreNamedAndKilledAtTheDeadline) {
  setenv("KFORGE_WORKER_FAKE_1", "hang", 1);
  setenv("KFORGE_WORKER_FAKE_3", "hang", 1);
  auto g = StartGroup(4);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto t0 = std::chrono::steady_clock::now();
  auto r = (*g)->All({{"op", "run"}}, 0.5, "timing");
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kDeadlock);
  EXPECT_EQ((*g)->last_failure().hung_ranks, (std::vector<int>{1, 3}));
  EXPECT_EQ((*g)->last_failure().phase, "timing");
  EXPECT_FALSE((*g)->alive());
  EXPECT_LT(took, 5.0);
}

TEST_F(WorkerGroupTest, CrashNamesTheRankAndSignal) {
  setenv("KFORGE_WORKER_FAKE_2", "crash", 1);
  auto g = StartGroup(3);
  ASSERT_TRUE(g.ok());
  auto r = (*g)->All({{"op", "run"}}, 5, "correctness");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kRuntimeError);
  EXPECT_EQ((*g)->last_failure().rank, 2);
  EXPECT_NE(r.status().message().find("signal 11"), std::string::npos) << r.status().message();
}

TEST_F(WorkerGroupTest, KernelErrorIsReportedFromTheFailingRank) {
  setenv("KFORGE_WORKER_FAKE_0", "error", 1);
  setenv("KFORGE_WORKER_FAKE_1", "hang", 1);  // e.g. stuck in a barrier waiting for rank 0
  auto g = StartGroup(2);
  ASSERT_TRUE(g.ok());
  auto r = (*g)->All({{"op", "run"}}, 30, "correctness");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kRuntimeError);
  EXPECT_EQ((*g)->last_failure().rank, 0);
  EXPECT_NE(r.status().message().find("illegal memory access"), std::string::npos);
}

// Regression: when the coordinator's lowest free descriptors are 3 and 4, the
// control block and the channel must not be swapped or clobbered in the child.
TEST_F(WorkerGroupTest, StartsFromAProcessWithFewOpenDescriptors) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    auto g = StartGroup(2);
    if (!g.ok()) _exit(1);
    auto r = (*g)->All({{"op", "ping"}}, 5, "test");
    _exit(r.ok() ? 0 : 2);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Workers are spawned with a scrubbed environment: credentials the
// coordinator holds never reach them, whatever their names.
TEST_F(WorkerGroupTest, WorkersNeverSeeTheCoordinatorsSecrets) {
  setenv("OPENAI_API_KEY", "sk-test-secret", 1);
  setenv("MY_SERVICE_TOKEN", "t0ken", 1);
  setenv("HOME_GROWN_VARIABLE", "x", 1);
  setenv("KFORGE_WORKER_FAKE_0", "env", 1);
  auto g = StartGroup(1);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  auto r = (*g)->All({{"op", "ping"}}, 5, "test");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> names = (*r)[0].body["env"];
  for (const auto& n : names) {
    EXPECT_NE(n, "OPENAI_API_KEY");
    EXPECT_NE(n, "MY_SERVICE_TOKEN");
    EXPECT_NE(n, "HOME_GROWN_VARIABLE");  // only what CUDA, NCCL and the loader need
  }
  EXPECT_NE(std::find(names.begin(), names.end(), "NCCL_NVLS_ENABLE"), names.end());
  unsetenv("OPENAI_API_KEY");
  unsetenv("MY_SERVICE_TOKEN");
  unsetenv("HOME_GROWN_VARIABLE");
}

// A candidate that floods stdout and stderr with forged verdict lines and
// terminal escapes (the held-out exploit copied 160 MiB of them into
// kforge's output): nothing reaches the coordinator's own descriptors, the
// flood never blocks the rank, and what is kept is bounded, printable and
// says how much was cut.
TEST_F(WorkerGroupTest, ACandidatesFloodedOutputIsCapturedBoundedAndPrintable) {
  setenv("KFORGE_WORKER_FAKE_1", "flood", 1);
  char path[] = "/tmp/kforge-coordinator-stderr-XXXXXX";
  int sink = mkstemp(path);
  ASSERT_GE(sink, 0);
  unlink(path);
  fflush(stdout);
  fflush(stderr);
  int saved_out = dup(1), saved_err = dup(2);
  dup2(sink, 1);
  dup2(sink, 2);
  GroupOptions o;
  o.worker_path = KFORGE_FAKE_WORKER;
  o.world = 2;
  o.devices.assign(2, 0);
  o.emulated = true;
  o.start_deadline_s = 10;
  o.capture_output = true;
  auto g = WorkerGroup::Start(o);
  Result<std::vector<Message>> r = Error(ErrorKind::kHarness, "not started");
  if (g.ok()) r = (*g)->All({{"op", "run"}}, 30, "correctness");
  nlohmann::json captured;
  if (g.ok()) {
    (*g)->Kill();
    captured = (*g)->CapturedOutput();
  }
  fflush(stdout);
  fflush(stderr);
  dup2(saved_out, 1);
  dup2(saved_err, 2);
  close(saved_out);
  close(saved_err);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const off_t leaked = lseek(sink, 0, SEEK_END);
  close(sink);
  EXPECT_EQ(leaked, 0) << "the coordinator's stdout/stderr received the candidate's output";
  ASSERT_EQ(captured.size(), 1u) << captured.dump().substr(0, 400);
  const auto& rank1 = captured[0];
  EXPECT_EQ(rank1["rank"], 1);
  EXPECT_GE(rank1["bytes"].get<uint64_t>(), 24u << 20);
  EXPECT_GT(rank1["cut_bytes"].get<uint64_t>(), 23u << 20);
  const std::string text = rank1["text"].get<std::string>();
  EXPECT_LE(text.size(), 130u << 10);
  EXPECT_NE(text.find("bytes cut of"), std::string::npos);
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find('\r'), std::string::npos);
  EXPECT_EQ(text.find('\a'), std::string::npos);
}

// Whatever a candidate's process claims (a harness error, a cancellation
// nobody asked for, a reply that is not an object, its own exit or a crash),
// its failure is a verdict against it, never a harness_error: an attempt a
// model can make unscored is a free retry (issue 31).
TEST_F(WorkerGroupTest, ACandidatesOwnFailureIsNeverAHarnessError) {
  std::vector<proto::Mailbox> mailboxes;
  for (const char* behaviour : {"claim_harness", "claim_invalid_input", "claim_cancelled",
                                "claim_deadlock", "not_object", "crash"}) {
    SCOPED_TRACE(behaviour);
    setenv("KFORGE_WORKER_FAKE_1", behaviour, 1);
    GroupOptions o;
    o.worker_path = KFORGE_FAKE_WORKER;
    o.role = "candidate";
    o.world = 2;
    o.devices.assign(2, 0);
    o.emulated = true;
    o.start_deadline_s = 10;
    for (int r = 0; r < 2; ++r) {
      auto m = proto::Mailbox::Create();
      ASSERT_TRUE(m.ok());
      o.mailbox_fds.push_back(m->fd());
      mailboxes.push_back(std::move(*m));
    }
    auto g = WorkerGroup::Start(o);
    ASSERT_TRUE(g.ok()) << g.status().ToString();
    auto r = (*g)->All({{"op", "run"}}, 10, "correctness");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kRuntimeError) << r.status().ToString();
    EXPECT_NE(VerdictFor(r.status().kind()), Verdict::kHarnessError);
    EXPECT_EQ((*g)->last_failure().rank, 1);
  }
}

// A harness rank's report that the group it drives did not answer a call is
// the candidate's timeout; anything else a harness rank reports stays a
// harness error.
TEST_F(WorkerGroupTest, AHarnessRankBlamesTheKernelOnlyForWhatTheKernelDid) {
  setenv("KFORGE_WORKER_FAKE_0", "claim_deadlock", 1);
  auto g = StartGroup(2);
  ASSERT_TRUE(g.ok());
  auto r = (*g)->All({{"op", "drive"}}, 10, "timing");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().kind(), ErrorKind::kDeadlock) << r.status().ToString();
  EXPECT_EQ(VerdictFor(r.status().kind()), Verdict::kTimeout);
  setenv("KFORGE_WORKER_FAKE_0", "claim_harness", 1);
  auto h = StartGroup(2);
  ASSERT_TRUE(h.ok());
  auto e = (*h)->All({{"op", "drive"}}, 10, "timing");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().kind(), ErrorKind::kHarness) << e.status().ToString();
  setenv("KFORGE_WORKER_FAKE_0", "claim_cancelled", 1);
  auto c = StartGroup(2);
  ASSERT_TRUE(c.ok());
  auto unprompted = (*c)->All({{"op", "drive"}}, 10, "timing");
  ASSERT_FALSE(unprompted.ok()) << "a cancellation nobody asked for passed as a reply";
  EXPECT_EQ(unprompted.status().kind(), ErrorKind::kHarness);
}

// A harness group driving a candidate group's calls through real mailboxes
// (the fake worker's "drive" and "serve"), as DriveBlock does; `behaviour`
// is the candidate's rank 1.
class DriveTest : public WorkerGroupTest {
 protected:
  static constexpr int kWorld = 2;
  static constexpr int kCalls = 8;

  // Starts the candidate group; false (with a failure recorded) if it did not start.
  bool StartCandidate(const std::string& behaviour) {
    mailboxes_.clear();
    GroupOptions o;
    o.worker_path = KFORGE_FAKE_WORKER;
    o.role = "candidate";
    o.world = kWorld;
    o.devices.assign(kWorld, 0);
    o.emulated = true;
    o.start_deadline_s = 10;
    o.env["KFORGE_WORKER_FAKE_1"] = behaviour;  // the candidate's ranks only
    for (int r = 0; r < kWorld; ++r) {
      auto m = proto::Mailbox::Create();
      EXPECT_TRUE(m.ok());
      if (!m.ok()) return false;
      o.mailbox_fds.push_back(m->fd());
      mailboxes_.push_back(std::move(*m));
    }
    auto g = WorkerGroup::Start(o);
    EXPECT_TRUE(g.ok()) << g.status().ToString();
    if (!g.ok()) return false;
    candidate_ = std::move(g).value();
    return true;
  }

  // Posts the serve, then drives it from `harness` with the served group
  // watched; `took` is how long the harness's wait lasted.
  Result<std::vector<Message>> Drive(WorkerGroup& harness, double call_deadline_s, double* took) {
    const nlohmann::json serve = {{"op", "serve"}, {"calls", kCalls}};
    KF_RETURN_IF_ERROR(candidate_->Post(std::vector<nlohmann::json>(kWorld, serve), {}, "timing"));
    const nlohmann::json drive = {
        {"op", "drive"}, {"calls", kCalls}, {"call_deadline_s", call_deadline_s}};
    std::vector<std::vector<int>> fds;
    for (auto& m : mailboxes_) fds.push_back({m.fd()});
    auto t0 = std::chrono::steady_clock::now();
    auto driven = harness.Each(std::vector<nlohmann::json>(kWorld, drive), fds,
                               /*deadline_s=*/30, "timing", candidate_.get());
    *took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return driven;
  }

  std::vector<proto::Mailbox> mailboxes_;
  std::unique_ptr<WorkerGroup> candidate_;
};

// A candidate process that dies in the middle of the timed calls (a crash,
// an abort), or whose kernel fails a call, ends the harness's wait at once,
// not at the per-call deadline (20 s here, 60 s by default): the candidate's
// runtime error, naming the rank and how it died; the harness group, left
// mid-drive, is killed, and a fresh one drives the next candidate (the
// evaluator's health-check path starts it).
TEST_F(DriveTest, ACandidateThatDiesMidDriveIsReportedAtOnce) {
  for (const auto& [behaviour, signal] :
       {std::pair{"serve_segv", "signal 11"}, std::pair{"serve_abort", "signal 6"},
        std::pair{"serve_error", "cudaErrorIllegalAddress"}}) {
    SCOPED_TRACE(behaviour);
    auto harness = StartGroup(kWorld);
    ASSERT_TRUE(harness.ok()) << harness.status().ToString();
    ASSERT_TRUE(StartCandidate(behaviour));
    double took = 0;
    auto t0 = std::chrono::steady_clock::now();
    auto driven = Drive(**harness, /*call_deadline_s=*/20, &took);
    ASSERT_FALSE(driven.ok());
    EXPECT_EQ(driven.status().kind(), ErrorKind::kCancelled) << driven.status().ToString();
    EXPECT_FALSE((*harness)->alive()) << "a harness group abandoned mid-drive must not be reused";
    const DriveFailure f = JudgeFailedDrive(*candidate_, driven.status(), "timing");
    const double total =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ %s ] the harness's wait ended after %.3f s, the verdict after %.3f s\n",
                behaviour, took, total);
    EXPECT_LT(took, 0.5);
    EXPECT_LT(total, 1.0);
    EXPECT_TRUE(f.served_failed);
    EXPECT_EQ(f.status.kind(), ErrorKind::kRuntimeError) << f.status.ToString();
    EXPECT_NE(VerdictFor(f.status.kind()), Verdict::kHarnessError);
    EXPECT_EQ(candidate_->last_failure().rank, 1);
    EXPECT_EQ(candidate_->last_failure().phase, "timing");
    EXPECT_EQ(candidate_->last_failure().failed_ranks, std::vector<int>{1});
    EXPECT_NE(f.status.message().find(signal), std::string::npos) << f.status.message();
    if (std::string(behaviour) != "serve_error") {  // a kernel's error says only what it is
      EXPECT_NE(f.status.message().find("candidate rank 1"), std::string::npos)
          << f.status.message();
    }
    EXPECT_FALSE(candidate_->alive());

    // The next evaluation: a fresh harness group drives a fresh candidate.
    auto next = StartGroup(kWorld);
    ASSERT_TRUE(next.ok()) << next.status().ToString();
    ASSERT_TRUE(StartCandidate("ok"));
    auto again = Drive(**next, 20, &took);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ((*again)[1].body["calls"], kCalls);
    auto served = candidate_->Collect(5, "timing");
    EXPECT_TRUE(served.ok()) << served.status().ToString();
  }
}

// A candidate that stays alive but does not answer a call still gets the
// harness's own deadline, as before the watch: a timeout, with the harness
// rank that waited named.
TEST_F(DriveTest, ALiveButSilentCandidateStillGetsTheDeadline) {
  auto harness = StartGroup(kWorld);
  ASSERT_TRUE(harness.ok()) << harness.status().ToString();
  ASSERT_TRUE(StartCandidate("serve_hang"));
  double took = 0;
  auto driven = Drive(**harness, /*call_deadline_s=*/0.5, &took);
  ASSERT_FALSE(driven.ok());
  EXPECT_EQ(driven.status().kind(), ErrorKind::kDeadlock) << driven.status().ToString();
  EXPECT_GE(took, 0.5);
  EXPECT_LT(took, 5.0);
  EXPECT_EQ(candidate_->ExitedRank(), -1);
  const DriveFailure f = JudgeFailedDrive(*candidate_, driven.status(), "timing");
  EXPECT_FALSE(f.served_failed);
  EXPECT_EQ(f.status.kind(), ErrorKind::kDeadlock);
  EXPECT_EQ(VerdictFor(f.status.kind()), Verdict::kTimeout);
  EXPECT_EQ((*harness)->last_failure().rank, 1);
  EXPECT_FALSE(candidate_->alive());
}

// The harness's own failure while the candidate is alive and idle stays
// the harness's: the candidate is heard for a second and has nothing to say.
TEST_F(DriveTest, TheHarnesssOwnFailureIsNotPinnedOnALiveCandidate) {
  setenv("KFORGE_WORKER_FAKE_0", "drive_harness_error", 1);
  auto harness = StartGroup(kWorld);
  unsetenv("KFORGE_WORKER_FAKE_0");
  ASSERT_TRUE(harness.ok()) << harness.status().ToString();
  ASSERT_TRUE(StartCandidate("ok"));
  double took = 0;
  auto driven = Drive(**harness, 5, &took);
  ASSERT_FALSE(driven.ok());
  EXPECT_EQ(driven.status().kind(), ErrorKind::kHarness) << driven.status().ToString();
  const DriveFailure f = JudgeFailedDrive(*candidate_, driven.status(), "timing");
  EXPECT_FALSE(f.served_failed);
  EXPECT_EQ(f.status.kind(), ErrorKind::kHarness) << f.status.ToString();
  EXPECT_EQ(VerdictFor(f.status.kind()), Verdict::kHarnessError);
  EXPECT_FALSE(candidate_->alive());
}

// Nothing exits and every call is answered: the watch changes nothing.
TEST_F(DriveTest, AnHonestCandidateIsDrivenToTheEnd) {
  auto harness = StartGroup(kWorld);
  ASSERT_TRUE(harness.ok()) << harness.status().ToString();
  ASSERT_TRUE(StartCandidate("ok"));
  double took = 0;
  auto driven = Drive(**harness, 5, &took);
  ASSERT_TRUE(driven.ok()) << driven.status().ToString();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ((*driven)[r].body["calls"], kCalls);
  EXPECT_TRUE((*harness)->alive());
  auto served = candidate_->Collect(5, "timing");
  EXPECT_TRUE(served.ok()) << served.status().ToString();
}

TEST_F(WorkerGroupTest, MissingWorkerBinaryIsAClearError) {
  GroupOptions o;
  o.worker_path = "/nonexistent/kforge-worker";
  o.world = 2;
  o.devices = {0, 0};
  auto g = WorkerGroup::Start(o);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().kind(), ErrorKind::kNotFound);
}

// How many times the fake workers wrote to `path` (one line a start).
int Starts(const std::string& path) {
  std::ifstream in(path);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// KFORGE_PIN_RANKS=1: rank r of every group on the r-th block of the cores,
// the blocks disjoint and together every core; the spin decision is told
// the cores of every rank.
TEST_F(WorkerGroupTest, PinnedRanksRunOnDisjointBlocksOfTheCores) {
  const int cores = proto::UsableCpus();
  EXPECT_FALSE(PinnedCpus(2, 0).has_value());  // off unless asked
  setenv("KFORGE_PIN_RANKS", "1", 1);
  EXPECT_FALSE(PinnedCpus(cores + 1, 0).has_value());  // more ranks than cores: not pinned
  if (cores < 2) GTEST_SKIP() << "one core: two ranks cannot be pinned apart";
  std::vector<int> every;
  for (int r = 0; r < 2; ++r) {
    auto pinned = PinnedCpus(2, r);
    ASSERT_TRUE(pinned.has_value());
    EXPECT_EQ(pinned->all, cores);
    EXPECT_EQ(static_cast<int>(pinned->cpus.size()), (r + 1) * cores / 2 - r * cores / 2);
    every.insert(every.end(), pinned->cpus.begin(), pinned->cpus.end());
  }
  std::sort(every.begin(), every.end());
  EXPECT_EQ(std::adjacent_find(every.begin(), every.end()), every.end());  // disjoint
  EXPECT_EQ(static_cast<int>(every.size()), cores);

  auto replies = AffinityReplies();
  ASSERT_TRUE(replies.ok()) << replies.status().ToString();
  for (int r = 0; r < 2; ++r) {
    const auto& body = (*replies)[r].body;
    EXPECT_EQ(body["cpus"].get<std::vector<int>>(), PinnedCpus(2, r)->cpus) << "rank " << r;
    EXPECT_EQ(body["spin_cpus"].get<int>(), cores);
  }
}

TEST_F(WorkerGroupTest, UnpinnedRanksKeepEveryCore) {
  auto replies = AffinityReplies();
  ASSERT_TRUE(replies.ok()) << replies.status().ToString();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(static_cast<int>((*replies)[r].body["cpus"].size()), proto::UsableCpus());
    EXPECT_EQ((*replies)[r].body["spin_cpus"].get<int>(), 0);
  }
}

class StartRetryTest : public WorkerGroupTest {
 protected:
  void TearDown() override {
    WorkerGroupTest::TearDown();
    std::remove(starts_.c_str());
  }
  std::string starts_ = ::testing::TempDir() + "kforge-starts-" + std::to_string(getpid());
};

// After a client's fatal fault the GPU's MPS server is replaced, and a group
// started meanwhile is refused: it is started again once the server is back.
TEST_F(StartRetryTest, AGroupRefusedByAnMpsServerNotReadyIsStartedAgain) {
  setenv("KFORGE_WORKER_FAKE_1", ("mps_not_ready:2:" + starts_).c_str(), 1);
  auto t0 = std::chrono::steady_clock::now();
  auto g = StartGroup(2);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(Starts(starts_), 3);  // refused twice, then started
  EXPECT_GE(took, 0.2 + 0.4);
  auto r = (*g)->All({{"op", "ping"}}, 5, "test");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
}

TEST_F(StartRetryTest, AServerThatStaysNotReadyFailsTheStartAfterFourRetries) {
  setenv("KFORGE_WORKER_FAKE_0", ("mps_not_ready:100:" + starts_).c_str(), 1);
  auto g = StartGroup(2);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(Starts(starts_), 5);
  EXPECT_NE(g.status().message().find("cudaErrorMpsServerNotReady"), std::string::npos)
      << g.status().message();
  EXPECT_NE(g.status().message().find("rank 0"), std::string::npos) << g.status().message();
}

TEST_F(StartRetryTest, AnyOtherStartFailureIsReturnedAtOnce) {
  setenv("KFORGE_WORKER_FAKE_0", ("no_device:" + starts_).c_str(), 1);
  auto g = StartGroup(2);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(Starts(starts_), 1);
  EXPECT_NE(g.status().message().find("cudaErrorNoDevice"), std::string::npos)
      << g.status().message();
}

}  // namespace
}  // namespace kforge::eval
