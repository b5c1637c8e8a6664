// The real Evaluator: compile and policy-check the candidate, place ranks on
// GPUs, keep a rank group of kforge-worker processes alive across
// evaluations, run the phases, and write the kforge.eval/1 document.
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <optional>
#include <string_view>

#include "compile/policy.h"
#include "kforge/core/fs.h"
#include "kforge/core/log.h"
#include "kforge/evaluator/canary.h"
#include "kforge/evaluator/compile.h"
#include "kforge/evaluator/hardware.h"
#include "protocol/messages.h"
#include "run/attempt.h"
#include "run/baseline_cache.h"
#include "run/canary.h"
#include "run/expert.h"
#include "run/placement.h"
#include "run/trace.h"
#include "run/warm_groups.h"
#include "session.h"

namespace kforge::eval {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::vector<std::string> LibrariesFor(const std::string& source, const Policy& policy,
                                      bool reference) {
  std::vector<std::string> libs;
  if ((reference || policy.nccl) && source.find("nccl") != std::string::npos)
    libs.push_back("nccl");
  if ((reference || policy.cublas) && source.find("cublas") != std::string::npos)
    libs.push_back("cublas");
  if ((reference || policy.cufft) && source.find("cufft") != std::string::npos)
    libs.push_back("cufft");
  if ((reference || policy.cudnn) && source.find("cudnn") != std::string::npos)
    libs.push_back("cudnn");
  return libs;
}

// The shared objects an evaluation loads: the candidate's, the task's
// reference (the baseline) and its expert kernel where one is timed.
struct Objects {
  fs::path candidate, reference;
  ExpertObject expert;
};

// The reference group runs trusted code in candidate-role processes, whose
// failures WorkerGroup reports as runtime errors: in the reference's calls
// they are kforge's, never a verdict on the candidate.
Status BaselinesTimed(EvalSession& s, bool after) {
  Status st = TimeBaselines(s, after);
  if (st.ok() || st.kind() == ErrorKind::kHarness) return st;
  return Error(ErrorKind::kHarness,
               "timing the baseline: the task's reference failed: " + st.message());
}

Status StartReference(EvalSession& s, const Objects& objects) {
  if (Status st = StartServed(s, s.reference, objects.reference); !st.ok())
    return Error(ErrorKind::kHarness, "starting the reference group: " + st.message());
  return Status::Ok();
}

// Where every bench size's baseline is a reused record, the reference group
// is only needed after the candidate (to confirm the records): it is started
// now in the background (run/warm_groups.h), so that its spawn and CUDA
// initialisation overlap the candidate's check sizes, which are not timed,
// and the first bench size waits for it. The candidate's timed calls then
// have the reference group idle beside them, as in an evaluation that timed
// its baseline before the candidate. Returns whether a start is under way.
bool StartReferenceAhead(EvalSession& s) {
  if (s.warm_groups == nullptr || !s.warm_groups->enabled() || !s.options->warm_groups ||
      !s.options->timing || s.reference.alive()) {
    return false;
  }
  if (std::none_of(s.plans.begin(), s.plans.end(), [](const SizePlan& p) { return !p.check; }))
    return false;
  s.warm_groups->Refill(s.reference.who, ServedShape(s, s.reference));
  return true;
}

// Everything up to the candidate's last size, in order: the reference group
// started and the baseline timed through it (no candidate code alive
// anywhere) unless this evaluator timed it recently, the candidate started,
// then every size.
Status RunPhases(EvalSession& s, Attempt& a, const Objects& objects) {
  KF_RETURN_IF_ERROR(PlanSizes(s));
  if (s.plans.empty()) return Error(ErrorKind::kInvalidInput, "no sizes to evaluate");
  KF_RETURN_IF_ERROR(PrepareHarness(s, objects.reference));
  a.Mark("prepare_harness");
  if (s.options->timing && ReuseBaselines(s) > 0) {
    KF_RETURN_IF_ERROR(StartReference(s, objects));
    a.Mark("reference_start");
    KF_RETURN_IF_ERROR(BaselinesTimed(s, false));
    a.Mark("baseline_before");
  }
  KF_RETURN_IF_ERROR(StartServed(s, s.candidate, objects.candidate));
  a.Mark("candidate_start");
  bool starting = StartReferenceAhead(s);
  for (SizePlan& plan : s.plans) {
    if (starting && !plan.check) {
      // No process starts while timed calls run.
      s.warm_groups->Settle();
      a.Mark("reference_ahead");
      starting = false;
    }
    KF_RETURN_IF_ERROR(plan.check ? RunCheckSize(s, plan) : RunBenchSize(s, plan));
    a.Mark((plan.check ? "check " : "bench ") + plan.size.label);
  }
  return Status::Ok();
}

// The phases, then the candidate killed, then (timing) the baseline again
// through the reference group with no candidate process left, so that drift
// shows; a reused baseline is confirmed by a short block now, and timed in
// full where the clocks or that block disagree with it.
Status RunSession(EvalSession& s, Attempt& a, const Objects& objects) {
  Status st = RunPhases(s, a, objects);
  a.Restart();
  StopServed(s, s.candidate);
  a.Mark("candidate_stop");
  const bool bench =
      std::any_of(s.plans.begin(), s.plans.end(), [](const SizePlan& p) { return !p.check; });
  if (st.ok() && s.options->timing && bench) {
    DropStaleBaselines(s);
    if (!s.reference.alive()) {
      st = StartReference(s, objects);
      a.Mark("reference_start");
    }
    if (st.ok()) st = BaselinesTimed(s, true);
    a.Mark("baseline_after");
    if (st.ok() && ExpertToTime(*s.task, *s.options)) {
      TimeExpert(s, objects.expert);
      a.Mark("expert");
    } else if (st.ok() && !s.options->expert && s.expert_report.contains("kernel")) {
      s.expert_report["skipped"] = "left out (--no-expert)";
    }
    if (st.ok()) FinishTiming(s);
  }
  StopServed(s, s.reference);
  RecordBaselines(s);
  return st;
}

// Whether the reference and expert groups are started ahead too
// (KFORGE_WARM_TRUSTED_GROUPS=1). Off by default: on an H100 at W = 2, with
// them waiting beside the candidate's, back-to-back evaluations took longer
// (the refill of three groups is waited for) and the small sizes' speedups
// spread wider (docs/methodology.md, "Warm served groups"), on another machine
// than the candidate-only numbers, so the comparison is still to be made on one.
bool WarmTrustedGroups() {
  const char* v = std::getenv("KFORGE_WARM_TRUSTED_GROUPS");
  return v && std::string_view(v) == "1";
}

// The served groups this evaluation started, most wanted first: what the
// next one of the same shape will want started ahead. An expert that was
// skipped after its group started is not tried again (failed_experts_): no
// group waits for it.
std::vector<WarmShape> ServedShapes(const EvalSession& s) {
  std::vector<WarmShape> shapes;
  const bool trusted_too = WarmTrustedGroups();
  for (const ServedGroup* g : {&s.candidate, &s.reference, &s.expert}) {
    if (!g->shape || (g == &s.expert && s.expert_report.contains("skipped"))) continue;
    if (g != &s.candidate && !trusted_too) continue;
    shapes.push_back({g->who, *g->shape});
  }
  return shapes;
}

// The result's `candidate_group`, `reference_group` and `expert_group`: for
// each served group that was started, whether it was started ahead.
void ReportServedGroups(const EvalSession& s, Attempt& a) {
  for (const ServedGroup* g : {&s.candidate, &s.reference, &s.expert})
    if (g->shape) a.doc()[g->who + "_group"] = {{"warm", g->warm}};
}

// The canary in what the candidate's processes reported (an error message
// its code forged, a profile's metric names): found, an integrity finding
// like one in its outputs.
void LookForCanaryInReports(EvalSession& s, const Status& st) {
  const int rank = s.failure.is_object() ? s.failure.value("rank", -1) : -1;
  const CanaryFound found = CanaryInReports(s.options->canary,
                                            {{"error", st.message() + " " + s.failure.dump()},
                                             {"profile", s.profile.dump()},
                                             {"sandbox", s.sandbox_report.dump()},
                                             {"correctness", s.checks.dump()}},
                                            rank);
  if (!found.found()) return;
  s.integrity.push_back(CanaryFinding(found));
  s.canary_found = found.where;
}

class RealEvaluator final : public Evaluator {
 public:
  RealEvaluator(std::filesystem::path worker, std::optional<HardwareCard> card)
      : worker_(std::move(worker)), card_(std::move(card)) {}

  // Compile and check, place, then run the phases in a session: each returns
  // early through `a` when the verdict is already known.
  Result<json> Evaluate(const Task& task, const std::string& source, const std::string& name,
                        const EvalOptions& asked) override {
    EvalOptions options = asked;
    if (options.nccl_self_test) options.timing = false;  // W = 1 is never a benchmark
    if (!options.canary.empty() && !IsCanaryToken(options.canary)) {
      return Error(ErrorKind::kInvalidInput,
                   "the canary must be \"kforge-canary-\" and 32 lower-case hex digits");
    }
    KF_ASSIGN_OR_RETURN(Dtype dtype, ChosenDtype(task, options));
    Attempt a(task, source, name, dtype, options.compile_only);
    // The world asked for; placement below says the one that ran. A
    // compile-only document places no ranks and keeps the asked one.
    if (options.world > 0) a.doc()["world"] = options.world;
    // Placement first (it decides the arch), unless only compiling.
    HardwareCard card;
    if (!options.compile_only) {
      KF_ASSIGN_OR_RETURN(card, Hardware(options.gpus));
    }
    a.Mark("hardware");
    KF_ASSIGN_OR_RETURN(Objects objects, CompileAndCheck(a, task, source, name,
                                                         TargetArch(card, options.arch), options));
    if (a.finished()) return a.doc();
    KF_ASSIGN_OR_RETURN(Placement place, Place(task, card, options));
    a.doc()["world"] = place.world;
    a.doc()["devices"] = place.devices;
    a.doc()["emulated"] = place.emulated;
    if (options.nccl_self_test) a.doc()["self_test"] = "nccl_w1";
    a.doc()["gpu"] = {{"name", card.gpus.front().name}};
    a.Mark("policy");
    // A warm group started after the last evaluation is ready (or failed)
    // before this one uses the GPUs: no process starts during its phases.
    const auto settle_t0 = std::chrono::steady_clock::now();
    warm_.Settle();
    TraceExchange("warm groups", "wait for the refill", "harness_group", settle_t0);
    const auto group_t0 = std::chrono::steady_clock::now();
    KF_ASSIGN_OR_RETURN(WorkerGroup * group, Group(place, options));
    TraceExchange("harness", "health check or start", "harness_group", group_t0);
    a.Mark("harness_group");
    EvalSession s;
    Open(s, task, dtype, place, *group, card, options);
    s.baselines = &baselines_;
    s.warm_groups = &warm_;
    s.reference_object = objects.reference;
    s.expert_report = ExpertStatement(task);
    Status st = RunSession(s, a, objects);
    ReportServedGroups(s, a);
    if (!options.canary.empty() && s.canary_found.empty()) LookForCanaryInReports(s, st);
    // An expert object that failed its timed calls is not tried again by this
    // evaluator: each try costs a harness group, and trusted code that failed
    // once will fail again.
    if (!objects.expert.object.empty() && s.expert_report.contains("skipped"))
      failed_experts_[objects.expert.object] = s.expert_report["skipped"].get<std::string>();
    a.FinishFrom(s, st);
    // The next evaluation of this shape finds its served groups started,
    // unless the GPUs' harness group failed (a fresh one checks them first).
    if (options.warm_groups && group->alive()) warm_.Refill(ServedShapes(s));
    return a.doc();
  }

 private:
  // The card handed to MakeEvaluator, else one probe per evaluator.
  Result<HardwareCard> Hardware(const std::vector<int>& gpus) {
    if (!card_) {
      KF_ASSIGN_OR_RETURN(HardwareCard probed, ProbeHardware(gpus, worker_));
      card_ = std::move(probed);
    }
    return *card_;
  }

  // The candidate and the reference, compiled together; the candidate's
  // policy checked on its object. A candidate that fails either (or an
  // evaluation that only compiles) finishes `a`; a reference that does not
  // compile, or a missing toolchain, is the harness's error.
  Result<Objects> CompileAndCheck(Attempt& a, const Task& task, const std::string& source,
                                  const std::string& name, const std::string& arch,
                                  const EvalOptions& options) {
    KF_ASSIGN_OR_RETURN(std::string reference, ReadFile(task.reference));
    const CompileJob candidate_job{
        source, name, arch, LibrariesFor(source, task.policy, options.trusted), {}};
    const CompileJob reference_job{reference,
                                   task.key + "/reference.cu",
                                   arch,
                                   LibrariesFor(reference, task.policy, true),
                                   {}};
    // Both at once, each by its own compiler into its own cache; the expert
    // (trusted, under the candidates' policy) after the reference, by its compiler.
    Compiler& trusted = CompilerFor(options, true);
    const bool expert = ExpertToTime(task, options);
    std::optional<CompileJob> expert_job;
    if (expert) {
      if (auto read = ReadFile(task.expert->kernel); read.ok() && !read->empty()) {
        expert_job = CompileJob{
            *read,
            task.key + "/" + fs::relative(task.expert->kernel, task.dir).generic_string(),
            arch,
            LibrariesFor(*read, task.policy, false),
            {}};
      }
    }
    CompileResult expert_compiled;
    auto reference_done = std::async(std::launch::async, [&] {
      CompileResult r = trusted.Compile(reference_job);
      if (expert_job) expert_compiled = trusted.Compile(*expert_job);
      return r;
    });
    std::vector<CompileResult> compiled;
    compiled.push_back(CompilerFor(options, false).Compile(candidate_job));
    compiled.push_back(reference_done.get());
    a.Mark("compile");
    a.doc()["compile"] = compiled[0].ToJson();
    if (!compiled[0].status.ok()) {
      ErrorKind k = compiled[0].status.kind();
      if (k == ErrorKind::kNotFound || k == ErrorKind::kIo) return compiled[0].status;
      // A library the task forbids is not linked, so using it fails at the
      // link check: the policy's reason is the one to report.
      if (std::vector<std::string> v = CheckPolicy(KernelSymbols{}, source, task.policy);
          !v.empty() && !options.trusted) {
        a.doc()["policy"] = {{"violations", v}};
        a.Finish(ErrorKind::kPolicyViolation, "policy violation: " + v.front());
        return Objects{};
      }
      a.Finish(ErrorKind::kCompileError, compiled[0].status.message());
      return Objects{};
    }
    if (!compiled[1].status.ok()) {
      return Error(ErrorKind::kHarness,
                   "the task's reference does not compile: " + compiled[1].status.message());
    }
    ExpertObject expert_object;
    if (expert) {
      if (!expert_job) {
        expert_object.error = "cannot read " + task.expert->kernel.string();
      } else if (!expert_compiled.status.ok()) {
        expert_object.error = "it does not compile: " + expert_compiled.status.message();
      } else if (auto failed = failed_experts_.find(expert_compiled.shared_object);
                 failed != failed_experts_.end()) {
        expert_object.error =
            "failed earlier in this evaluator, not tried again: " + failed->second;
      } else {
        expert_object.object = expert_compiled.shared_object;
      }
    }
    KF_ASSIGN_OR_RETURN(auto violations,
                        CheckKernelPolicy(compiled[0].shared_object, source, task.policy));
    if (!violations.empty() && !options.trusted) {
      a.doc()["policy"] = {{"violations", violations}};
      a.Finish(ErrorKind::kPolicyViolation, "policy violation: " + violations.front());
    } else if (options.compile_only) {
      a.Finish(ErrorKind::kOk, "not evaluated (--compile-only: no GPU run)");
    }
    return Objects{compiled[0].shared_object, compiled[1].shared_object, expert_object};
  }

  void Open(EvalSession& s, const Task& task, Dtype dtype, const Placement& place,
            WorkerGroup& group, const HardwareCard& card, const EvalOptions& options) const {
    s.task = &task;
    s.dtype = dtype;
    s.world = place.world;
    s.devices = place.devices;
    s.emulated = place.emulated;
    s.harness = &group;
    s.options = &options;
    s.worker = worker_;
    s.worker_env = group.options().env;
    s.mps_dir = group.options().mps_dir;
    s.canary_needles = CanaryNeedles(options.canary);
    if (!group.options().canary.empty())
      s.canary_planted = {kPlantedHarnessEnv, kPlantedHarnessFile};
    const GpuInfo& gpu = card.gpus.front();
    s.l2_bytes = gpu.l2_bytes > 0 ? static_cast<size_t>(gpu.l2_bytes) : size_t{50} << 20;
    s.peaks = PeaksOf(card, gpu, dtype);
  }

  // Reuses the live rank group when placement matches; otherwise starts one.
  // A group that failed is gone (killed); starting a fresh one is also the
  // health check of the GPU before the next evaluation.
  Result<WorkerGroup*> Group(const Placement& place, const EvalOptions& o) {
    // The canary is planted when the group starts: another canary (a red-team
    // run after another on an eval-server) needs a fresh group.
    if (group_ && group_->alive() && group_->options().devices == place.devices &&
        group_->options().canary == o.canary) {
      // A warm group is reused only if its contexts still work (under MPS a
      // candidate's fatal fault can reach the other clients of the GPU).
      if (group_->All({{"op", proto::op::kHealth}}, o.setup_deadline_s, "health").ok())
        return group_.get();
      LogWarn("evaluator", "the harness group failed its health check; starting a fresh one");
      // The fault that broke its contexts may have reached the waiting
      // candidate groups' too (MPS clients of the same GPU).
      warm_.Clear();
    }
    group_.reset();
    GroupOptions g;
    g.worker_path = worker_;
    g.world = place.world;
    g.devices = place.devices;
    g.emulated = place.emulated;
    g.start_deadline_s = o.setup_deadline_s;
    g.canary = o.canary;
    if (place.emulated) UseMps(g);
    auto started = WorkerGroup::Start(g);
    if (!started.ok() && mps_) {
      LogWarn("evaluator", "rank group under MPS failed ({}); retrying without MPS",
              started.status().message());
      warm_.Clear();  // they are clients of the daemon that is going
      mps_.reset();
      g.env.clear();
      g.mps_dir.clear();
      started = WorkerGroup::Start(g);
    }
    if (!started.ok()) return started.status();
    group_ = std::move(started).value();
    return group_.get();
  }

  // Ranks that share a GPU run under MPS when it can start (tried once).
  void UseMps(GroupOptions& g) {
    if (!mps_tried_) {
      mps_tried_ = true;
      mps_ = MpsDaemon::StartIfAvailable();
      if (!mps_) {
        LogWarn(
            "evaluator",
            "ranks share a GPU without MPS: spin barriers between ranks will time-slice (slow)");
      }
    }
    if (mps_) {
      g.env = mps_->Env();
      g.mps_dir = g.env["CUDA_MPS_PIPE_DIRECTORY"];
    }
  }

  // Two compilers, each kept across evaluations with the same options (what
  // one learns once, the toolchain's version and search paths and the link
  // checker, carries over): one for candidates' sources, whose nvcc runs
  // jailed when kforge-jail is installed beside the worker, caching under
  // <cache>/kernels; one for the tasks' own references, caching under
  // <cache>/trusted/kernels, so that no object built from a candidate's
  // source is ever loaded as the baseline (docs/integrity.md).
  struct CompilerSlot {
    std::unique_ptr<Compiler> compiler;
    CompileOptions options;
  };
  Compiler& CompilerFor(const EvalOptions& options, bool trusted) {
    CompileOptions o;
    const fs::path root = options.cache_dir.empty() ? DefaultCacheDir() : options.cache_dir;
    o.cache_dir = trusted ? root / "trusted" : root;
    if (fs::path jail = worker_.parent_path() / "kforge-jail"; !trusted && fs::exists(jail))
      o.jail = jail;
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(options.compile_timeout_s * 1000));
    CompilerSlot& slot = trusted ? trusted_compiler_ : candidate_compiler_;
    if (!slot.compiler || slot.options.cache_dir != o.cache_dir || slot.options.jail != o.jail ||
        slot.options.timeout != o.timeout) {
      slot.compiler = std::make_unique<Compiler>(o);
      slot.options = o;
    }
    return *slot.compiler;
  }

  std::filesystem::path worker_;
  CompilerSlot candidate_compiler_, trusted_compiler_;
  BaselineCache baselines_;
  std::map<std::filesystem::path, std::string> failed_experts_;  // object -> why it was skipped
  std::optional<HardwareCard> card_;
  // Declared before group_: the workers (MPS clients) exit before the daemon.
  std::unique_ptr<MpsDaemon> mps_;
  bool mps_tried_ = false;
  std::unique_ptr<WorkerGroup> group_;
  // Declared after mps_ (its groups are MPS clients too); each is killed
  // when the evaluator is destroyed.
  WarmGroups warm_;
};

}  // namespace

std::unique_ptr<Evaluator> MakeEvaluator(std::filesystem::path worker_path,
                                         std::optional<HardwareCard> card) {
  // The coordinator holds API keys: no process of the same user may read its
  // memory or environment (candidates have no capabilities to override this).
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (worker_path.empty()) worker_path = DefaultWorkerPath();
  return std::make_unique<RealEvaluator>(std::move(worker_path), std::move(card));
}

}  // namespace kforge::eval
