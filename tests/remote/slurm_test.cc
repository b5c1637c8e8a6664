// The Slurm launcher without a cluster: the scripts it writes, and how up,
// down and the watch read what sbatch/squeue/scancel/scontrol say (a fake
// process runner on fake time). tests/remote/slurm_cluster_test.cc runs the
// same against a real Slurm.
#include "kforge/remote/slurm.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <mutex>

#include "kforge/core/fs.h"

namespace kforge::remote {
namespace {

namespace fs = std::filesystem;

class FakeRunner final : public ProcessRunner {
 public:
  using Answer = std::function<ProcessResult(const std::vector<std::string>&)>;
  void On(const std::string& program, Answer a) {
    std::lock_guard<std::mutex> lock(mu_);
    answers_[program] = std::move(a);
  }
  Result<ProcessResult> Run(const std::vector<std::string>& argv, const ProcessOptions&) override {
    Answer a;
    {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back(argv);
      auto it = answers_.find(argv[0]);
      if (it == answers_.end()) return Error(ErrorKind::kNotFound, "no " + argv[0]);
      a = it->second;
    }
    ProcessResult r = a(argv);
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
    return r;
  }
  std::vector<std::vector<std::string>> Calls(const std::string& program) const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::vector<std::string>> out;
    for (const auto& c : calls_) {
      if (c[0] == program) out.push_back(c);
    }
    return out;
  }
  // Waits until `program` has been run `n` times (30 s at most).
  bool WaitCalls(const std::string& program, size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] {
      size_t k = 0;
      for (const auto& c : calls_) k += c[0] == program;
      return k >= n;
    });
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Answer> answers_;
  std::vector<std::vector<std::string>> calls_;
};

ProcessResult Out(const std::string& out, int code = 0) {
  ProcessResult r;
  r.exit_code = code;
  r.out = out;
  return r;
}

bool Has(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    auto d = MakeTempDir("kforge-slurm");
    ASSERT_TRUE(d.ok());
    dir_ = *d;
    ASSERT_TRUE(WriteFileAtomic(dir_ / "tokens", "abcdefghijklmnopqrstuvwxyz012345\n").ok());
    o_.nodes = 2;
    o_.run_dir = dir_ / "run";
    o_.kforge = "/bin/true";  // any executable: nothing runs it here
    o_.tokens_file = dir_ / "tokens";
    o_.tasks_dir = dir_;
    o_.wait_s = 30;
    deps_.runner = &runner_;
    deps_.clock = &clock_;
    deps_.env = {{"HOME", "/root"}};  // no SLURM_JOB_ID: batch mode
    deps_.say = [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(said_mu_);
      said_ += line + "\n";
    };
    runner_.On("sbatch", [](const auto&) { return Out("77\n"); });
    runner_.On("scancel", [](const auto&) { return Out(""); });
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Register(const std::string& name, const std::string& url) {
    Registration r;
    r.url = url;
    r.compile_slots = 1;
    ASSERT_TRUE(WriteRegistration(o_.run_dir / "workers" / name, r).ok());
  }
  std::string said() {
    std::lock_guard<std::mutex> lock(said_mu_);
    return said_;
  }

  fs::path dir_;
  SlurmOptions o_;
  FakeRunner runner_;
  FakeClock clock_;
  SlurmDeps deps_;
  std::mutex said_mu_;
  std::string said_;
};

TEST(SlurmScript, OneArrayTaskPerNodeRequeuedDrainedBeforeTheLimit) {
  SlurmOptions o;
  o.nodes = 3;
  o.gpus_per_node = 8;
  o.cpus_per_node = 32;
  o.exclusive = true;
  o.partition = "gpu";
  o.time = "12:00:00";
  o.run_dir = "/shared/runs/night";
  o.kforge = "/opt/kforge/bin/kforge";
  o.tokens_file = "/shared/runs/night/slurm/tokens";
  o.tasks_dir = "/opt/kforge/share/kforge/tasks";
  o.world = 8;
  o.compile_jobs = 16;
  const std::string s = RenderSbatchScript(o);
  EXPECT_EQ(s.rfind("#!/bin/bash\n", 0), 0u);
  for (const char* line :
       {"#SBATCH --job-name=kforge-eval\n", "#SBATCH --array=0-2\n", "#SBATCH --nodes=1\n",
        "#SBATCH --ntasks=1\n", "#SBATCH --gres=gpu:8\n", "#SBATCH --cpus-per-task=32\n",
        "#SBATCH --exclusive\n", "#SBATCH --partition=gpu\n", "#SBATCH --time=12:00:00\n",
        "#SBATCH --requeue\n", "#SBATCH --signal=B:TERM@300\n", "#SBATCH --open-mode=append\n",
        "#SBATCH --output=/shared/runs/night/slurm/logs/%A_%a.log\n"}) {
    EXPECT_TRUE(Has(s, line)) << line << "\n" << s;
  }
  EXPECT_TRUE(Has(s,
                  "exec '/opt/kforge/bin/kforge' eval-server --listen 0.0.0.0:0 --tokens "
                  "'/shared/runs/night/slurm/tokens' --tasks-dir "
                  "'/opt/kforge/share/kforge/tasks' --world 8 --compile-jobs 16"))
      << s;
  EXPECT_TRUE(Has(s,
                  "--register '/shared/runs/night/workers'/"
                  "\"${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}.json\"\n"))
      << s;
  EXPECT_FALSE(Has(s, "--gpus none"));
  // Every #SBATCH line comes before the first command (sbatch stops reading them there).
  EXPECT_LT(s.rfind("#SBATCH"), s.find("set -euo pipefail"));

  o.gpus_per_node = 0;
  o.partition.clear();
  o.time.clear();
  o.exclusive = false;
  const std::string cpu = RenderSbatchScript(o);
  EXPECT_FALSE(Has(cpu, "--gres"));
  EXPECT_FALSE(Has(cpu, "--partition"));
  EXPECT_FALSE(Has(cpu, "--time"));
  EXPECT_FALSE(Has(cpu, "--exclusive"));
  EXPECT_TRUE(Has(cpu, " --gpus none"));
}

TEST(SlurmScript, StepTasksRegisterByTheirRank) {
  SlurmOptions o;
  o.run_dir = "/shared/r";
  o.kforge = "/k";
  o.tokens_file = "/t";
  o.tasks_dir = "/tasks";
  const std::string s = RenderStepScript(o, "step-5-0000abcd");
  EXPECT_TRUE(Has(s, "--register '/shared/r/workers'/step-5-0000abcd_\"${SLURM_PROCID}.json\"\n"))
      << s;
  EXPECT_FALSE(Has(s, "#SBATCH"));
}

TEST_F(Slurm, UpWaitsForEveryServerAndSavesWhatItStarted) {
  int looks = 0;
  runner_.On("squeue", [&](const auto&) {
    // The servers come up while we look: one, then the other.
    ++looks;
    if (looks == 2) Register("77_0.json", "http://n1:1");
    if (looks == 3) Register("77_1.json", "http://n2:2");
    return Out(looks == 1 ? "77_0|PENDING|(Priority)\n77_1|PENDING|(Priority)\n"
                          : "77_0|RUNNING|n1\n77_1|RUNNING|n2\n");
  });
  Register("76_0.json", "http://old:1");  // another job's file is not ours
  auto job = SlurmUp(o_, deps_);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ(job->mode, "batch");
  EXPECT_EQ(job->job_id, "77");
  auto regs = JobRegistrations(*job);
  ASSERT_EQ(regs.size(), 2u);
  EXPECT_EQ(regs[0].url, "http://n1:1");
  EXPECT_EQ(regs[1].url, "http://n2:2");
  ASSERT_EQ(runner_.Calls("sbatch").size(), 1u);
  EXPECT_EQ(runner_.Calls("sbatch")[0][1], "--parsable");
  EXPECT_TRUE(fs::exists(o_.run_dir / "slurm" / "eval-servers.sbatch"));
  EXPECT_TRUE(Has(said(), "77_0 PENDING (Priority)")) << said();
  auto saved = LoadSlurmJob(o_.run_dir);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(saved->job_id, "77");
  EXPECT_EQ(saved->prefix, "77_");
  // A second up over live servers is refused, naming the job.
  auto again = SlurmUp(o_, deps_);
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(Has(again.status().message(), "already up")) << again.status().message();
  EXPECT_EQ(runner_.Calls("sbatch").size(), 1u);
}

TEST_F(Slurm, AJobThatEndsBeforeRegisteringIsReportedWithItsLog) {
  runner_.On("squeue",
             [](const auto&) { return Out("77_0|FAILED|NonZeroExitCode\n77_1|RUNNING|n2\n"); });
  ASSERT_TRUE(WriteFileAtomic(o_.run_dir / "slurm" / "logs" / "77_0.log",
                              "kforge eval-server: tokens file ... may be read by other users\n")
                  .ok());
  auto job = SlurmUp(o_, deps_);
  ASSERT_FALSE(job.ok());
  const std::string& m = job.status().message();
  EXPECT_TRUE(Has(m, "Slurm job 77 ended before its 2 server(s) registered")) << m;
  EXPECT_TRUE(Has(m, "77_0 FAILED (NonZeroExitCode)")) << m;
  EXPECT_TRUE(Has(m, "77_0.log")) << m;
  EXPECT_TRUE(Has(m, "may be read by other users")) << m;
  // What was started is cancelled; nothing is left for `down`.
  ASSERT_EQ(runner_.Calls("scancel").size(), 1u);
  EXPECT_EQ(runner_.Calls("scancel")[0][1], "77");
  EXPECT_FALSE(LoadSlurmJob(o_.run_dir).ok());
}

TEST_F(Slurm, UpGivesUpAfterItsWaitAndSaysWhatSlurmSaid) {
  runner_.On("squeue", [](const auto&) {
    return Out("77_0|PENDING|(Resources)\n77_1|PENDING|(Resources)\n");
  });
  o_.wait_s = 5;
  auto job = SlurmUp(o_, deps_);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(Has(job.status().message(), "0 of 2 server(s) registered within 5 s"))
      << job.status().message();
  EXPECT_TRUE(Has(job.status().message(), "(Resources)")) << job.status().message();
  EXPECT_EQ(runner_.Calls("scancel").size(), 1u);
}

TEST_F(Slurm, PathsThatCannotGoIntoAScriptAreRefused) {
  o_.run_dir = dir_ / "my runs";
  auto job = SlurmUp(o_, deps_);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_TRUE(runner_.Calls("sbatch").empty());
  o_.run_dir = dir_ / "run";
  ::chmod((dir_ / "tokens").c_str(), 0644);
  EXPECT_TRUE(Has(SlurmUp(o_, deps_).status().message(), "chmod 600"));
}

TEST_F(Slurm, DownCancelsWaitsAndCleansUp) {
  int looks = 0;
  runner_.On("squeue", [&](const auto&) {
    ++looks;
    if (looks == 1) {
      Register("77_0.json", "http://n1:1");
      Register("77_1.json", "http://n2:2");
    }
    // Up: running; down: running, then completing, then gone.
    if (looks <= 2) return Out("77_0|RUNNING|n1\n77_1|RUNNING|n2\n");
    if (looks == 3) return Out("77_0|COMPLETING|n1\n77_1|CANCELLED|n2\n");
    return Out("", 1);
  });
  auto job = SlurmUp(o_, deps_);
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  ASSERT_TRUE(SlurmDown(o_.run_dir, deps_).ok());
  ASSERT_EQ(runner_.Calls("scancel").size(), 1u);
  EXPECT_GE(looks, 4);  // it waited for the job to leave
  EXPECT_TRUE(ReadRegistrations(o_.run_dir / "workers").empty());
  EXPECT_FALSE(LoadSlurmJob(o_.run_dir).ok());
  EXPECT_EQ(SlurmDown(o_.run_dir, deps_).kind(), ErrorKind::kNotFound);
}

TEST_F(Slurm, TheWatchReportsChangesAndRequeuesFailedTasksABoundedNumberOfTimes) {
  std::mutex mu;
  std::vector<std::string> states = {"RUNNING", "PENDING", "RUNNING", "FAILED"};
  size_t look = 0;
  runner_.On("squeue", [&](const auto&) {
    std::lock_guard<std::mutex> lock(mu);
    const std::string s = states[std::min(look++, states.size() - 1)];
    return Out("77_0|" + s + "|n1\n77_1|CANCELLED|n2\n");
  });
  runner_.On("scontrol", [](const auto&) { return Out(""); });
  SlurmJob job;
  job.mode = "batch";
  job.job_id = "77";
  job.prefix = "77_";
  job.run_dir = o_.run_dir;
  {
    SlurmWatch watch(job, deps_, std::chrono::seconds(0), /*max_requeues=*/2);
    ASSERT_TRUE(runner_.WaitCalls("squeue", 8));
  }
  EXPECT_TRUE(Has(said(), "Slurm task 77_0: RUNNING -> PENDING")) << said();
  EXPECT_TRUE(Has(said(), "Slurm task 77_0: PENDING -> RUNNING")) << said();
  EXPECT_TRUE(Has(said(), "Slurm task 77_0 ended (FAILED); requeued it (1 of 2)")) << said();
  auto requeues = runner_.Calls("scontrol");
  ASSERT_EQ(requeues.size(), 2u);  // bounded, and never the cancelled task
  for (const auto& c : requeues) {
    EXPECT_EQ(c[1], "requeue");
    EXPECT_EQ(c[2], "77_0");
  }
}

}  // namespace
}  // namespace kforge::remote
