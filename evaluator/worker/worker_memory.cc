// Symmetric memory: one cudaMalloc per rank holding every tensor (in `sets`
// rotating copies), the per-kernel workspace and signal pad, and the staging
// buffer of the emulated collectives, at offsets identical on every rank. Peers
// map each other's allocation with CUDA IPC; this works between processes on
// different GPUs (P2P) and between processes sharing one GPU.
#include <algorithm>
#include <cstring>

#include "cuda_check.h"
#include "hex.h"
#include "worker.h"

namespace kforge::worker {
namespace {

constexpr size_t kAlign = 256;

size_t AlignUp(size_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

Result<nlohmann::json> Worker::HandleAlloc(const nlohmann::json& m) {
  ReleaseMemory();
  std::string dir = m.at("task_dir");
  auto it = tasks_.find(dir);
  if (it == tasks_.end()) {
    KF_ASSIGN_OR_RETURN(eval::Task task, eval::LoadTask(dir));
    it = tasks_.emplace(dir, std::move(task)).first;
  }
  const eval::Task& task = it->second;
  KF_ASSIGN_OR_RETURN(eval::Dtype dtype, eval::ParseDtype(m.at("dtype").get<std::string>()));
  std::string label = m.at("size");
  bool check = m.at("check");
  const auto& sizes = check ? task.check_sizes : task.bench_sizes;
  auto size = std::find_if(sizes.begin(), sizes.end(),
                           [&](const eval::SizeSpec& s) { return s.label == label; });
  if (size == sizes.end()) return Error(ErrorKind::kHarness, "no size '" + label + "'");
  KF_ASSIGN_OR_RETURN(eval::Problem problem,
                      eval::Instantiate(task, args_.world, dtype, *size, check));
  problem_ = std::move(problem);

  Layout l;
  l.sets = std::max(1, m.value("sets", 1));
  size_t off = 0, largest = 0;
  l.input_off.assign(l.sets, {});
  l.output_off.assign(l.sets, {});
  for (int s = 0; s < l.sets; ++s) {
    for (const auto& t : problem_->inputs) {
      l.input_off[s].push_back(off);
      off += AlignUp(std::max<size_t>(t.nbytes, 1));
      largest = std::max(largest, t.nbytes);
    }
    for (const auto& t : problem_->outputs) {
      l.output_off[s].push_back(off);
      off += AlignUp(std::max<size_t>(t.nbytes, 1));
      largest = std::max(largest, t.nbytes);
    }
  }
  l.workspace_bytes = AlignUp(std::max<size_t>(problem_->workspace_bytes, 1));
  l.pad_bytes = AlignUp(m.value("signal_pad_bytes", size_t{1} << 16));
  for (int k = 0; k < 2; ++k) {
    l.workspace_off[k] = off;
    off += l.workspace_bytes;
    l.pad_off[k] = off;
    off += l.pad_bytes;
  }
  l.staging_off = off;
  l.staging_bytes = args_.emulated ? AlignUp(2 * largest + (1 << 20)) : 0;
  off += l.staging_bytes;
  l.total = off;
  layout_ = l;

  KF_CUDA(cudaMalloc(&base_, layout_.total));
  // Never hand a kernel memory holding a previous kernel's data.
  KF_CUDA(cudaMemset(base_, 0, layout_.total));
  cudaIpcMemHandle_t handle;
  KF_CUDA(cudaIpcGetMemHandle(&handle, base_));
  return nlohmann::json{{"handle", ToHex(&handle, sizeof(handle))}, {"bytes", layout_.total}};
}

Result<nlohmann::json> Worker::HandlePeers(const nlohmann::json& m) {
  const auto& handles = m.at("handles");
  if (static_cast<int>(handles.size()) != args_.world)
    return Error(ErrorKind::kHarness, "handle count");
  peer_base_.assign(args_.world, nullptr);
  for (int r = 0; r < args_.world; ++r) {
    if (r == args_.rank) {
      peer_base_[r] = base_;
      continue;
    }
    cudaIpcMemHandle_t h;
    KF_RETURN_IF_ERROR(FromHex(handles[r].get<std::string>(), &h, sizeof(h)));
    void* p = nullptr;
    KF_CUDA(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
    peer_base_[r] = p;
  }
  if (args_.emulated) {
    std::vector<void*> staging;
    for (int r = 0; r < args_.world; ++r) staging.push_back(Peer(r, layout_.staging_off));
    backend_ =
        MakeEmulatedBackend(args_.rank, args_.world, staging, layout_.staging_bytes, &control_);
  }
  return nlohmann::json::object();
}

Result<nlohmann::json> Worker::HandleFree() {
  for (auto& [name, slot] : slots_) {
    if (slot.set_up && slot.teardown) slot.teardown(&slot.ctx);
    slot.set_up = false;
  }
  KF_CUDA(cudaDeviceSynchronize());
  ReleaseMemory();
  // Nobody frees its allocation while a peer still has it mapped.
  KF_RETURN_IF_ERROR(control_.Barrier());
  return nlohmann::json::object();
}

void Worker::ReleaseMemory() {
  if (args_.emulated) backend_.reset();
  for (int r = 0; r < static_cast<int>(peer_base_.size()); ++r) {
    if (r != args_.rank && peer_base_[r]) cudaIpcCloseMemHandle(peer_base_[r]);
  }
  peer_base_.clear();
  if (base_) {
    cudaDeviceSynchronize();
    cudaFree(base_);
  }
  base_ = nullptr;
  host_inputs_.clear();
  reference_.clear();
}

kf_ctx Worker::ContextFor(const KernelSlot& slot, int slot_index, int set) const {
  kf_ctx c{};
  c.abi_version = KF_ABI_VERSION;
  c.rank = args_.rank;
  c.world_size = args_.world;
  c.device = args_.device;
  c.emulated = args_.emulated ? 1 : 0;
  c.stream = stream_;
  auto fill = [&](kf_tensor& t, const eval::ConcreteTensor& spec, size_t off) {
    t.name = spec.name.c_str();
    t.dtype = static_cast<kf_dtype>(spec.dtype);
    t.ndim = static_cast<int>(std::min<size_t>(spec.shape.size(), KF_MAX_DIMS));
    for (int d = 0; d < t.ndim; ++d) t.shape[d] = spec.shape[d];
    t.numel = spec.numel;
    t.nbytes = spec.nbytes;
    t.data = Local(off);
    for (int r = 0; r < args_.world; ++r) t.peers[r] = Peer(r, off);
  };
  const eval::Problem& p = *problem_;
  c.num_inputs = static_cast<int>(std::min<size_t>(p.inputs.size(), KF_MAX_TENSORS));
  for (int i = 0; i < c.num_inputs; ++i) fill(c.inputs[i], p.inputs[i], layout_.input_off[set][i]);
  c.num_outputs = static_cast<int>(std::min<size_t>(p.outputs.size(), KF_MAX_TENSORS));
  for (int i = 0; i < c.num_outputs; ++i)
    fill(c.outputs[i], p.outputs[i], layout_.output_off[set][i]);
  for (const auto& [name, value] : p.task->params) {
    if (c.num_params == KF_MAX_PARAMS) break;
    c.param_names[c.num_params] = name.c_str();
    c.param_values[c.num_params++] = value;
  }
  auto buffer = [&](kf_buffer& b, size_t off, size_t bytes) {
    b.data = Local(off);
    b.nbytes = bytes;
    for (int r = 0; r < args_.world; ++r) b.peers[r] = Peer(r, off);
  };
  buffer(c.workspace, layout_.workspace_off[slot_index], layout_.workspace_bytes);
  buffer(c.signal_pad, layout_.pad_off[slot_index], layout_.pad_bytes);
  c.gpu = gpu_;
  c.user = slot.ctx.user;
  c.harness = backend_.get();
  return c;
}

}  // namespace kforge::worker
