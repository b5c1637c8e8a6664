// Crash safety and reader/writer isolation of the run store.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "kforge/results/store.h"
#include "test_util.h"

namespace kforge::results {
namespace {

using testing::TempDir;

TurnRecord MakeTurn(int64_t session_id, int index) {
  TurnRecord t;
  t.session_id = session_id;
  t.index = index;
  t.prompt = "prompt " + std::to_string(index);
  t.reply = std::string(2000, 'r') + std::to_string(index);
  t.usage.output_tokens = index;
  return t;
}

// A reader holding an open read transaction (as a web page render does) must
// not block the writer, and keeps seeing its snapshot until it ends.
TEST(RunStoreConcurrencyTest, ReaderNeverBlocksWriter) {
  TempDir tmp;
  auto store = RunStore::Open(tmp.path());
  ASSERT_OK(store);
  auto run = (*store)->CreateOrGetRun("r", {}, "v", "h", {});
  ASSERT_OK(run);
  auto sid = (*store)->UpsertSession(run->id, {"m", "t", "s", 0, 2, "f32", ""});
  ASSERT_OK(sid);
  ASSERT_OK((*store)->AppendTurn(MakeTurn(*sid, 0)));

  sqlite3* reader = nullptr;
  ASSERT_EQ(sqlite3_open_v2(StorePath(tmp.path()).c_str(), &reader, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  auto count = [&] {
    sqlite3_stmt* q = nullptr;
    sqlite3_prepare_v2(reader, "SELECT count(*) FROM turns", -1, &q, nullptr);
    int n = sqlite3_step(q) == SQLITE_ROW ? sqlite3_column_int(q, 0) : -1;
    sqlite3_finalize(q);
    return n;
  };
  ASSERT_EQ(sqlite3_exec(reader, "BEGIN", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_EQ(count(), 1);  // the read transaction's snapshot starts here

  const auto start = std::chrono::steady_clock::now();
  for (int i = 1; i <= 20; ++i) ASSERT_OK((*store)->AppendTurn(MakeTurn(*sid, i)));
  const double writer_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // Under a rollback journal the writer would wait out the 10 s busy timeout.
  EXPECT_LT(writer_s, 5.0);
  EXPECT_EQ(count(), 1) << "the reader keeps its snapshot";
  ASSERT_EQ(sqlite3_exec(reader, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  EXPECT_EQ(count(), 21);
  sqlite3_close(reader);
}

// Readers in another handle polling while a writer appends always see a
// consistent, growing store.
TEST(RunStoreConcurrencyTest, ConcurrentReaderSeesMonotonicProgress) {
  TempDir tmp;
  auto store = RunStore::Open(tmp.path());
  ASSERT_OK(store);
  auto run = (*store)->CreateOrGetRun("r", {}, "v", "h", {});
  ASSERT_OK(run);
  auto sid = (*store)->UpsertSession(run->id, {"m", "t", "s", 0, 2, "f32", ""});
  ASSERT_OK(sid);
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::atomic<bool> reader_ok{true};
  std::thread reader([&] {
    auto ro = RunStore::Open(tmp.path(), true);
    if (!ro.ok()) {
      reader_ok = false;
      return;
    }
    size_t last = 0;
    while (!done.load()) {
      auto turns = (*ro)->ListTurns(*sid);
      if (!turns.ok() || turns->size() < last) {
        reader_ok = false;
        return;
      }
      for (size_t i = 0; i < turns->size(); ++i) {
        if ((*turns)[i].index != static_cast<int>(i)) reader_ok = false;
      }
      last = turns->size();
      ++reads;
    }
  });
  for (int i = 0; i < 40; ++i) ASSERT_OK((*store)->AppendTurn(MakeTurn(*sid, i)));
  // Let the reader observe the final state at least once.
  while (reads.load() < 2) std::this_thread::yield();
  done = true;
  reader.join();
  EXPECT_TRUE(reader_ok.load());
}

// kill -9 in the middle of writing never loses a row whose commit returned.
TEST(RunStoreConcurrencyTest, KillNineKeepsEveryCommittedRow) {
  TempDir tmp;
  int64_t sid = 0;
  {
    auto store = RunStore::Open(tmp.path());
    ASSERT_OK(store);
    auto run = (*store)->CreateOrGetRun("r", {}, "v", "h", {});
    ASSERT_OK(run);
    auto s = (*store)->UpsertSession(run->id, {"m", "t", "s", 0, 2, "f32", ""});
    ASSERT_OK(s);
    sid = *s;
  }
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    auto store = RunStore::Open(tmp.path());
    if (!store.ok()) _exit(2);
    for (int i = 0;; ++i) {
      auto id = (*store)->AppendTurn(MakeTurn(sid, i));
      if (!id.ok()) _exit(3);
      const int64_t committed = *id;
      // One 8-byte write is atomic on a pipe, so the parent never sees half an id.
      if (write(fds[1], &committed, sizeof committed) != sizeof committed) _exit(4);
    }
  }
  close(fds[1]);
  std::set<int64_t> reported;
  int64_t id = 0;
  while (reported.size() < 60 && read(fds[0], &id, sizeof id) == sizeof id) reported.insert(id);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the writer died on its own: status " << wstatus;
  while (read(fds[0], &id, sizeof id) == sizeof id) reported.insert(id);
  close(fds[0]);
  ASSERT_GE(reported.size(), 60u);

  auto store = RunStore::Open(tmp.path());
  ASSERT_OK(store);
  ASSERT_STATUS_OK((*store)->CheckIntegrity());
  auto turns = (*store)->ListTurns(sid);
  ASSERT_OK(turns);
  std::set<int64_t> present;
  for (const auto& t : *turns) present.insert(t.id);
  for (int64_t r : reported) EXPECT_TRUE(present.count(r)) << "committed turn " << r << " lost";
  auto session = (*store)->GetSession(sid);
  ASSERT_OK(session);
  EXPECT_EQ(session->turns_done, static_cast<int>(turns->size()))
      << "turn rows and counter commit together";
  // The store keeps working after the crash.
  ASSERT_OK((*store)->AppendTurn(MakeTurn(sid, static_cast<int>(turns->size()) + 1000)));
}

// Two processes creating the same run directory at once (two `kforge run`
// started in the same second under one made-up name): exactly one gets the
// store, the other is told a store is there, and the winner's run is the only
// one in it.
TEST(RunStoreConcurrencyTest, OfTwoConcurrentCreatorsExactlyOneWins) {
  TempDir tmp;
  for (int round = 0; round < 10; ++round) {
    const std::filesystem::path dir = tmp.path() / ("run-" + std::to_string(round));
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    pid_t children[2];
    for (int c = 0; c < 2; ++c) {
      children[c] = fork();
      ASSERT_GE(children[c], 0);
      if (children[c] == 0) {
        close(go[1]);
        char byte;
        if (read(go[0], &byte, 1) != 0) _exit(9);  // released when the parent closes
        auto store = RunStore::Create(dir);
        if (!store.ok()) _exit(store.status().kind() == ErrorKind::kInvalidInput ? 1 : 2);
        auto run = (*store)->CreateOrGetRun("creator-" + std::to_string(c), {}, "v", "h", {});
        _exit(run.ok() ? 0 : 3);
      }
    }
    close(go[0]);
    close(go[1]);  // both children start now
    int codes[2];
    for (int c = 0; c < 2; ++c) {
      int wstatus = 0;
      ASSERT_EQ(waitpid(children[c], &wstatus, 0), children[c]);
      ASSERT_TRUE(WIFEXITED(wstatus));
      codes[c] = WEXITSTATUS(wstatus);
    }
    std::multiset<int> got(codes, codes + 2);
    EXPECT_EQ(got, (std::multiset<int>{0, 1})) << "round " << round;
    auto store = RunStore::Open(dir, true);
    ASSERT_OK(store);
    auto runs = (*store)->ListRuns();
    ASSERT_OK(runs);
    EXPECT_EQ(runs->size(), 1u) << "two creators wrote into one store";
  }
  auto again = RunStore::Create(tmp.path() / "run-0");
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(again.status().message().find("already holds a run store"), std::string::npos);
  EXPECT_TRUE(RunStore::Create(tmp.path() / "fresh").ok()) << "a new directory is created";
}

}  // namespace
}  // namespace kforge::results
