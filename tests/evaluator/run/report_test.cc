// The `kforge eval` report: the table nccl-tests users read and one line per
// rank's device, from a kforge.eval/1 document.
#include "kforge/evaluator/report.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

namespace kforge::eval {
namespace {

nlohmann::json PassedDoc() {
  return nlohmann::json::parse(R"({
    "schema": "kforge.eval/1", "status": "passed", "message": "passed", "task": "001_allreduce",
    "dtype": "bf16", "world": 2, "devices": [0, 1], "emulated": false,
    "gpu": {"name": "NVIDIA H200", "sm_clock_mhz": [1980, 1975], "temperature_c": [41, 44]},
    "timing": [{"size": "1MiB", "bytes": 1048576,
                "baseline": {"median_us": 30.1, "cv": 0.01, "iters": 200},
                "candidate": {"median_us": 26.8, "cv": 0.009, "iters": 200},
                "speedup": 1.123, "algbw_gbps": 39.13, "busbw_gbps": 39.13,
                "baseline_busbw_gbps": 34.84, "warnings": []}]})");
}

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  return w;
}

std::string LineWith(const std::string& text, const std::string& word) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(word) != std::string::npos) return line;
  }
  return "";
}

TEST(EvalReportTest, TimingTableHasTheNcclTestsColumns) {
  const std::string report = RenderEvalReport(PassedDoc());
  const auto header = Words(LineWith(report, "candidate_us"));
  const std::vector<std::string> want = {"size",        "bytes",        "count", "type",
                                         "baseline_us", "candidate_us", "algbw", "busbw",
                                         "base_bw",     "speedup",      "cv",    "iters"};
  EXPECT_EQ(header, want) << report;
  const auto row = Words(LineWith(report, "1MiB"));
  ASSERT_EQ(row.size(), want.size()) << report;
  EXPECT_EQ(row[1], "1048576");
  EXPECT_EQ(row[2], "524288");  // bf16: two bytes an element
  EXPECT_EQ(row[3], "bf16");
  EXPECT_EQ(row[6], "39.13");
  EXPECT_EQ(row[7], "39.13");
  EXPECT_EQ(row[9], "1.123");
}

TEST(EvalReportTest, TheExpertIsNamedAndTimedPerSize) {
  nlohmann::json d = PassedDoc();
  d["expert"] = {{"kernel", "solutions/oneshot.cu"}, {"technique", "one-shot custom all-reduce"}};
  d["timing"][0]["expert"] = {{"median_us", 20.0}, {"over_baseline", 1.505}, {"speedup", 0.746}};
  const std::string r = RenderEvalReport(d);
  EXPECT_NE(LineWith(r, "expert    solutions/oneshot.cu: one-shot custom all-reduce"), "") << r;
  EXPECT_NE(LineWith(r, "expert: 20.00 us (1.505x the reference); the candidate runs at 0.746x"),
            "")
      << r;
  d["expert"] = {{"none", "NCCL's ring is at the link's peak"}};
  d["timing"][0]["expert"] = nullptr;
  const std::string none = RenderEvalReport(d);
  EXPECT_NE(LineWith(none, "expert    none: NCCL's ring is at the link's peak"), "") << none;
  EXPECT_EQ(LineWith(none, "expert:"), "") << none;
  d["expert"] = {
      {"kernel", "solutions/x.cu"}, {"technique", "t"}, {"skipped", "it does not compile"}};
  EXPECT_NE(LineWith(RenderEvalReport(d), "not timed: it does not compile"), "");
}

TEST(EvalReportTest, OneLinePerRankWithItsDevice) {
  const std::string report = RenderEvalReport(PassedDoc());
  const auto r0 = Words(LineWith(report, "rank 0"));
  const auto r1 = Words(LineWith(report, "rank 1"));
  ASSERT_GE(r0.size(), 4u) << report;
  ASSERT_GE(r1.size(), 4u) << report;
  EXPECT_EQ(r0[3], "0");
  EXPECT_EQ(r1[3], "1");
  EXPECT_NE(LineWith(report, "rank 1").find("NVIDIA H200  1975 MHz  44 C"), std::string::npos)
      << report;
  // A compile-only document has no devices and no table.
  nlohmann::json compiled = {{"status", "compiled"}, {"task", "001_allreduce"}};
  const std::string c = RenderEvalReport(compiled);
  EXPECT_EQ(c.find("rank 0"), std::string::npos) << c;
  EXPECT_EQ(c.find("busbw"), std::string::npos) << c;
}

// What ptxas said of each kernel, and a mismatch that is off only as a whole.
TEST(EvalReportTest, ResourcesAndAnRmsOnlyMismatchAreShown) {
  nlohmann::json doc = PassedDoc();
  doc["compile"] = {{"seconds", 1.5},
                    {"cache_hit", false},
                    {"resources",
                     {{{"name", "ring(bf16*)"}, {"summary", "40 registers"}},
                      {{"name", "tail()"}, {"summary", "device function, 16 B stack"}}}}};
  doc["status"] = "mismatch";
  doc["correctness"] = {
      {"passed_trials", 0},
      {"checks",
       {{{"size", "256MiB"},
         {"kind", "timed"},
         {"trial", 3},
         {"passed", false},
         {"mismatches",
          {{{"rank", 1}, {"output", "y"}, {"bad_count", 0}, {"rms_rel_err", 0.0071}}}}}}}};
  const std::string report = RenderEvalReport(doc);
  EXPECT_NE(report.find("  ring(bf16*): 40 registers\n"), std::string::npos) << report;
  EXPECT_NE(report.find("  tail(): device function, 16 B stack\n"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 1 output y: 0 bad, max abs err 0, relative RMS 0.00710"),
            std::string::npos)
      << report;
}

TEST(EvalReportTest, AProfileShowsTrafficOccupancyAndTheThreeLongestStalls) {
  nlohmann::json doc = {{"task", "001_allreduce"}, {"status", "passed"}, {"message", "ok"}};
  doc["profile"] = {
      {"size", "256MiB"},
      {"rank", 0},
      {"metrics",
       {{"dram__bytes_read.sum", 537.0e6},
        {"dram__bytes_write.sum", 548.0e6},
        {"dram__throughput.avg.pct_of_peak_sustained_elapsed", 35.0},
        {"lts__t_sector_hit_rate.pct", 59.2},
        {"sm__warps_active.avg.pct_of_peak_sustained_active", 24.8},
        {"smsp__average_warps_issue_stalled_wait_per_issue_active.ratio", 0.5},
        {"smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio", 9.25},
        {"smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio", 0.1},
        {"smsp__average_warps_issue_stalled_membar_per_issue_active.ratio", 2.0}}}};
  const std::string report = RenderEvalReport(doc);
  EXPECT_NE(report.find("profile at 256MiB"), std::string::npos) << report;
  EXPECT_NE(report.find("DRAM read 537.0 MB, written 548.0 MB, 35.0% of peak"), std::string::npos)
      << report;
  EXPECT_NE(report.find("warps active 24.8%"), std::string::npos) << report;
  EXPECT_NE(report.find("long_scoreboard 9.25, membar 2.00, wait 0.50"), std::string::npos)
      << report;
  EXPECT_EQ(report.find("barrier 0.10"), std::string::npos) << "only three stalls\n" << report;

  doc["profile"] = {{"size", "1MiB"}, {"skipped", "cannot load CUPTI (libcupti.so): not found"}};
  const auto lines = ProfileLines(doc["profile"]);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0], "profile at 1MiB: skipped (cannot load CUPTI (libcupti.so): not found)");
  EXPECT_TRUE(ProfileLines(nlohmann::json()).empty());
}

}  // namespace
}  // namespace kforge::eval
