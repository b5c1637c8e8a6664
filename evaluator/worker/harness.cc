#include "harness.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "cuda_check.h"
#include "device_ops.h"
#include "kforge/core/hash.h"
#include "probe.h"
#include "protocol/problem_wire.h"
#include "serve_loop.h"

namespace kforge::worker {

using nlohmann::json;
namespace proto = eval::proto;

HarnessWorker::HarnessWorker(const WorkerArgs& args) : args_(args), channel_(args.channel_fd) {}

HarnessWorker::~HarnessWorker() {
  baseline_.Unload();
  SetProcessBackend(nullptr);
  emulated_.reset();
  private_peers_.Close();
  if (check_ != nullptr) cudaFree(check_);
  if (flush_ != nullptr) cudaFree(flush_);
  if (check_sink_ != nullptr) cudaFree(check_sink_);
}

int HarnessWorker::Run() {
  auto control = eval::ControlBlock::Attach(args_.control_fd);
  if (!control.ok()) {
    std::fprintf(stderr, "kforge-worker: %s\n", control.status().ToString().c_str());
    return 2;
  }
  control_ = std::move(control).value();
  if (Status s = Hello(); !s.ok()) {
    (void)channel_.Send(proto::ErrorReply(s, args_.rank));
    return 3;
  }
  const OpTable table = {
      {proto::op::kNcclInit, Bind(this, &HarnessWorker::NcclInit)},
      {proto::op::kNcclId,
       [](const eval::Message&, std::vector<int>*) -> Result<json> {
         KF_ASSIGN_OR_RETURN(std::string id, NcclUniqueId());
         return json{{"id", HexEncode(id.data(), id.size())}};
       }},
      {proto::op::kAlloc,
       [this](const eval::Message& m, std::vector<int>* fds) { return Alloc(m, fds); }},
      {proto::op::kPeers, Bind(this, &HarnessWorker::Peers)},
      {proto::op::kConfigure, Bind(this, &HarnessWorker::Configure)},
      {proto::op::kLoadBaseline, Bind(this, &HarnessWorker::LoadBaseline)},
      {proto::op::kSetup, Bind(this, &HarnessWorker::Setup)},
      {proto::op::kTeardown, Bind(this, &HarnessWorker::Teardown)},
      {proto::op::kFree, Bind(this, &HarnessWorker::Free)},
      {proto::op::kHealth, Bind(this, &HarnessWorker::Health)},
      {proto::op::kInputs, Bind(this, &HarnessWorker::Inputs)},
      {proto::op::kBaselineRun, Bind(this, &HarnessWorker::BaselineRun)},
      {proto::op::kPoison, Bind(this, &HarnessWorker::Poison)},
      {proto::op::kReadOutputs,
       [this](const eval::Message& m, std::vector<int>* fds) { return ReadOutputs(m, fds); }},
      {proto::op::kVerify, Bind(this, &HarnessWorker::Verify)},
      {proto::op::kDrive, Bind(this, &HarnessWorker::Drive)},
      {proto::op::kCalibrate, Bind(this, &HarnessWorker::Calibrate)},
  };
  // A CUDA error inside the baseline leaves this context unusable: stop so
  // that the coordinator starts a fresh harness group.
  return Serve(channel_, args_.rank, table, [](const Status& s) {
    return s.kind() == ErrorKind::kRuntimeError && cudaPeekAtLastError() != cudaSuccess;
  });
}

Status HarnessWorker::Hello() {
  KF_CUDA(cudaSetDevice(args_.device));
  KF_CUDA(cudaFree(nullptr));  // create the context now, not inside a timed call
  KF_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  void* check = nullptr;
  KF_CUDA(cudaMalloc(&check, kMaxChecks * sizeof(DeviceCheck)));
  check_ = static_cast<DeviceCheck*>(check);
  base_.rank = args_.rank;
  base_.world = args_.world;
  base_.device = args_.device;
  base_.emulated = args_.emulated;
  base_.stream = stream_;
  KF_RETURN_IF_ERROR(QueryGpuInfo(args_.device, &base_.gpu));
  {
    // Emulated ranks share one L2: each reads its share of as many bytes as
    // it holds. KFORGE_WORKER_L2_FLUSH=0 leaves the flush out (diagnosis only).
    const size_t share = args_.emulated ? static_cast<size_t>(std::max(args_.world, 1)) : 1;
    const char* flush = std::getenv("KFORGE_WORKER_L2_FLUSH");
    const bool no_flush = flush != nullptr && std::string_view(flush) == "0";
    flush_bytes_ =
        no_flush ? 0 : (static_cast<size_t>(base_.gpu.l2_bytes) / share + 255) / 256 * 256;
    void* sink = nullptr;
    KF_CUDA(cudaMalloc(&sink, sizeof(uint32_t)));
    check_sink_ = static_cast<uint32_t*>(sink);
    if (flush_bytes_ > 0) {
      KF_CUDA(cudaMalloc(&flush_, flush_bytes_));
      KF_CUDA(cudaMemset(flush_, 0, flush_bytes_));
    }
  }
  proto::Hello h;
  h.role = "harness";
  h.rank = args_.rank;
  h.pid = static_cast<int>(getpid());
  h.device = args_.device;
  h.gpu = {base_.gpu.name,
           base_.gpu.cc_major,
           base_.gpu.cc_minor,
           base_.gpu.sm_count,
           base_.gpu.max_threads_per_block,
           base_.gpu.smem_per_block_optin,
           base_.gpu.smem_per_sm,
           base_.gpu.l2_bytes,
           base_.gpu.hbm_bytes,
           base_.gpu.p2p_all};
  if (!args_.emulated && args_.rank == 0) {
    KF_ASSIGN_OR_RETURN(std::string id, NcclUniqueId());
    h.nccl_id = HexEncode(id.data(), id.size());
  }
  return channel_.Send(h.ToJson());
}

Result<json> HarnessWorker::NcclInit(const eval::Message& m) {
  auto id_hex = m.body.is_object() && m.body.contains("id") && m.body["id"].is_string()
                    ? m.body["id"].get<std::string>()
                    : "";
  std::string id(128, '\0');
  KF_RETURN_IF_ERROR(HexDecode(id_hex, id.data(), id.size()));
  KF_ASSIGN_OR_RETURN(nccl_, MakeNcclBackend(args_.rank, args_.world, id));
  return json{{"backend", "nccl"}};
}

Result<json> HarnessWorker::Alloc(const eval::Message& m, std::vector<int>* fds) {
  KF_ASSIGN_OR_RETURN(proto::AllocRequest req, proto::AllocRequest::Parse(m.body));
  view_.reset();
  private_peers_.Close();
  // Reuse what is big enough (a warm group serves many evaluations); the
  // candidate arena is zeroed for every evaluation either way.
  if (private_.bytes() < req.private_bytes) {
    private_ = DeviceArena();
    KF_ASSIGN_OR_RETURN(private_, DeviceArena::Allocate(req.private_bytes));
  }
  // The candidate's inputs go in a part it maps read-only, where this device
  // can share memory that way (CUDA VMM); else the arena is one cudaMalloc
  // shared through CUDA IPC, read-write, and the reply says why.
  const size_t ro = req.candidate_readonly_bytes;
  int device = 0;
  KF_CUDA(cudaGetDevice(&device));
  if (ro > 0 && !vmm_refused_) vmm_refused_ = VmmUnsupportedReason(device);
  const bool split = ro > 0 && vmm_refused_->empty();
  const size_t have_ro = candidate_.readonly_bytes();
  const bool fits = split
                        ? have_ro >= ro && candidate_.bytes() - have_ro >= req.candidate_bytes - ro
                        : have_ro == 0 && candidate_.bytes() >= req.candidate_bytes;
  if (!fits) {
    candidate_ = DeviceArena();
    if (split) {
      auto a = DeviceArena::Split(device, ro, req.candidate_bytes);
      if (a.ok()) {
        candidate_ = std::move(a).value();
      } else {
        vmm_refused_ = a.status().message();
      }
    }
    if (candidate_.base() == nullptr) {
      KF_ASSIGN_OR_RETURN(candidate_, DeviceArena::Allocate(req.candidate_bytes));
    }
  } else {
    KF_CUDA(cudaMemset(candidate_.base(), 0, candidate_.bytes()));
  }
  proto::AllocReply reply;
  reply.private_handle = private_.handle();
  reply.private_bytes = private_.bytes();
  reply.candidate = {candidate_.handle(), candidate_.bytes(), candidate_.readonly_bytes()};
  if (ro > 0 && !reply.candidate.split()) reply.readonly_refused = *vmm_refused_;
  if (reply.candidate.split()) {
    KF_ASSIGN_OR_RETURN(std::vector<int> exported, candidate_.ExportFds());
    fds->insert(fds->end(), exported.begin(), exported.end());
  }
  return reply.ToJson();
}

Result<json> HarnessWorker::Peers(const eval::Message& m) {
  KF_ASSIGN_OR_RETURN(proto::PeersRequest req, proto::PeersRequest::Parse(m.body));
  if (static_cast<int>(req.private_handles.size()) != args_.world) {
    return Error(ErrorKind::kHarness, "peers: one private handle per rank is required");
  }
  KF_RETURN_IF_ERROR(private_peers_.Open(req.private_handles, args_.rank, private_.base()));
  return json::object();
}

Result<json> HarnessWorker::Configure(const eval::Message& m) {
  KF_ASSIGN_OR_RETURN(proto::ConfigureRequest req, proto::ConfigureRequest::Parse(m.body));
  if (req.problem.world != args_.world)
    return Error(ErrorKind::kHarness, "configure: wrong world size");
  if (!private_peers_.open()) return Error(ErrorKind::kHarness, "configure before peers");
  if (baseline_.set_up()) KF_RETURN_IF_ERROR(baseline_.Teardown());
  ProblemView v;
  v.problem = std::move(req.problem);
  v.layout = proto::ComputeLayout(v.problem, req.sets, args_.emulated, /*pristine=*/true);
  v.params = proto::KernelParams(v.problem);
  v.groups = GroupViews(v.problem, args_.rank);
  if (req.readonly_bytes != candidate_.readonly_bytes()) {
    return Error(ErrorKind::kHarness, "configure: not the candidate arena's read-only part");
  }
  candidate_layout_ = proto::ComputeLayout(v.problem, req.sets, args_.emulated, /*pristine=*/false,
                                           req.readonly_bytes);
  if (v.layout.total > private_.bytes() || candidate_layout_.total > candidate_.bytes() ||
      candidate_layout_.readonly_used > candidate_layout_.readonly_bytes) {
    return Error(ErrorKind::kHarness, "configure: the problem does not fit the arenas");
  }
  sets_ = req.sets;
  rms_vs_baseline_ = std::move(req.rms_vs_baseline);
  view_ = std::move(v);
  // The candidate's signal pad starts zeroed for every problem (its kf_setup
  // may rely on it, as the documentation promises).
  KF_CUDA(cudaMemset(Candidate(candidate_layout_.pad_off), 0, candidate_layout_.pad_bytes));
  KF_RETURN_IF_ERROR(
      InstallCollectives(base_, *view_, private_peers_, &control_, nccl_.get(), &emulated_));
  return json::object();
}

Result<json> HarnessWorker::LoadBaseline(const eval::Message& m) {
  KF_ASSIGN_OR_RETURN(proto::PathRequest req, proto::PathRequest::Parse(m.body));
  KF_RETURN_IF_ERROR(baseline_.Load(req.path));
  return json::object();
}

kf_ctx HarnessWorker::BaselineContext(int set) const {
  return BuildContext(base_, *view_, private_peers_, set);
}

Result<json> HarnessWorker::Setup() {
  if (!configured()) return Error(ErrorKind::kHarness, "setup before configure");
  // The signal pad starts zeroed on every rank before any rank's kf_setup.
  KF_CUDA(cudaMemsetAsync(Private(view_->layout.pad_off), 0, view_->layout.pad_bytes, stream_));
  KF_CUDA(cudaStreamSynchronize(stream_));
  KF_RETURN_IF_ERROR(control_.Barrier());
  KF_RETURN_IF_ERROR(baseline_.Setup(BaselineContext(0)));
  KF_RETURN_IF_ERROR(control_.Barrier());
  return json::object();
}

Result<json> HarnessWorker::Teardown() {
  KF_RETURN_IF_ERROR(baseline_.Teardown());
  return json::object();
}

Result<json> HarnessWorker::Free() {
  KF_RETURN_IF_ERROR(baseline_.Teardown());
  KF_CUDA(cudaDeviceSynchronize());
  SetProcessBackend(nullptr);
  emulated_.reset();
  view_.reset();
  private_peers_.Close();
  // Nobody frees an arena while a peer still has it mapped.
  KF_RETURN_IF_ERROR(control_.Barrier());
  private_ = DeviceArena();
  candidate_ = DeviceArena();
  return json::object();
}

// After a candidate's crash the GPU may be left in a bad state (under MPS a
// fatal fault of one client can reach the others): a small round trip proves
// this context still works.
Result<json> HarnessWorker::Health() {
  KF_CUDA(cudaMemsetAsync(check_, 0, sizeof(DeviceCheck), stream_));
  KF_CUDA(LaunchNull(stream_).ok() ? cudaSuccess : cudaErrorUnknown);
  KF_CUDA(cudaStreamSynchronize(stream_));
  KF_CUDA(cudaGetLastError());
  return json::object();
}

}  // namespace kforge::worker
