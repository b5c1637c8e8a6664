// Which `kforge run` flags a resume and a rejudge refuse: the roles of the
// field table's rows (kforge/agent/run_fields.h), as the binary applies them.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli_fixture.h"
#include "kforge/agent/run_fields.h"

namespace kforge {
namespace {

using agent::FieldKind;
using agent::RunField;

// Every flag of the table, each with a value it accepts; --out says `out`.
std::vector<std::string> EveryFlag(const std::string& out) {
  std::vector<std::string> args;
  for (const RunField& f : agent::RunFields()) {
    const std::string flag(f.flag);
    if (flag == "--out") {
      args.insert(args.end(), {flag, out});
      continue;
    }
    switch (f.kind) {
      case FieldKind::kBool:
        args.push_back(flag);
        break;
      case FieldKind::kBudgets:
        args.insert(args.end(), {"--budget-usd", "1"});
        break;
      case FieldKind::kSlurm:
        args.push_back("--slurm");
        break;
      case FieldKind::kRejudgeOf:
        break;
      case FieldKind::kUrls:
        args.insert(args.end(), {flag, "http://127.0.0.1:9"});
        break;
      case FieldKind::kDeadline:
        args.insert(args.end(), {flag, "+1h"});
        break;
      default:
        args.insert(args.end(), {flag, f.kind == FieldKind::kString ? "x" : "2"});
    }
  }
  return args;
}

std::string RefusedBy(bool (*allowed)(agent::FieldRole)) {
  std::vector<std::string> flags;
  for (const RunField& f : agent::RunFields()) {
    if (!f.flag.empty() && !allowed(f.role)) flags.emplace_back(f.flag);
  }
  return fmt::format("{}", fmt::join(flags, ", "));
}

TEST_F(CliTest, AResumeAndARejudgeRefuseTheFlagsTheirRolesSay) {
  const std::string out = (tmp_ / "runs").string();
  std::vector<std::string> resume = {"run", "--resume", "gone"};
  for (auto& a : EveryFlag(out)) resume.push_back(a);
  auto r = Kforge(resume);
  EXPECT_EQ(r.exit_code, 64) << r.err;
  const std::string resume_refuses =
      "--name, --models, --tasks, --strategy, --turns, --samples, --repeats, --world, --dtype, "
      "--hardware";
  EXPECT_EQ(RefusedBy(agent::AResumeMayChange), resume_refuses);
  EXPECT_NE(r.err.find(resume_refuses + " would change what it asks"), std::string::npos) << r.err;

  std::vector<std::string> rejudge = {"run", "--rejudge", "gone"};
  for (auto& a : EveryFlag(out)) rejudge.push_back(a);
  auto j = Kforge(rejudge);
  EXPECT_EQ(j.exit_code, 64) << j.err;
  const std::string rejudge_refuses =
      "--strategy, --turns, --samples, --repeats, --world, --dtype, --hardware, --deadline, "
      "--budget-*";
  EXPECT_EQ(RefusedBy(agent::ARejudgeTakes), rejudge_refuses);
  EXPECT_NE(j.err.find("; " + rejudge_refuses + " would not apply"), std::string::npos) << j.err;
}

// Given means given: a flag set to its default still counts (CLI11's count,
// no sentinel value), and one left out is not refused.
TEST_F(CliTest, AFlagAtItsDefaultIsStillGiven) {
  const std::string out = (tmp_ / "runs").string();
  auto r = Kforge({"run", "--resume", "gone", "--out", out, "--world", "2", "--repeats", "1"});
  EXPECT_EQ(r.exit_code, 64) << r.err;
  EXPECT_NE(r.err.find("; --repeats, --world would change"), std::string::npos) << r.err;
  auto ok = Kforge({"run", "--resume", "gone", "--out", out, "--compile-jobs", "0",
                    "--baseline-reuse", "600", "--budget-usd", "0"});
  EXPECT_NE(ok.exit_code, 0);
  EXPECT_EQ(ok.err.find("would change"), std::string::npos) << ok.err;
}

}  // namespace
}  // namespace kforge
