#include "context.h"

#include <algorithm>

namespace kforge::worker {

std::vector<GroupView> GroupViews(const eval::Problem& p, int rank) {
  std::vector<GroupView> out;
  for (size_t k = 0; k < p.groups.size(); ++k) {
    const eval::ConcreteGroup& g = p.groups[k];
    GroupView v;
    v.kind = static_cast<int>(k);
    v.index = g.IndexOf(rank, p.world);
    v.rank = g.RankIn(rank, p.world);
    v.members = g.Members(v.index, p.world);
    out.push_back(std::move(v));
  }
  return out;
}

Status InstallCollectives(const ContextBase& base, const ProblemView& view,
                          const PeerArenas& arenas, eval::ControlBlock* control,
                          CollectiveBackend* nccl, std::unique_ptr<CollectiveBackend>* emulated,
                          const char* refusal) {
  SetProcessBackend(nullptr);
  emulated->reset();
  if (refusal != nullptr) {
    SetProcessBackend(nullptr, refusal);
  } else if (base.emulated) {
    std::vector<void*> staging;
    for (int r = 0; r < base.world; ++r)
      staging.push_back(arenas.base(r) + view.layout.staging_off);
    *emulated = MakeEmulatedBackend(base.rank, base.world, staging, view.layout.staging_bytes,
                                    control, view.groups);
    SetProcessBackend(emulated->get());
  } else if (nccl != nullptr) {
    KF_RETURN_IF_ERROR(nccl->SetGroups(view.groups));
    SetProcessBackend(nccl);
  } else {
    return Error(ErrorKind::kHarness,
                 "configure: the collectives need NCCL, which was never started");
  }
  return Status::Ok();
}

kf_ctx BuildContext(const ContextBase& base, const ProblemView& view, const PeerArenas& arenas,
                    int set) {
  const eval::Problem& p = view.problem;
  const eval::proto::ArenaLayout& l = view.layout;
  kf_ctx c{};
  c.abi_version = KF_ABI_VERSION;
  c.rank = base.rank;
  c.world_size = base.world;
  c.device = base.device;
  c.emulated = base.emulated ? 1 : 0;
  c.stream = base.stream;
  auto fill = [&](kf_tensor& t, const eval::ConcreteTensor& spec, size_t off, bool inout) {
    t.name = spec.name.c_str();
    t.dtype = static_cast<kf_dtype>(spec.dtype);
    const std::vector<int64_t>& shape = spec.ShapeOf(base.rank);
    t.ndim = static_cast<int>(std::min<size_t>(shape.size(), KF_MAX_DIMS));
    for (int d = 0; d < t.ndim; ++d) t.shape[d] = shape[d];
    t.numel = spec.NumelOf(base.rank);
    t.nbytes = spec.NbytesOf(base.rank);
    t.inout = inout ? 1 : 0;
    t.data = arenas.base(base.rank) + off;
    for (int r = 0; r < base.world && r < KF_MAX_RANKS; ++r) t.peers[r] = arenas.base(r) + off;
  };
  c.num_inputs = static_cast<int>(std::min<size_t>(p.inputs.size(), KF_MAX_TENSORS));
  for (int i = 0; i < c.num_inputs; ++i) {
    fill(c.inputs[i], p.inputs[i], l.input_off[set][i], p.inputs[i].inout);
  }
  c.num_outputs = 0;
  for (size_t o = 0; o < p.outputs.size() && c.num_outputs < KF_MAX_TENSORS; ++o) {
    if (p.outputs[o].inout_of >= 0) continue;  // updated in place through ctx->inputs
    fill(c.outputs[c.num_outputs++], p.outputs[o], l.output_off[set][o], false);
  }
  for (const auto& [name, value] : view.params) {
    if (c.num_params == KF_MAX_PARAMS) break;
    c.param_names[c.num_params] = name.c_str();
    c.param_values[c.num_params++] = value;
  }
  c.num_groups = static_cast<int>(std::min<size_t>(view.groups.size(), KF_MAX_GROUPS));
  for (int g = 0; g < c.num_groups; ++g) {
    const GroupView& v = view.groups[g];
    kf_group& kg = c.groups[g];
    kg.name = p.groups[g].name.c_str();
    kg.size = static_cast<int>(v.members.size());
    kg.rank = v.rank;
    kg.index = v.index;
    for (int m = 0; m < kg.size && m < KF_MAX_RANKS; ++m) kg.ranks[m] = v.members[m];
  }
  auto buffer = [&](kf_buffer& b, size_t off, size_t bytes) {
    b.data = arenas.base(base.rank) + off;
    b.nbytes = bytes;
    for (int r = 0; r < base.world && r < KF_MAX_RANKS; ++r) b.peers[r] = arenas.base(r) + off;
  };
  buffer(c.workspace, l.workspace_off, l.workspace_bytes);
  buffer(c.signal_pad, l.pad_off, l.pad_bytes);
  c.gpu = base.gpu;
  c.user = nullptr;
  c.harness = nullptr;
  return c;
}

}  // namespace kforge::worker
