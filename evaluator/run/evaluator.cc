// The real Evaluator: compile and policy-check the candidate, place ranks on
// GPUs, keep a rank group of kforge-worker processes alive across
// evaluations, run the phases, and write the kforge.eval/1 document.
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <set>

#include "compile/policy.h"
#include "kforge/core/fs.h"
#include "kforge/core/hash.h"
#include "kforge/core/log.h"
#include "kforge/evaluator/compile.h"
#include "kforge/evaluator/hardware.h"
#include "protocol/messages.h"
#include "session.h"

namespace kforge::eval {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string StatusName(ErrorKind k) {
  switch (k) {
    case ErrorKind::kOk:
      return "passed";
    case ErrorKind::kCompileError:
      return "compile_error";
    case ErrorKind::kPolicyViolation:
      return "policy_violation";
    case ErrorKind::kRuntimeError:
      return "runtime_error";
    case ErrorKind::kMismatch:
      return "mismatch";
    case ErrorKind::kIntegrityViolation:
      return "integrity_violation";
    case ErrorKind::kDeadlock:
    case ErrorKind::kTimeout:
      return "timeout";
    default:
      return "harness_error";
  }
}

std::vector<std::string> LibrariesFor(const std::string& source, const Policy& policy,
                                      bool reference) {
  std::vector<std::string> libs;
  if ((reference || policy.nccl) && source.find("nccl") != std::string::npos)
    libs.push_back("nccl");
  if ((reference || policy.cublas) && source.find("cublas") != std::string::npos)
    libs.push_back("cublas");
  return libs;
}

// Wall seconds of each phase of an evaluation, in order, for the document's
// `phases_s` (where an evaluation's time goes; docs/eval-result.md).
class PhaseClock {
 public:
  explicit PhaseClock(json& phases) : phases_(phases) {}
  void Mark(const std::string& phase) {
    auto now = std::chrono::steady_clock::now();
    phases_[phase] = std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  void Restart() { last_ = std::chrono::steady_clock::now(); }

 private:
  json& phases_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// Everything that runs while the candidate group exists, in order: the
// baseline timed first (no candidate code alive anywhere), the candidate
// started, then every size.
Status RunPhases(EvalSession& s, json& phases, const std::filesystem::path& candidate,
                 const std::filesystem::path& baseline) {
  PhaseClock clock(phases);
  KF_RETURN_IF_ERROR(PlanSizes(s));
  if (s.plans.empty()) return Error(ErrorKind::kInvalidInput, "no sizes to evaluate");
  KF_RETURN_IF_ERROR(PrepareHarness(s, baseline));
  clock.Mark("prepare_harness");
  KF_RETURN_IF_ERROR(TimeBaselines(s, false));
  clock.Mark("baseline_before");
  KF_RETURN_IF_ERROR(StartCandidate(s, candidate));
  clock.Mark("candidate_start");
  for (SizePlan& plan : s.plans) {
    KF_RETURN_IF_ERROR(plan.check ? RunCheckSize(s, plan) : RunBenchSize(s, plan));
    clock.Mark((plan.check ? "check " : "bench ") + plan.size.label);
  }
  return Status::Ok();
}

class RealEvaluator final : public Evaluator {
 public:
  explicit RealEvaluator(std::filesystem::path worker) : worker_(std::move(worker)) {}

  Result<json> Evaluate(const Task& task, const std::string& source, const std::string& name,
                        const EvalOptions& options) override {
    auto t0 = std::chrono::steady_clock::now();
    json doc = {{"schema", "kforge.eval/1"},
                {"task", task.key},
                {"kernel", {{"path", name}, {"sha256", Sha256Hex(source)}}}};
    Dtype dtype = options.dtype.value_or(task.dtypes.front());
    if (std::find(task.dtypes.begin(), task.dtypes.end(), dtype) == task.dtypes.end()) {
      return Error(ErrorKind::kInvalidInput,
                   "task " + task.key + " has no dtype " + std::string(DtypeName(dtype)));
    }
    doc["dtype"] = std::string(DtypeName(dtype));
    json phases = json::object();
    PhaseClock clock(phases);
    auto finish = [&](ErrorKind kind, const std::string& message) -> Result<json> {
      doc["status"] =
          options.compile_only && kind == ErrorKind::kOk ? "compiled" : StatusName(kind);
      doc["message"] = message;
      doc["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      doc["phases_s"] = phases;
      return doc;
    };

    // Placement first (it decides the arch), unless only compiling.
    json card;
    if (!options.compile_only) {
      auto c = Hardware(options.gpus);
      if (!c.ok()) return c.status();
      card = *c;
    }
    clock.Mark("hardware");
    std::string arch = options.arch;
    if (arch.empty()) {
      arch = "sm_90a";
      if (!card.is_null()) {
        int cc =
            card["gpus"][0]["cc_major"].get<int>() * 10 + card["gpus"][0]["cc_minor"].get<int>();
        arch = "sm_" + std::to_string(cc) + (cc >= 90 ? "a" : "");
      }
    }

    // Compile the candidate and the reference together.
    auto reference = ReadFile(task.reference);
    if (!reference.ok()) return reference.status();
    CompileOptions copts;
    copts.cache_dir = options.cache_dir;
    // nvcc on a candidate's source runs jailed when kforge-jail is installed
    // beside the worker (docs/integrity.md).
    if (fs::path jail = worker_.parent_path() / "kforge-jail"; fs::exists(jail)) copts.jail = jail;
    copts.timeout =
        std::chrono::milliseconds(static_cast<int64_t>(options.compile_timeout_s * 1000));
    Compiler& compiler = CompilerFor(copts);
    std::vector<CompileJob> jobs = {
        {source, name, arch, LibrariesFor(source, task.policy, options.trusted), {}},
        {*reference,
         task.key + "/reference.cu",
         arch,
         LibrariesFor(*reference, task.policy, true),
         {}}};
    auto compiled = compiler.CompileAll(jobs);
    clock.Mark("compile");
    doc["compile"] = compiled[0].ToJson();
    if (!compiled[0].status.ok()) {
      ErrorKind k = compiled[0].status.kind();
      if (k == ErrorKind::kNotFound || k == ErrorKind::kIo) return compiled[0].status;
      return finish(ErrorKind::kCompileError, compiled[0].status.message());
    }
    if (!compiled[1].status.ok()) {
      return Error(ErrorKind::kHarness,
                   "the task's reference does not compile: " + compiled[1].status.message());
    }
    auto violations = CheckKernelPolicy(compiled[0].shared_object, source, task.policy);
    if (!violations.ok()) return violations.status();
    if (!violations->empty() && !options.trusted) {
      doc["policy"] = {{"violations", *violations}};
      return finish(ErrorKind::kPolicyViolation, "policy violation: " + violations->front());
    }
    if (options.compile_only)
      return finish(ErrorKind::kOk, "compiled; not evaluated (compile-only)");

    // Placement: W ranks over the chosen GPUs; more ranks than GPUs share them.
    std::vector<int> gpus = options.gpus;
    if (gpus.empty()) {
      for (const auto& g : card["gpus"]) gpus.push_back(g["index"].get<int>());
    }
    int world = options.world;
    if (world == 0) {
      world = static_cast<int>(gpus.size());
      auto fit = std::find_if(task.world_sizes.begin(), task.world_sizes.end(),
                              [&](int w) { return w >= world; });
      world = fit != task.world_sizes.end() ? *fit : task.world_sizes.back();
    }
    if (std::find(task.world_sizes.begin(), task.world_sizes.end(), world) ==
        task.world_sizes.end()) {
      return Error(ErrorKind::kInvalidInput,
                   "task " + task.key + " does not support world size " + std::to_string(world));
    }
    std::vector<int> devices;
    for (int r = 0; r < world; ++r) devices.push_back(gpus[r % gpus.size()]);
    bool emulated = std::set<int>(devices.begin(), devices.end()).size() < devices.size();
    doc["world"] = world;
    doc["devices"] = devices;
    doc["emulated"] = emulated;
    doc["gpu"] = {{"name", card["gpus"][0].value("name", "")}};

    clock.Mark("policy");
    auto group = Group(world, devices, emulated, options);
    if (!group.ok()) return group.status();
    clock.Mark("harness_group");
    EvalSession s;
    s.task = &task;
    s.dtype = dtype;
    s.world = world;
    s.emulated = emulated;
    s.harness = *group;
    s.options = &options;
    s.worker = worker_;
    s.worker_env = (*group)->options().env;
    s.mps_dir = (*group)->options().mps_dir;
    s.l2_bytes = card["gpus"][0].value("l2_bytes", size_t{50} << 20);
    s.peaks = PeaksOf(card["gpus"][0], dtype);

    Status st = RunPhases(s, phases, compiled[0].shared_object, compiled[1].shared_object);
    clock.Restart();
    StopCandidate(s);
    clock.Mark("candidate_stop");
    if (st.ok() && options.timing) {
      // The baseline again, with no candidate process left: drift shows.
      st = TimeBaselines(s, true);
      if (st.ok()) FinishTiming(s);
      clock.Mark("baseline_after");
    }
    doc["correctness"] = {
        {"trials", options.trials}, {"passed_trials", s.trials_passed}, {"checks", s.checks}};
    doc["timing"] = s.timing;
    doc["sandbox"] = s.sandbox_report;
    doc["integrity"] = {{"harness_overhead_us", s.overhead_us}, {"findings", s.integrity}};
    if (!s.failure.is_null())
      doc[st.kind() == ErrorKind::kDeadlock ? "timeout" : "error"] = s.failure;
    // Whatever else happened, a kernel whose process broke the sandbox or the
    // timing protocol is rejected for that.
    if (!s.integrity.empty()) {
      std::string what = s.integrity[0].value("message", json()).is_string()
                             ? s.integrity[0]["message"].get<std::string>()
                             : s.integrity[0]["message"].dump();
      return finish(ErrorKind::kIntegrityViolation, "integrity_violation: " + what);
    }
    if (!st.ok()) {
      if (st.kind() == ErrorKind::kHarness) LogWarn("evaluator", "{}", st.message());
      return finish(st.kind(), StatusName(st.kind()) + ": " + st.message());
    }
    std::string msg = "passed: " + std::to_string(s.trials_passed) + " trials over " +
                      std::to_string(task.check_sizes.size()) + " check sizes";
    if (!s.timing.empty()) {
      double logsum = 0;
      for (const auto& t : s.timing) logsum += std::log(std::max(t["speedup"].get<double>(), 1e-9));
      double geo = std::exp(logsum / s.timing.size());
      doc["speedup"] = geo;
      msg += "; speedup " + std::to_string(geo).substr(0, 5) + "x (geomean over " +
             std::to_string(s.timing.size()) + " bench sizes)" + (emulated ? ", emulated" : "");
    }
    return finish(ErrorKind::kOk, msg);
  }

 private:
  Result<json> Hardware(const std::vector<int>& gpus) {
    if (card_.is_null()) {
      KF_ASSIGN_OR_RETURN(card_, ProbeHardware(gpus, worker_));
    }
    return card_;
  }

  // Reuses the live rank group when placement matches; otherwise starts one.
  // A group that failed is gone (killed); starting a fresh one is also the
  // health check of the GPU before the next evaluation.
  Result<WorkerGroup*> Group(int world, const std::vector<int>& devices, bool emulated,
                             const EvalOptions& o) {
    if (group_ && group_->alive() && group_->options().devices == devices) {
      // A warm group is reused only if its contexts still work (under MPS a
      // candidate's fatal fault can reach the other clients of the GPU).
      if (group_->All({{"op", proto::op::kHealth}}, o.setup_deadline_s, "health").ok())
        return group_.get();
      LogWarn("evaluator", "the harness group failed its health check; starting a fresh one");
    }
    group_.reset();
    GroupOptions g;
    g.worker_path = worker_;
    g.world = world;
    g.devices = devices;
    g.emulated = emulated;
    g.start_deadline_s = o.setup_deadline_s;
    if (emulated && !mps_tried_) {
      mps_tried_ = true;
      mps_ = MpsDaemon::StartIfAvailable();
      if (!mps_) {
        LogWarn(
            "evaluator",
            "ranks share a GPU without MPS: spin barriers between ranks will time-slice (slow)");
      }
    }
    if (emulated && mps_) {
      g.env = mps_->Env();
      g.mps_dir = g.env["CUDA_MPS_PIPE_DIRECTORY"];
    }
    auto started = WorkerGroup::Start(g);
    if (!started.ok() && mps_) {
      LogWarn("evaluator", "rank group under MPS failed ({}); retrying without MPS",
              started.status().message());
      mps_.reset();
      g.env.clear();
      g.mps_dir.clear();
      started = WorkerGroup::Start(g);
    }
    if (!started.ok()) return started.status();
    group_ = std::move(started).value();
    return group_.get();
  }

  // One compiler for every evaluation with the same options, so that what it
  // learns once (the toolchain's version and search paths, the link checker)
  // carries over between evaluations.
  Compiler& CompilerFor(const CompileOptions& o) {
    if (!compiler_ || compiler_options_.cache_dir != o.cache_dir ||
        compiler_options_.jail != o.jail || compiler_options_.timeout != o.timeout) {
      compiler_ = std::make_unique<Compiler>(o);
      compiler_options_ = o;
    }
    return *compiler_;
  }

  std::filesystem::path worker_;
  std::unique_ptr<Compiler> compiler_;
  CompileOptions compiler_options_;
  json card_;
  // Declared before group_: the workers (MPS clients) exit before the daemon.
  std::unique_ptr<MpsDaemon> mps_;
  bool mps_tried_ = false;
  std::unique_ptr<WorkerGroup> group_;
};

}  // namespace

std::unique_ptr<Evaluator> MakeEvaluator(std::filesystem::path worker_path) {
  // The coordinator holds API keys: no process of the same user may read its
  // memory or environment (candidates have no capabilities to override this).
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (worker_path.empty()) worker_path = DefaultWorkerPath();
  return std::make_unique<RealEvaluator>(std::move(worker_path));
}

}  // namespace kforge::eval
