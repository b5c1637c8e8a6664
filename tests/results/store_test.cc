#include "kforge/results/store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <fstream>
#include <map>
#include <thread>

#include "kforge/core/hash.h"
#include "kforge/results/fixture.h"
#include "kforge/results/samples.h"
#include "store/schema.h"
#include "store/sqlite_db.h"
#include "test_util.h"

namespace kforge::results {
namespace {

using testing::TempDir;

nlohmann::json PassedDoc(double speedup, bool emulated = false) {
  return {{"schema", "kforge.eval/1"},
          {"status", "passed"},
          {"speedup", speedup},
          {"emulated", emulated},
          {"world", 4},
          {"seconds", 2.5},
          {"message", "ok"},
          {"timing",
           {{{"bytes", 1024}, {"busbw_gbps", 10.0}}, {{"bytes", 1 << 20}, {"busbw_gbps", 55.5}}}}};
}

TEST(RunStoreTest, RoundTripsRunsSessionsTurnsAndEvaluations) {
  TempDir tmp;
  auto store = RunStore::Open(tmp.path() / "r1");
  ASSERT_OK(store);
  auto& s = **store;
  EXPECT_EQ(s.schema_version(), kSchemaVersion);
  auto run = s.CreateOrGetRun("r1", {{"models", {"m"}}}, "0.1.0", "suitehash", {{"gpu", "H200"}});
  ASSERT_OK(run);
  EXPECT_EQ(run->state, "running");
  EXPECT_EQ(run->hardware["gpu"], "H200");

  SessionKey key{"m", "001_allreduce", "refine", 0, 4, "bf16", "collective"};
  auto sid = s.UpsertSession(run->id, key);
  ASSERT_OK(sid);
  auto again = s.UpsertSession(run->id, key);
  ASSERT_OK(again);
  EXPECT_EQ(*sid, *again) << "UpsertSession must be idempotent";

  TurnRecord t;
  t.session_id = *sid;
  t.prompt = "write a kernel";
  t.reply = "```cuda\n...```";
  t.kernel = "__global__ void k() {}\n";
  t.usage.input_tokens = 100;
  t.usage.output_tokens = 50;
  t.usage.cost_usd = 0.25;
  auto tid = s.AppendTurn(t);
  ASSERT_OK(tid);
  auto dup = s.AppendTurn(t);
  EXPECT_FALSE(dup.ok());
  EXPECT_EQ(dup.status().kind(), ErrorKind::kInvalidInput);
  ASSERT_STATUS_OK(s.SetTurnFeedback(*tid, "passed; try vector loads"));

  auto eid = s.RecordEvaluation(*sid, *tid, PassedDoc(1.3));
  ASSERT_OK(eid);
  ASSERT_STATUS_OK(s.SetBestEvaluation(*sid, *eid));
  ASSERT_STATUS_OK(s.SetSessionState(*sid, "done", "solved"));
  ASSERT_STATUS_OK(s.AppendEvent(run->id, "session_done", {{"session", *sid}}));
  ASSERT_STATUS_OK(s.FinishRun(run->id, "done"));

  auto sessions = s.ListSessions(run->id);
  ASSERT_OK(sessions);
  ASSERT_EQ(sessions->size(), 1u);
  const SessionRecord& rec = (*sessions)[0];
  EXPECT_EQ(rec.key.category, "collective");
  EXPECT_EQ(rec.state, "done");
  EXPECT_EQ(rec.stop_reason, "solved");
  EXPECT_EQ(rec.turns_done, 1);
  EXPECT_EQ(rec.best_evaluation_id, *eid);

  auto turns = s.ListTurns(*sid);
  ASSERT_OK(turns);
  ASSERT_EQ(turns->size(), 1u);
  EXPECT_EQ((*turns)[0].prompt, "write a kernel");
  EXPECT_EQ((*turns)[0].feedback, "passed; try vector loads");
  EXPECT_EQ((*turns)[0].usage.input_tokens, 100);
  EXPECT_EQ((*turns)[0].kernel, "__global__ void k() {}\n");
  EXPECT_EQ((*turns)[0].kernel_sha, Sha256Hex("__global__ void k() {}\n")) << "stored as a blob";
  auto kernel = s.GetBlob((*turns)[0].kernel_sha);
  ASSERT_OK(kernel);
  EXPECT_EQ(*kernel, t.kernel);

  auto evals = s.ListEvaluations(*sid);
  ASSERT_OK(evals);
  ASSERT_EQ(evals->size(), 1u);
  EXPECT_EQ((*evals)[0].verdict, Verdict::kPassed);
  EXPECT_DOUBLE_EQ(*(*evals)[0].speedup, 1.3);
  EXPECT_DOUBLE_EQ(*(*evals)[0].busbw_gbps, 55.5) << "busbw comes from the largest bench size";
  EXPECT_EQ((*evals)[0].world, 4);
  auto doc = s.GetEvaluationDoc((*evals)[0]);
  ASSERT_OK(doc);
  EXPECT_EQ((*doc)["timing"].size(), 2u);

  auto events = s.ListEvents(run->id);
  ASSERT_OK(events);
  ASSERT_EQ(events->size(), 1u);
  EXPECT_EQ((*events)[0].kind, "session_done");
  ASSERT_STATUS_OK(s.CheckIntegrity());
}

// A turn with every field set comes back equal: a new TurnRecord field is
// written where the store binds and reads it, and nowhere in between. The
// structured binding stops compiling when a field is added, so that the
// field is set here too.
TEST(RunStoreTest, ATurnWithEveryFieldSetRoundTrips) {
  TempDir tmp;
  auto store = RunStore::Open(tmp.path());
  ASSERT_OK(store);
  auto& s = **store;
  auto run = s.CreateOrGetRun("r", {}, "v", "suite", {});
  ASSERT_OK(run);
  auto sid = s.UpsertSession(run->id, {"m", "t", "s", 0, 2, "f32", ""});
  ASSERT_OK(sid);

  TurnRecord want;
  want.session_id = *sid;
  want.index = 3;
  want.prompt = "write a kernel";
  want.reply = "```cuda\n__global__ void k() {}\n```";
  want.feedback = "mismatch at rank 1";
  want.kernel = "__global__ void k() {}\n";
  want.kernel_sha = "ignored: the store hashes the kernel";
  want.usage = {1200, 300, 800, 250, 0.0375, true};
  want.latency_s = 12.25;
  want.request_id = "req-42";
  want.finish_reason = "length";
  want.created_at = 1.7e9 + 0.5;
  [[maybe_unused]] const auto& [id, session_id, index, prompt, reply, feedback, kernel, kernel_sha,
                                usage, latency_s, request_id, finish_reason, created_at] = want;
  [[maybe_unused]] const auto& [input_tokens, cached_input_tokens, output_tokens, reasoning_tokens,
                                cost_usd, priced] = want.usage;

  auto tid = s.AppendTurn(want);
  ASSERT_OK(tid);
  auto turns = s.ListTurns(*sid);
  ASSERT_OK(turns);
  ASSERT_EQ(turns->size(), 1u);
  want.id = *tid;
  want.kernel_sha = Sha256Hex(want.kernel);
  EXPECT_EQ((*turns)[0], want);
}

TEST(RunStoreTest, RejectsBadInputWithoutLosingData) {
  TempDir tmp;
  auto store = RunStore::Open(tmp.path());
  ASSERT_OK(store);
  auto& s = **store;
  auto run = s.CreateOrGetRun("r", {}, "v", "h", {});
  ASSERT_OK(run);
  auto sid = s.UpsertSession(run->id, {"m", "t", "s", 0, 2, "f32", ""});
  ASSERT_OK(sid);
  ASSERT_OK(s.RecordEvaluation(*sid, 0, PassedDoc(2.0)));

  auto no_status = s.RecordEvaluation(*sid, 0, {{"schema", "kforge.eval/1"}});
  ASSERT_FALSE(no_status.ok());
  EXPECT_NE(no_status.status().message().find("\"status\""), std::string::npos)
      << no_status.status().message();
  auto wrong_schema = s.RecordEvaluation(*sid, 0, {{"schema", "other/9"}, {"status", "passed"}});
  ASSERT_FALSE(wrong_schema.ok());
  EXPECT_NE(wrong_schema.status().message().find("schema"), std::string::npos);
  EXPECT_FALSE(s.RecordEvaluation(9999, 0, PassedDoc(1.0)).ok()) << "unknown session";
  TurnRecord bad;
  bad.session_id = 9999;
  bad.kernel = "__global__ void k() {}";
  EXPECT_FALSE(s.AppendTurn(bad).ok()) << "unknown session";
  EXPECT_FALSE(s.SetBestEvaluation(*sid, 12345).ok());
  // A failed speedup is not trusted even if present.
  auto failed = s.RecordEvaluation(*sid, 0, {{"status", "mismatch"}, {"speedup", 3.0}});
  ASSERT_OK(failed);

  auto evals = s.ListEvaluations(*sid);
  ASSERT_OK(evals);
  ASSERT_EQ(evals->size(), 2u);
  EXPECT_EQ((*evals)[0].verdict, Verdict::kPassed);
  EXPECT_FALSE((*evals)[1].speedup.has_value());
}

TEST(RunStoreTest, DetectsCorruptBlob) {
  TempDir tmp;
  auto store = RunStore::Open(tmp.path());
  ASSERT_OK(store);
  auto sha = (*store)->PutBlob("hello");
  ASSERT_OK(sha);
  const auto path = tmp.path() / "blobs" / sha->substr(0, 2) / *sha;
  ASSERT_STATUS_OK(WriteFileAtomic(path, "HELLO"));
  auto back = (*store)->GetBlob(*sha);
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("corrupt"), std::string::npos);
  EXPECT_FALSE((*store)->GetBlob("../../etc/passwd").ok());
}

TEST(RunStoreTest, ReadOnlyOpenOfMissingStoreIsNotFound) {
  TempDir tmp;
  auto store = RunStore::Open(tmp.path() / "nope", /*read_only=*/true);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().kind(), ErrorKind::kNotFound);
}

// A store written by the previous schema version opens, migrates, and keeps
// every row; the new columns are backfilled from the stored documents.
TEST(RunStoreMigrationTest, MigratesVersionOneStore) {
  TempDir tmp;
  const auto dir = tmp.path();
  ASSERT_STATUS_OK(MakeDirs(dir / "blobs"));
  const std::string doc = PassedDoc(1.5).dump();
  const std::string doc_sha = Sha256Hex(doc);
  ASSERT_STATUS_OK(WriteFileAtomic(dir / "blobs" / doc_sha.substr(0, 2) / doc_sha, doc));
  const std::string empty_sha = Sha256Hex("");
  ASSERT_STATUS_OK(WriteFileAtomic(dir / "blobs" / empty_sha.substr(0, 2) / empty_sha, ""));
  {
    auto db = internal::Db::Open(StorePath(dir), false);
    ASSERT_OK(db);
    ASSERT_STATUS_OK(internal::MigrateTo(**db, 1, [](const std::string&) -> Result<std::string> {
      return Error(ErrorKind::kNotFound, "unused");
    }));
    auto v = internal::SchemaVersion(**db);
    ASSERT_OK(v);
    ASSERT_EQ(*v, 1);
    ASSERT_STATUS_OK(
        (*db)->Exec("INSERT INTO runs (id, name, state) VALUES (1, 'old', 'done');"
                    "INSERT INTO sessions (id, run_id, model, task, strategy, sample, world, "
                    "dtype, state, best_evaluation_id) "
                    "  VALUES (1, 1, 'm', 't', 's', 0, 4, 'bf16', 'done', 1);"
                    "INSERT INTO turns (session_id, idx, prompt_sha, reply_sha) VALUES (1, 0, '" +
                    empty_sha + "', '" + empty_sha +
                    "');"
                    "INSERT INTO evaluations (id, session_id, turn_id, status, speedup, doc_sha) "
                    "VALUES (1, 1, 1, 'passed', 1.5, '" +
                    doc_sha + "');"));
  }
  // Read-only openers refuse to work on an old layout rather than misread it.
  auto ro = RunStore::Open(dir, true);
  ASSERT_FALSE(ro.ok());
  EXPECT_NE(ro.status().message().find("old schema version 1"), std::string::npos)
      << ro.status().message();

  auto store = RunStore::Open(dir);
  ASSERT_OK(store);
  EXPECT_EQ((*store)->schema_version(), kSchemaVersion);
  auto runs = (*store)->ListRuns();
  ASSERT_OK(runs);
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].name, "old");
  auto sessions = (*store)->ListSessions(1);
  ASSERT_OK(sessions);
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_EQ((*sessions)[0].key.category, "");
  EXPECT_EQ((*sessions)[0].best_evaluation_id, 1);
  auto evals = (*store)->ListEvaluations(1);
  ASSERT_OK(evals);
  ASSERT_EQ(evals->size(), 1u);
  EXPECT_DOUBLE_EQ(*(*evals)[0].speedup, 1.5);
  ASSERT_TRUE((*evals)[0].busbw_gbps.has_value()) << "v2 backfills busbw from the document";
  EXPECT_DOUBLE_EQ(*(*evals)[0].busbw_gbps, 55.5);
  EXPECT_EQ((*evals)[0].world, 4);
  auto turns = (*store)->ListTurns(1);
  ASSERT_OK(turns);
  EXPECT_EQ(turns->size(), 1u);
  // New writes work on the migrated store.
  ASSERT_OK((*store)->UpsertSession(1, {"m2", "t", "s", 0, 4, "bf16", "cat"}));
  ASSERT_STATUS_OK((*store)->CheckIntegrity());
}

TEST(RunStoreMigrationTest, RefusesNewerSchema) {
  TempDir tmp;
  ASSERT_OK(RunStore::Open(tmp.path()));
  {
    auto db = internal::Db::Open(StorePath(tmp.path()), false);
    ASSERT_OK(db);
    ASSERT_STATUS_OK((*db)->Exec("PRAGMA user_version = 99"));
  }
  auto store = RunStore::Open(tmp.path());
  ASSERT_FALSE(store.ok());
  EXPECT_NE(store.status().message().find("schema version 99"), std::string::npos);
}

}  // namespace
}  // namespace kforge::results

namespace kforge::results {
namespace {

// A damaged store said "step: database disk image is malformed" and a 0-byte
// one "old schema version 0; open it once for writing": name the file and
// say what is wrong.
TEST(StoreDamageTest, EmptyAndTruncatedStoresAreNamed) {
  testing::TempDir tmp;
  const auto empty = tmp.path() / "empty";
  std::filesystem::create_directories(empty);
  { std::ofstream(StorePath(empty)); }
  auto e = RunStore::Open(empty, true);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find(StorePath(empty).string()), std::string::npos);
  EXPECT_NE(e.status().message().find("holds no kforge run store"), std::string::npos)
      << e.status().message();

  const auto cut = tmp.path() / "cut";
  {
    auto store = RunStore::Open(cut);
    ASSERT_OK(store);
    auto run = (*store)->CreateOrGetRun("cut", {}, "v", "", {});
    ASSERT_OK(run);
    for (int i = 0; i < 200; ++i) {
      auto sid = (*store)->UpsertSession(
          run->id, {"m", "t" + std::to_string(i), "s", 0, 2, "bf16", std::string(300, 'c')});
      ASSERT_OK(sid);
    }
  }
  std::filesystem::remove(cut / "store.sqlite-wal");
  std::filesystem::remove(cut / "store.sqlite-shm");
  const auto size = std::filesystem::file_size(StorePath(cut));
  std::filesystem::resize_file(StorePath(cut), size / 3);
  auto samples = LoadRunDirs({cut});
  ASSERT_FALSE(samples.ok());
  EXPECT_NE(samples.status().message().find(StorePath(cut).string()), std::string::npos)
      << samples.status().message();
  EXPECT_EQ(samples.status().message().find("step:"), std::string::npos)
      << samples.status().message();
}

// The SQL views (schema v3) agree with the C++ readers on every session of a
// fixture run: outcome, best evaluation and cost.
TEST(StoreViewsTest, ViewsAgreeWithTheSampleReader) {
  TempDir tmp;
  FixtureSpec spec;
  spec.tasks = 4;
  spec.finished = false;  // some sessions pending
  ASSERT_STATUS_OK(WriteFixtureRun(tmp.path(), spec));
  auto store = RunStore::Open(tmp.path(), true);
  ASSERT_OK(store);
  auto samples = LoadSamples(**store);
  ASSERT_OK(samples);
  ASSERT_FALSE(samples->empty());

  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(StorePath(tmp.path()).c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  auto one_row = [&](const std::string& sql, int64_t id) -> std::vector<std::string> {
    sqlite3_stmt* st = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr), SQLITE_OK)
        << sqlite3_errmsg(db);
    sqlite3_bind_int64(st, 1, id);
    std::vector<std::string> row;
    if (sqlite3_step(st) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(st); ++c) {
        const unsigned char* t = sqlite3_column_text(st, c);
        row.push_back(t ? reinterpret_cast<const char*>(t) : "NULL");
      }
    }
    sqlite3_finalize(st);
    return row;
  };
  int solved = 0, not_evaluated = 0;
  double cost = 0;
  for (const auto& o : *samples) {
    auto row = one_row("SELECT outcome, cost_usd FROM session_outcomes WHERE session_id = ?",
                       o.session_id);
    ASSERT_EQ(row.size(), 2u) << o.session_id;
    const std::string expected = o.correct         ? "solved"
                                 : o.not_evaluated ? "not_evaluated"
                                                   : "unsolved";
    EXPECT_EQ(row[0], expected) << "session " << o.session_id << " status "
                                << (o.verdict ? VerdictName(*o.verdict) : "none");
    EXPECT_NEAR(std::stod(row[1]), o.cost_usd, 1e-9);
    solved += o.correct;
    not_evaluated += o.not_evaluated;
    cost += o.cost_usd;
    if (o.best_evaluation_id) {
      auto best = one_row("SELECT evaluation_id, status FROM best_evaluations WHERE session_id = ?",
                          o.session_id);
      ASSERT_EQ(best.size(), 2u);
      EXPECT_EQ(best[0], std::to_string(o.best_evaluation_id)) << o.session_id;
      ASSERT_TRUE(o.verdict);
      EXPECT_EQ(best[1], VerdictName(*o.verdict));
    }
  }
  EXPECT_GT(solved, 0);
  // task_costs adds up per (model, task, ...) what the sessions spent and solved.
  auto totals = one_row(
      "SELECT SUM(solved), SUM(cost_usd), SUM(usd_per_solved IS NULL AND solved > 0) FROM "
      "task_costs WHERE ?1 = ?1",
      0);
  ASSERT_EQ(totals.size(), 3u);
  EXPECT_EQ(totals[0], std::to_string(solved));
  EXPECT_GE(std::stod(totals[1]), cost - 1e-9);  // pending sessions may have spent too
  EXPECT_EQ(totals[2], "0");
  auto pending =
      one_row("SELECT COUNT(*) FROM session_outcomes WHERE outcome = 'pending' AND ?1 = ?1", 0);
  ASSERT_EQ(pending.size(), 1u);
  sqlite3_close(db);
}

// PRAGMA foreign_keys=ON on every connection: the declared references hold.
// One finished session per verdict, each with one kernel and one evaluation:
// the sample reader and the session_outcomes view agree, a kernel rejected
// for breaking the sandbox counts as a wrong answer (not "not evaluated"),
// and only compiled / harness_error leave a session unjudged.
TEST(StoreViewsTest, EveryVerdictCountsAsTheSampleReaderSays) {
  TempDir tmp;
  std::map<int64_t, Verdict> by_session;
  {
    auto store = RunStore::Open(tmp.path());
    ASSERT_OK(store);
    auto& s = **store;
    auto run = s.CreateOrGetRun("verdicts", {}, "v", "h", {});
    ASSERT_OK(run);
    int sample = 0;
    for (Verdict v : kAllVerdicts) {
      auto sid = s.UpsertSession(run->id, {"m", "001_allreduce", "s", sample++, 2, "f32", "c"});
      ASSERT_OK(sid);
      TurnRecord t;
      t.session_id = *sid;
      t.kernel = "__global__ void k" + std::to_string(sample) + "() {}\n";
      auto tid = s.AppendTurn(t);
      ASSERT_OK(tid);
      nlohmann::json doc = {{"schema", kEvalSchema}, {"status", VerdictName(v)}};
      if (v == Verdict::kPassed) doc["speedup"] = 1.2;
      ASSERT_OK(s.RecordEvaluation(*sid, *tid, doc));
      ASSERT_STATUS_OK(s.SetSessionState(*sid, "done", "turn budget"));
      by_session[*sid] = v;
    }
  }
  auto store = RunStore::Open(tmp.path(), true);
  ASSERT_OK(store);
  auto samples = LoadSamples(**store);
  ASSERT_OK(samples);
  ASSERT_EQ(samples->size(), std::size(kAllVerdicts));
  auto db = internal::Db::Open(StorePath(tmp.path()), true);
  ASSERT_OK(db);
  for (const auto& o : *samples) {
    const Verdict v = by_session.at(o.session_id);
    SCOPED_TRACE(std::string(VerdictName(v)));
    ASSERT_TRUE(o.verdict);
    EXPECT_EQ(*o.verdict, v);
    EXPECT_EQ(o.correct, v == Verdict::kPassed);
    EXPECT_EQ(o.not_evaluated, !JudgesTheKernel(v));
    auto q = (*db)->Prepare("SELECT outcome FROM session_outcomes WHERE session_id = ?");
    ASSERT_OK(q);
    q->Bind(1, o.session_id);
    auto row = q->Step();
    ASSERT_OK(row);
    ASSERT_TRUE(*row);
    EXPECT_EQ(q->Text(0), o.correct ? "solved" : o.not_evaluated ? "not_evaluated" : "unsolved");
  }
}

TEST(StoreViewsTest, ForeignKeysAreEnforced) {
  TempDir tmp;
  auto store = RunStore::Open(tmp.path());
  ASSERT_OK(store);
  auto db = internal::Db::Open(StorePath(tmp.path()), false);
  ASSERT_OK(db);
  Status orphan = (*db)->Exec(
      "INSERT INTO sessions (run_id, model, task, strategy, sample, world, dtype) "
      "VALUES (999, 'm', 't', 's', 0, 2, 'bf16')");
  EXPECT_FALSE(orphan.ok());
  EXPECT_NE(orphan.message().find("FOREIGN KEY"), std::string::npos) << orphan.message();
  EXPECT_FALSE((*store)->UpsertSession(999, {"m", "t", "s", 0, 2, "bf16", "c"}).ok());
}

// A version-2 store is still read as is (v3 only adds views) and gets the
// views when a writer opens it.
TEST(StoreViewsTest, VersionTwoStoresReadAndMigrate) {
  TempDir tmp;
  ASSERT_STATUS_OK(MakeDirs(tmp.path() / "blobs"));
  {
    auto db = internal::Db::Open(StorePath(tmp.path()), false);
    ASSERT_OK(db);
    ASSERT_STATUS_OK(internal::MigrateTo(**db, 2, [](const std::string&) -> Result<std::string> {
      return Error(ErrorKind::kNotFound, "unused");
    }));
  }
  auto ro = RunStore::Open(tmp.path(), true);
  ASSERT_OK(ro);
  EXPECT_EQ((*ro)->schema_version(), 2);
  ro->reset();
  auto rw = RunStore::Open(tmp.path());
  ASSERT_OK(rw);
  EXPECT_EQ((*rw)->schema_version(), kSchemaVersion);
  auto db = internal::Db::Open(StorePath(tmp.path()), true);
  ASSERT_OK(db);
  auto q = (*db)->Prepare("SELECT COUNT(*) FROM sqlite_master WHERE type = 'view'");
  ASSERT_OK(q);
  auto row = q->Step();
  ASSERT_OK(row);
  EXPECT_EQ(q->Int(0), 3);
}

// The speed over the task's expert kernel is stored beside the speedup; a
// version-4 store (no such column) is read as is, and migrated by a writer.
TEST(RunStoreTest, ExpertSpeedupRoundTripsAndOldStoresReadWithoutIt) {
  TempDir tmp;
  ASSERT_STATUS_OK(MakeDirs(tmp.path() / "blobs"));
  int64_t sid = 0;
  {
    auto db = internal::Db::Open(StorePath(tmp.path()), false);
    ASSERT_OK(db);
    ASSERT_STATUS_OK(internal::MigrateTo(**db, 4, [](const std::string&) -> Result<std::string> {
      return Error(ErrorKind::kNotFound, "unused");
    }));
  }
  {
    auto ro = RunStore::Open(tmp.path(), true);
    ASSERT_OK(ro);
    EXPECT_EQ((*ro)->schema_version(), 4);
    auto runs = (*ro)->ListRuns();
    ASSERT_OK(runs);
    // The query is prepared against the old columns (an unknown one fails here).
    auto none = (*ro)->ListEvaluations(1);
    ASSERT_OK(none);
    EXPECT_TRUE(none->empty());
  }
  auto store = RunStore::Open(tmp.path());
  ASSERT_OK(store);
  EXPECT_EQ((*store)->schema_version(), kSchemaVersion);
  auto& s = **store;
  auto run = s.CreateOrGetRun("r", {}, "v", "h", {});
  ASSERT_OK(run);
  auto made = s.UpsertSession(run->id, {"m", "t", "s", 0, 2, "f32", ""});
  ASSERT_OK(made);
  sid = *made;
  nlohmann::json doc = PassedDoc(2.0);
  doc["expert_speedup"] = 0.8;
  ASSERT_OK(s.RecordEvaluation(sid, 0, doc));
  ASSERT_OK(s.RecordEvaluation(sid, 0, PassedDoc(1.5)));
  nlohmann::json bad = PassedDoc(1.5);
  bad["expert_speedup"] = -1.0;
  EXPECT_FALSE(s.RecordEvaluation(sid, 0, bad).ok());
  auto evals = s.ListEvaluations(sid);
  ASSERT_OK(evals);
  ASSERT_EQ(evals->size(), 2u);
  ASSERT_TRUE((*evals)[0].expert_speedup.has_value());
  EXPECT_DOUBLE_EQ(*(*evals)[0].expert_speedup, 0.8);
  EXPECT_FALSE((*evals)[1].expert_speedup.has_value());
}

}  // namespace
}  // namespace kforge::results
