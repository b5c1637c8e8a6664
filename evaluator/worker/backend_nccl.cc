// Harness collectives on NCCL: one communicator per rank group, 1:1 calls,
// through the entry points nccl_api.h loads when the first one is needed.
#include <cstring>

#include "collectives.h"
#include "cuda_check.h"
#include "nccl_api.h"

namespace kforge::worker {
namespace {

Status NcclStatus(const NcclApi& api, ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return Status::Ok();
  return Error(ErrorKind::kRuntimeError, std::string(what) + ": NCCL error " +
                                             std::to_string(static_cast<int>(r)) + ": " +
                                             api.GetErrorString(r));
}
// `api` names the NcclApi in scope.
#define KF_NCCL(call) KF_RETURN_IF_ERROR(NcclStatus(api, (call), #call))

Result<ncclDataType_t> NcclType(kf_dtype dt) {
  switch (dt) {
    case KF_F64:
      return ncclFloat64;
    case KF_F32:
      return ncclFloat32;
    case KF_F16:
      return ncclFloat16;
    case KF_BF16:
      return ncclBfloat16;
    case KF_FP8_E4M3:
      return ncclFloat8e4m3;
    case KF_FP8_E5M2:
      return ncclFloat8e5m2;
    case KF_I64:
      return ncclInt64;
    case KF_I32:
      return ncclInt32;
    case KF_I8:
      return ncclInt8;
    case KF_U8:
    case KF_BOOL:
      return ncclUint8;
  }
  return Error(ErrorKind::kInvalidInput, "unknown dtype");
}

ncclRedOp_t NcclOp(kf_redop op) {
  switch (op) {
    case KF_PROD:
      return ncclProd;
    case KF_MAX:
      return ncclMax;
    case KF_MIN:
      return ncclMin;
    case KF_AVG:
      return ncclAvg;
    default:
      return ncclSum;
  }
}

class NcclBackend final : public CollectiveBackend {
 public:
  NcclBackend(const NcclApi& api, ncclComm_t world) : api(api), world_(world) {}
  ~NcclBackend() override {
    for (ncclComm_t c : groups_) api.CommDestroy(c);
    api.CommDestroy(world_);
    if (token_) cudaFree(token_);
  }
  std::string Name() const override { return "nccl"; }

  Status AllReduce(int group, const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
                   cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(ncclComm_t c, Comm(group));
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(api.AllReduce(send, recv, count, t, NcclOp(op), c, s));
    return Status::Ok();
  }
  Status AllGather(int group, const void* send, void* recv, size_t send_count, kf_dtype dt,
                   cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(ncclComm_t c, Comm(group));
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(api.AllGather(send, recv, send_count, t, c, s));
    return Status::Ok();
  }
  Status ReduceScatter(int group, const void* send, void* recv, size_t recv_count, kf_dtype dt,
                       kf_redop op, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(ncclComm_t c, Comm(group));
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(api.ReduceScatter(send, recv, recv_count, t, NcclOp(op), c, s));
    return Status::Ok();
  }
  Status Broadcast(int group, const void* send, void* recv, size_t count, kf_dtype dt, int root,
                   cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(ncclComm_t c, Comm(group));
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(api.Broadcast(send, recv, count, t, root, c, s));
    return Status::Ok();
  }
  Status Reduce(int group, const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
                int root, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(ncclComm_t c, Comm(group));
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(api.Reduce(send, recv, count, t, NcclOp(op), root, c, s));
    return Status::Ok();
  }
  Status AllToAll(int group, const void* send, void* recv, size_t count, kf_dtype dt,
                  cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(ncclComm_t c, Comm(group));
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    int n = 0;
    KF_NCCL(api.CommCount(c, &n));
    size_t bytes = count * kf_dtype_size(dt);
    KF_NCCL(api.GroupStart());
    for (int p = 0; p < n; ++p) {
      KF_NCCL(api.Send(static_cast<const char*>(send) + p * bytes, count, t, p, c, s));
      KF_NCCL(api.Recv(static_cast<char*>(recv) + p * bytes, count, t, p, c, s));
    }
    KF_NCCL(api.GroupEnd());
    return Status::Ok();
  }
  // A one-element all-reduce: completes on each rank only once every rank of
  // the communicator has reached it.
  Status Barrier(int group, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(ncclComm_t c, Comm(group));
    if (token_ == nullptr) {
      KF_CUDA(cudaMalloc(&token_, sizeof(float)));
      KF_CUDA(cudaMemset(token_, 0, sizeof(float)));
    }
    KF_NCCL(api.AllReduce(token_, token_, 1, ncclFloat32, ncclSum, c, s));
    return Status::Ok();
  }
  Status GroupStart() override {
    KF_NCCL(api.GroupStart());
    return Status::Ok();
  }
  Status GroupEnd(cudaStream_t) override {
    KF_NCCL(api.GroupEnd());
    return Status::Ok();
  }
  Status Send(const void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(api.Send(buf, count, t, peer, world_, s));
    return Status::Ok();
  }
  Status Recv(void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(api.Recv(buf, count, t, peer, world_, s));
    return Status::Ok();
  }
  // Every rank calls this together (collective over the world communicator).
  Status SetGroups(const std::vector<GroupView>& groups) override {
    for (ncclComm_t c : groups_) api.CommDestroy(c);
    groups_.clear();
    for (const GroupView& g : groups) {
      // Color = which group of this kind; key = the rank inside it.
      ncclComm_t sub;
      KF_NCCL(api.CommSplit(world_, g.index, g.rank, &sub, nullptr));
      groups_.push_back(sub);
    }
    return Status::Ok();
  }

 private:
  Result<ncclComm_t> Comm(int group) const {
    if (group < 0) return world_;
    if (group >= static_cast<int>(groups_.size())) {
      return Error(ErrorKind::kInvalidInput,
                   "group " + std::to_string(group) + " is not one of the task's groups");
    }
    return groups_[static_cast<size_t>(group)];
  }

  const NcclApi& api;
  ncclComm_t world_;
  std::vector<ncclComm_t> groups_;
  float* token_ = nullptr;
};

}  // namespace

Result<std::string> NcclUniqueId() {
  KF_ASSIGN_OR_RETURN(const NcclApi* loaded, Nccl());
  const NcclApi& api = *loaded;
  ncclUniqueId id;
  KF_NCCL(api.GetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

int NcclVersion() {
  Result<const NcclApi*> api = Nccl();
  int v = 0;
  if (api.ok()) (*api)->GetVersion(&v);
  return v;
}

Result<std::unique_ptr<CollectiveBackend>> MakeNcclBackend(int rank, int world,
                                                           const std::string& unique_id) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return Error(ErrorKind::kHarness, "malformed NCCL unique id");
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  KF_ASSIGN_OR_RETURN(const NcclApi* loaded, Nccl());
  const NcclApi& api = *loaded;
  ncclComm_t comm;
  KF_NCCL(api.CommInitRank(&comm, world, id, rank));
  return std::unique_ptr<CollectiveBackend>(std::make_unique<NcclBackend>(api, comm));
}

}  // namespace kforge::worker
