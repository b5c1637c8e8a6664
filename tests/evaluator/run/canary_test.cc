// The evaluation's canary (run/canary.h, run/canary_scan.h): the token and
// its 16 raw bytes found in a candidate's output tensors and stream at any
// offset, never claimed where it is not whole in one tensor; the file it is
// planted in; and what the result document says (verdict, integrity.canary).
#include "run/canary.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <cstring>
#include <filesystem>
#include <random>

#include "kforge/core/fs.h"
#include "kforge/evaluator/canary.h"
#include "run/attempt.h"
#include "run/canary_scan.h"
#include "run/output_drain.h"
#include "run/session.h"
#include "task_fixture.h"

namespace kforge::eval {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kCanary = "kforge-canary-00112233445566778899aabbccddeeff";
// Its 32 hex digits as bytes.
constexpr std::array<unsigned char, 16> kRaw = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                                0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};

// `n` floats of honest-looking data (an all-reduce's sums), as raw bytes.
std::vector<char> HonestFloats(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<char> bytes(n * sizeof(float));
  for (size_t i = 0; i < n; ++i) {
    const float v = normal(gen);
    std::memcpy(bytes.data() + i * sizeof(float), &v, sizeof(float));
  }
  return bytes;
}

Problem TwoOutputs() {
  Problem p;
  p.size_label = "small";
  p.outputs.resize(2);
  p.outputs[0].name = "y";
  p.outputs[1].name = "stats";
  return p;
}

TEST(CanaryScan, OnlyAWellFormedTokenIsACanary) {
  EXPECT_TRUE(IsCanaryToken(kCanary));
  for (const char* bad : {"", "kforge-canary-", "kforge-canary-00112233445566778899aabbccddeeff0",
                          "kforge-canary-00112233445566778899AABBCCDDEEFF",
                          "kforge-canary-00112233445566778899aabbccddeefg",
                          "xforge-canary-00112233445566778899aabbccddeeff"}) {
    EXPECT_FALSE(IsCanaryToken(bad)) << bad;
    EXPECT_TRUE(CanaryNeedles(bad).empty()) << bad;
  }
  const auto needles = CanaryNeedles(kCanary);
  ASSERT_EQ(needles.size(), 2u);
  EXPECT_EQ(needles[0], kCanary);
  EXPECT_EQ(needles[1], std::string(reinterpret_cast<const char*>(kRaw.data()), kRaw.size()));
}

// The token copied into a float tensor at an offset no float starts at.
TEST(CanaryScan, FoundAtAnUnalignedOffsetOfAFloatTensor) {
  const auto needles = CanaryNeedles(kCanary);
  std::vector<std::vector<std::vector<char>>> outputs = {
      {HonestFloats(2048, 1), HonestFloats(8, 2)}, {HonestFloats(2048, 3), HonestFloats(8, 4)}};
  std::memcpy(outputs[1][0].data() + 4093, kCanary, std::strlen(kCanary));
  const CanaryFound found = CanaryInOutputs(needles, TwoOutputs(), outputs, 3);
  EXPECT_EQ(found.rank, 1);
  EXPECT_EQ(found.where, "rank 1's output 'y' at byte 4093 (size small, trial 3)");
}

TEST(CanaryScan, ItsRawBytesAreFoundToo) {
  const auto needles = CanaryNeedles(kCanary);
  std::vector<std::vector<std::vector<char>>> outputs = {
      {HonestFloats(1024, 5), HonestFloats(8, 6)}};
  std::memcpy(outputs[0][1].data() + 7, kRaw.data(), kRaw.size());
  const CanaryFound found = CanaryInOutputs(needles, TwoOutputs(), outputs, 0);
  EXPECT_EQ(found.rank, 0);
  EXPECT_EQ(found.where,
            "rank 0's output 'stats' at byte 7 (its 16 raw bytes) (size small, trial 0)");
}

TEST(CanaryScan, HonestDataHoldsNone) {
  const auto needles = CanaryNeedles(kCanary);
  std::vector<std::vector<std::vector<char>>> outputs;
  for (uint32_t r = 0; r < 8; ++r)
    outputs.push_back({HonestFloats(1 << 16, 10 + r), HonestFloats(8, 20 + r)});
  // Its prefix and 15 of its raw bytes are not it.
  std::memcpy(outputs[2][0].data() + 100, "kforge-canary-", 14);
  std::memcpy(outputs[3][0].data() + 200, kRaw.data(), kRaw.size() - 1);
  EXPECT_FALSE(CanaryInOutputs(needles, TwoOutputs(), outputs, 0).found());
  // Without a canary nothing is looked for.
  std::memcpy(outputs[4][0].data() + 300, kCanary, std::strlen(kCanary));
  EXPECT_FALSE(CanaryInOutputs({}, TwoOutputs(), outputs, 0).found());
}

// Half the token at the end of one tensor and half at the start of the next
// (of the same rank, or the next rank's): two tensors, not one product.
TEST(CanaryScan, ATokenSplitAcrossTwoTensorsIsNotClaimed) {
  const auto needles = CanaryNeedles(kCanary);
  const std::string token = kCanary;
  const size_t half = token.size() / 2;
  std::vector<std::vector<std::vector<char>>> outputs = {
      {HonestFloats(64, 1), HonestFloats(64, 2)}, {HonestFloats(64, 3), HonestFloats(64, 4)}};
  auto& end = outputs[0][0];
  std::memcpy(end.data() + end.size() - half, token.data(), half);
  std::memcpy(outputs[0][1].data(), token.data() + half, token.size() - half);
  auto& last = outputs[0][1];
  std::memcpy(last.data() + last.size() - half, token.data(), half);
  std::memcpy(outputs[1][0].data(), token.data() + half, token.size() - half);
  EXPECT_FALSE(CanaryInOutputs(needles, TwoOutputs(), outputs, 0).found());
}

// A candidate's code writes its own process's replies: a canary in an error
// it forged (or a metric's name) is found there, with the rank the failure
// names; honest reports and an evaluation without a canary hold none.
TEST(CanaryScan, ItIsFoundInWhatTheCandidatesProcessesReported) {
  const json failure = {{"phase", "correctness"},
                        {"rank", 1},
                        {"message", std::string("kf_run: CUDA error ") + kCanary}};
  const CanaryFound forged = CanaryInReports(
      kCanary, {{"error", "runtime_error: " + failure.dump()}, {"profile", "null"}}, 1);
  EXPECT_TRUE(forged.found());
  EXPECT_EQ(forged.rank, 1);
  EXPECT_EQ(forged.where, "the evaluation's `error` (rank 1)");
  const json metric = {{"metrics", {{std::string("x.") + kCanary, 1.0}}}};
  const CanaryFound named =
      CanaryInReports(kCanary, {{"error", ""}, {"profile", metric.dump()}}, -1);
  EXPECT_EQ(named.where, "the evaluation's `profile`");
  EXPECT_EQ(CanaryFinding(named).count("rank"), 0u);
  EXPECT_FALSE(CanaryInReports(kCanary, {{"error", "mismatch at size small"}}, 0).found());
  EXPECT_FALSE(CanaryInReports("", {{"error", kCanary}}, 0).found());
}

// A stream fed in pieces of every size finds the token wherever it lies, at
// its offset in the whole stream; bytes before the watch's offset count.
TEST(CanaryScan, AStreamFindsItAcrossEveryPieceSize) {
  const std::string text = std::string(1000, 'x') + kCanary + "\nmore";
  for (size_t piece = 1; piece <= 64; ++piece) {
    CanaryStreamScanner scan(CanaryNeedles(kCanary), 500);
    for (size_t at = 0; at < text.size(); at += piece)
      scan.Feed(std::string_view(text).substr(at, piece));
    ASSERT_TRUE(scan.sighting().has_value()) << piece;
    EXPECT_EQ(scan.sighting()->offset, 1500u) << piece;
  }
  CanaryStreamScanner honest(CanaryNeedles(kCanary));
  for (int i = 0; i < 100; ++i) honest.Feed("kforge-canary-0011223344 not it\n");
  EXPECT_FALSE(honest.sighting().has_value());
}

TEST(CanaryScan, TheDrainSearchesWhatItReadsAfterTheWatch) {
  OutputDrain drain(64, 64);  // keeps little: the search sees every byte
  auto w0 = drain.AddRank();
  auto w1 = drain.AddRank();
  ASSERT_TRUE(w0.ok() && w1.ok());
  drain.Start();
  drain.Watch(CanaryNeedles(kCanary));
  const std::string filler(100000, 'z');
  ASSERT_EQ(write(*w1, filler.data(), filler.size()), static_cast<ssize_t>(filler.size()));
  ASSERT_EQ(write(*w1, kRaw.data(), 5), 5);
  ASSERT_EQ(write(*w1, kRaw.data() + 5, kRaw.size() - 5), static_cast<ssize_t>(kRaw.size() - 5));
  ASSERT_EQ(write(*w0, "honest\n", 7), 7);
  close(*w0);
  close(*w1);
  drain.Finish(std::chrono::milliseconds(2000));
  auto seen = drain.Sighting();
  ASSERT_TRUE(seen.has_value());
  EXPECT_EQ(seen->first, 1);
  EXPECT_EQ(seen->second.offset, filler.size());
  EXPECT_TRUE(seen->second.raw);
}

TEST(CanaryPlant, TheFileIsOwnerOnlyInAFreshOwnerOnlyDirectoryAndGoesWithIt) {
  testing::TempDir tmp;
  fs::path file;
  {
    auto planted = CanaryFile::Plant(kCanary, tmp.path());
    ASSERT_TRUE(planted.ok()) << planted.status().ToString();
    file = (*planted)->path();
    EXPECT_EQ(file.parent_path().parent_path(), tmp.path());
    struct stat st {};
    ASSERT_EQ(stat(file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    ASSERT_EQ(stat(file.parent_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700u);
    auto held = ReadFile(file);
    ASSERT_TRUE(held.ok());
    EXPECT_EQ(*held, kCanary);
  }
  EXPECT_FALSE(fs::exists(file.parent_path()));
}

// The document: a canary finding rejects the kernel whatever the phases
// said, and `integrity.canary` says what was planted and where it was found;
// without a canary the field is absent.
class CanaryReportTest : public ::testing::Test {
 protected:
  json Finish(const std::string& canary, const Status& phases, bool found) {
    options_.canary = canary;
    options_.trials = 1;
    EvalSession s;
    s.task = &task_;
    s.options = &options_;
    s.trials_passed = 1;
    if (!canary.empty()) s.canary_planted = {kPlantedHarnessEnv, kPlantedHarnessFile};
    if (found) {
      const CanaryFound where{1, "rank 1's output 'y' at byte 4093 (size small, trial 0)"};
      s.integrity.push_back(CanaryFinding(where));
      s.canary_found = where.where;
    }
    Attempt a(task_, "src", "k.cu", Dtype::kF32, false);
    a.FinishFrom(s, phases);
    return a.doc();
  }
  Task task_;
  EvalOptions options_;
};

TEST_F(CanaryReportTest, FoundIsAnIntegrityViolationNamingWhere) {
  const json doc = Finish(kCanary, Error(ErrorKind::kIntegrityViolation, "canary"), true);
  EXPECT_EQ(doc["status"], "integrity_violation") << doc.dump(1);
  EXPECT_NE(doc["message"].get<std::string>().find("rank 1's output 'y' at byte 4093"),
            std::string::npos)
      << doc["message"];
  EXPECT_EQ(doc["integrity"]["canary"],
            json({{"planted", {"harness_env", "harness_file"}},
                  {"found", "rank 1's output 'y' at byte 4093 (size small, trial 0)"}}));
  EXPECT_EQ(doc["integrity"]["findings"][0]["check"], "canary");
  EXPECT_EQ(doc["integrity"]["findings"][0]["rank"], 1);
  // The token itself is never written into the document.
  EXPECT_EQ(doc.dump().find(kCanary), std::string::npos);
  // Found in the stream after the phases failed for another reason: the
  // canary's verdict stands.
  EXPECT_EQ(Finish(kCanary, Error(ErrorKind::kMismatch, "differs"), true)["status"],
            "integrity_violation");
}

TEST_F(CanaryReportTest, PlantedAndNotFoundPassesAndSaysWhatWasPlanted) {
  const json doc = Finish(kCanary, Status::Ok(), false);
  EXPECT_EQ(doc["status"], "passed") << doc.dump(1);
  EXPECT_EQ(doc["integrity"]["canary"], json({{"planted", {"harness_env", "harness_file"}}}));
  EXPECT_EQ(doc.dump().find(kCanary), std::string::npos);
}

TEST_F(CanaryReportTest, WithoutACanaryTheFieldIsAbsent) {
  const json doc = Finish("", Status::Ok(), false);
  EXPECT_EQ(doc["status"], "passed");
  EXPECT_FALSE(doc["integrity"].contains("canary")) << doc["integrity"].dump();
}

}  // namespace
}  // namespace kforge::eval
