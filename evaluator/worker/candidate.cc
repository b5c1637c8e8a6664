#include "candidate.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cuda_check.h"
#include "device_ops.h"
#include "kforge/core/hash.h"
#include "probe.h"
#include "protocol/messages.h"
#include "protocol/problem_wire.h"
#include "serve_loop.h"

namespace kforge::worker {

using nlohmann::json;
namespace proto = eval::proto;

CandidateWorker::CandidateWorker(const WorkerArgs& args, sandbox::Report early)
    : args_(args), report_(std::move(early)), channel_(args.channel_fd) {}

CandidateWorker::~CandidateWorker() {
  kernel_.Unload();
  SetProcessBackend(nullptr);
  emulated_.reset();
  arenas_.Close();
}

int CandidateWorker::Run() {
  auto control = eval::ControlBlock::Attach(args_.control_fd);
  auto mailbox = proto::Mailbox::Attach(args_.mailbox_fd);
  if (!control.ok() || !mailbox.ok()) {
    std::fprintf(stderr, "kforge-worker (candidate): control block or mailbox unusable\n");
    return 2;
  }
  control_ = std::move(control).value();
  mailbox_ = std::move(mailbox).value();
  if (Status s = Hello(); !s.ok()) {
    (void)channel_.Send(proto::ErrorReply(s, args_.rank));
    return 3;
  }
  const OpTable table = {
      {proto::op::kAttach,
       [this](const eval::Message& m, std::vector<int>* fds) { return Attach(m, fds); }},
      {proto::op::kConfigure, Bind(this, &CandidateWorker::Configure)},
      {proto::op::kCalibrate, Bind(this, &CandidateWorker::Calibrate)},
      {proto::op::kLoad, Bind(this, &CandidateWorker::Load)},
      {proto::op::kSetup, Bind(this, &CandidateWorker::Setup)},
      {proto::op::kRun, Bind(this, &CandidateWorker::RunOnce)},
      {proto::op::kServe, Bind(this, &CandidateWorker::Serve)},
      {proto::op::kTeardown, Bind(this, &CandidateWorker::Teardown)},
      {proto::op::kDetach, Bind(this, &CandidateWorker::Detach)},
  };
  // A candidate process serves one evaluation; after a failed call its CUDA
  // context may be broken, and the coordinator replaces the whole group.
  return worker::Serve(channel_, args_.rank, table, [](const Status&) { return false; });
}

Status CandidateWorker::Hello() {
  KF_CUDA(cudaSetDevice(args_.device));
  KF_CUDA(cudaFree(nullptr));
  KF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  KF_CUDA(cudaEventCreate(&start_));
  KF_CUDA(cudaEventCreate(&stop_));
  base_.rank = args_.rank;
  base_.world = args_.world;
  base_.device = args_.device;
  base_.emulated = args_.emulated;
  base_.stream = stream_;
  KF_RETURN_IF_ERROR(QueryGpuInfo(args_.device, &base_.gpu));
  if (args_.profile) {
    // Before seccomp: CUPTI reads its metric tables and asks the driver for
    // the chip's counters here. A profiler that cannot start is reported in
    // the profile, never as the evaluation's failure.
    auto p = RangeProfiler::Create(proto::ProfileMetricNames(), proto::kProfilePasses);
    if (p.ok()) {
      profiler_ = std::move(p).value();
    } else {
      profiler_error_ = p.status().message();
    }
  }
  proto::Hello h;
  h.role = "candidate";
  h.rank = args_.rank;
  h.pid = static_cast<int>(getpid());
  h.device = args_.device;
  h.sandbox = report_.ToJson();
  return channel_.Send(h.ToJson());
}

// Maps every rank's candidate arena, starts NCCL when asked, then seals the
// process with seccomp; the listener goes to the coordinator's supervisor.
Result<json> CandidateWorker::Attach(const eval::Message& m, std::vector<int>* fds) {
  if (sealed_) return Error(ErrorKind::kHarness, "attach twice");
  KF_ASSIGN_OR_RETURN(proto::AttachRequest req, proto::AttachRequest::Parse(m.body));
  if (static_cast<int>(req.arenas.size()) != args_.world) {
    return Error(ErrorKind::kHarness, "attach: one arena per rank is required");
  }
  if (m.fds.size() != req.Descriptors()) {
    return Error(ErrorKind::kHarness, "attach: two descriptors per split arena are required");
  }
  // Offsets are the same on every rank, so every rank's read-only part is too.
  readonly_bytes_ = req.arenas[0].readonly_bytes;
  std::vector<ArenaRef> refs;
  size_t next_fd = 0;
  for (const proto::ArenaShare& a : req.arenas) {
    if (a.readonly_bytes != readonly_bytes_) {
      return Error(ErrorKind::kHarness, "attach: the ranks' arenas are split differently");
    }
    ArenaRef r{a.ipc_handle, a.bytes, a.readonly_bytes};
    if (a.split()) {
      r.readonly_fd = m.fds[next_fd++];
      r.writable_fd = m.fds[next_fd++];
    }
    refs.push_back(std::move(r));
  }
  // Mapped read-only, the inputs' part cannot be written from this process:
  // a kernel's store to it faults, and the driver calls that could change
  // the mapping are refused at compile time (compile/policy.cc).
  KF_RETURN_IF_ERROR(arenas_.Open(refs, -1, nullptr));
  if (!req.nccl_id.empty()) {
    if (!args_.nccl)
      return Error(ErrorKind::kHarness, "attach: NCCL for a candidate started without --nccl");
    std::string id(128, '\0');
    KF_RETURN_IF_ERROR(HexDecode(req.nccl_id, id.data(), id.size()));
    KF_ASSIGN_OR_RETURN(nccl_, MakeNcclBackend(args_.rank, args_.world, id));
  }
  sandbox::Policy policy = sandbox::CandidatePolicy(args_.candidate_dir, args_.mps_dir);
  policy.allow_sockets = args_.nccl;
  policy.allow_tcp = args_.nccl;
  int listener = -1;
  if (sandbox::LayerSkipped("seccomp")) {
    report_.Add("seccomp", false, "left out by KFORGE_SANDBOX_SKIP");
  } else {
    sandbox::ApplySeccomp(policy, &report_, &listener);
  }
  sealed_ = true;
  if (listener >= 0) fds->push_back(listener);
  return json{{"sandbox", report_.ToJson()}, {"listener", listener >= 0}};
}

Result<json> CandidateWorker::Configure(const eval::Message& m) {
  if (!arenas_.open()) return Error(ErrorKind::kHarness, "configure before attach");
  KF_ASSIGN_OR_RETURN(proto::ConfigureRequest req, proto::ConfigureRequest::Parse(m.body));
  if (req.problem.world != args_.world)
    return Error(ErrorKind::kHarness, "configure: wrong world size");
  if (kernel_.set_up()) KF_RETURN_IF_ERROR(kernel_.Teardown());
  ProblemView v;
  v.problem = std::move(req.problem);
  if (req.readonly_bytes != readonly_bytes_) {
    return Error(ErrorKind::kHarness, "configure: not the arenas' read-only part");
  }
  v.layout = proto::ComputeLayout(v.problem, req.sets, args_.emulated, /*pristine=*/false,
                                  req.readonly_bytes);
  v.params = proto::KernelParams(v.problem);
  v.groups = GroupViews(v.problem, args_.rank);
  sets_ = req.sets;
  view_ = std::move(v);
  KF_RETURN_IF_ERROR(InstallCollectives(
      base_, *view_, arenas_, &control_, nccl_.get(), &emulated_,
      req.collectives ? nullptr : "this task does not allow the harness collectives"));
  return json::object();
}

Result<double> CandidateWorker::Call(int set, bool null_kernel) {
  if (set < 0 || set >= sets_) return Error(ErrorKind::kHarness, "set out of range");
  KF_CUDA(cudaEventRecord(start_, stream_));
  int rc = 0;
  if (null_kernel) {
    KF_RETURN_IF_ERROR(LaunchNull(stream_));
  } else {
    rc = kernel_.Run(BuildContext(base_, *view_, arenas_, set));
  }
  KF_CUDA(cudaEventRecord(stop_, stream_));
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    return Error(ErrorKind::kRuntimeError, std::string("kf_run: CUDA error ") +
                                               cudaGetErrorName(err) + ": " +
                                               cudaGetErrorString(err));
  }
  KF_RETURN_IF_ERROR(TakeRefusal("kf_run"));
  if (rc != 0) return Error(ErrorKind::kRuntimeError, NonZeroReturn("kf_run", rc));
  float ms = 0;
  KF_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
  return ms * 1000.0;
}

Result<json> CandidateWorker::Calibrate(const eval::Message& m) {
  if (!view_) return Error(ErrorKind::kHarness, "calibrate before configure");
  KF_ASSIGN_OR_RETURN(proto::CalibrateRequest req, proto::CalibrateRequest::Parse(m.body));
  for (int k = 0; k < req.calls; ++k) {
    KF_ASSIGN_OR_RETURN(auto cmd, mailbox_.WaitCommand(last_seq_, &control_.shared()->abort));
    if (cmd.stop) break;
    last_seq_ = cmd.seq;
    auto t = Call(0, /*null_kernel=*/true);
    mailbox_.Answer(cmd.seq, t.ok() ? 0 : 1, t.ok() ? *t : 0);
    if (!t.ok()) return t.status();
  }
  return json::object();
}

Result<json> CandidateWorker::Load(const eval::Message& m) {
  KF_ASSIGN_OR_RETURN(proto::PathRequest req, proto::PathRequest::Parse(m.body));
  std::error_code ec;
  auto dir = std::filesystem::weakly_canonical(args_.candidate_dir, ec);
  auto path = std::filesystem::weakly_canonical(req.path, ec);
  if (ec || path.parent_path() != dir) {
    return Error(ErrorKind::kHarness, "load: the kernel must be in the candidate directory");
  }
  KF_RETURN_IF_ERROR(kernel_.Load(path.string()));
  return json::object();
}

Result<json> CandidateWorker::Setup() {
  if (!view_ || !kernel_.loaded())
    return Error(ErrorKind::kHarness, "setup before configure and load");
  KF_RETURN_IF_ERROR(control_.Barrier());
  KF_RETURN_IF_ERROR(kernel_.Setup(BuildContext(base_, *view_, arenas_, 0)));
  KF_CUDA(cudaDeviceSynchronize());
  KF_RETURN_IF_ERROR(control_.Barrier());
  return json::object();
}

// A correctness call: every rank starts together (a kernel may write into
// its peers) and has finished before any rank replies.
Result<json> CandidateWorker::RunOnce(const eval::Message& m) {
  if (!view_ || !kernel_.set_up()) return Error(ErrorKind::kHarness, "run before setup");
  KF_ASSIGN_OR_RETURN(proto::RunRequest req, proto::RunRequest::Parse(m.body, sets_));
  KF_RETURN_IF_ERROR(control_.Barrier());
  KF_ASSIGN_OR_RETURN(double us, Call(req.set, false));
  (void)us;
  KF_RETURN_IF_ERROR(control_.Barrier());
  return json::object();
}

// Timed calls: answer every post of the harness with the call's (claimed)
// event time, until `calls` are done or the harness says stop. A profiled
// serve runs each call as one pass of the range profiler until every pass is
// in, and replies with the values (or why there are none).
Result<json> CandidateWorker::Serve(const eval::Message& m) {
  if (!view_ || !kernel_.set_up()) return Error(ErrorKind::kHarness, "serve before setup");
  KF_ASSIGN_OR_RETURN(proto::ServeRequest req, proto::ServeRequest::Parse(m.body));
  RangeProfiler* prof = req.profile ? profiler_.get() : nullptr;
  Status prof_status = Status::Ok();
  for (int k = 0; k < req.calls; ++k) {
    KF_ASSIGN_OR_RETURN(auto cmd, mailbox_.WaitCommand(last_seq_, &control_.shared()->abort));
    if (cmd.stop) break;
    last_seq_ = cmd.seq;
    const bool profiled = prof != nullptr && prof_status.ok() && !prof->done();
    if (profiled) prof_status = prof->Begin();
    auto t = Call(static_cast<int>(cmd.set), false);
    if (profiled && prof_status.ok()) prof_status = prof->End();
    mailbox_.Answer(cmd.seq, t.ok() ? 0 : 1, t.ok() ? *t : 0);
    if (!t.ok()) return t.status();
  }
  if (!req.profile) return json::object();
  proto::ServeReply reply;
  if (!args_.profile) {
    reply.profile_error = "this worker was started without --profile";
  } else if (prof == nullptr) {
    reply.profile_error = profiler_error_;
  } else if (!prof_status.ok()) {
    reply.profile_error = prof_status.message();
  } else if (auto v = prof->Values(); v.ok()) {
    reply.profile = std::move(v).value();
  } else {
    reply.profile_error = v.status().message();
  }
  return reply.ToJson();
}

Result<json> CandidateWorker::Teardown() {
  KF_RETURN_IF_ERROR(kernel_.Teardown());
  return json::object();
}

Result<json> CandidateWorker::Detach() {
  KF_RETURN_IF_ERROR(kernel_.Teardown());
  KF_CUDA(cudaDeviceSynchronize());
  SetProcessBackend(nullptr);
  emulated_.reset();
  view_.reset();
  arenas_.Close();
  return json::object();
}

}  // namespace kforge::worker
