// Harness collectives on NCCL: one communicator per rank group, 1:1 calls.
#include <nccl.h>

#include <cstring>

#include "collectives.h"
#include "cuda_check.h"

namespace kforge::worker {
namespace {

Status NcclStatus(ncclResult_t r, const char* what) {
  if (r == ncclSuccess || r == ncclInProgress) return Status::Ok();
  return Error(ErrorKind::kRuntimeError, std::string(what) + ": NCCL error " +
                                             std::to_string(static_cast<int>(r)) + ": " +
                                             ncclGetErrorString(r));
}
#define KF_NCCL(call) KF_RETURN_IF_ERROR(NcclStatus((call), #call))

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
  NcclBackend(ncclComm_t comm, float* token) : comm_(comm), token_(token) {}
  ~NcclBackend() override {
    ncclCommDestroy(comm_);
    cudaFree(token_);
  }
  std::string Name() const override { return "nccl"; }

  Status AllReduce(const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
                   cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(ncclAllReduce(send, recv, count, t, NcclOp(op), comm_, s));
    return Status::Ok();
  }
  Status AllGather(const void* send, void* recv, size_t send_count, kf_dtype dt,
                   cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(ncclAllGather(send, recv, send_count, t, comm_, s));
    return Status::Ok();
  }
  Status ReduceScatter(const void* send, void* recv, size_t recv_count, kf_dtype dt, kf_redop op,
                       cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(ncclReduceScatter(send, recv, recv_count, t, NcclOp(op), comm_, s));
    return Status::Ok();
  }
  Status Broadcast(const void* send, void* recv, size_t count, kf_dtype dt, int root,
                   cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(ncclBroadcast(send, recv, count, t, root, comm_, s));
    return Status::Ok();
  }
  Status Reduce(const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op, int root,
                cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(ncclReduce(send, recv, count, t, NcclOp(op), root, comm_, s));
    return Status::Ok();
  }
  Status AllToAll(const void* send, void* recv, size_t count, kf_dtype dt,
                  cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    int world = 0;
    KF_NCCL(ncclCommCount(comm_, &world));
    size_t bytes = count * kf_dtype_size(dt);
    KF_NCCL(ncclGroupStart());
    for (int p = 0; p < world; ++p) {
      KF_NCCL(ncclSend(static_cast<const char*>(send) + p * bytes, count, t, p, comm_, s));
      KF_NCCL(ncclRecv(static_cast<char*>(recv) + p * bytes, count, t, p, comm_, s));
    }
    KF_NCCL(ncclGroupEnd());
    return Status::Ok();
  }
  Status GroupStart() override {
    KF_NCCL(ncclGroupStart());
    return Status::Ok();
  }
  Status GroupEnd(cudaStream_t) override {
    KF_NCCL(ncclGroupEnd());
    return Status::Ok();
  }
  Status Send(const void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(ncclSend(buf, count, t, peer, comm_, s));
    return Status::Ok();
  }
  Status Recv(void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(auto t, NcclType(dt));
    KF_NCCL(ncclRecv(buf, count, t, peer, comm_, s));
    return Status::Ok();
  }
  Status Barrier(cudaStream_t s) override { return DeviceBarrier(s); }
  // A one-element all-reduce: completes on each rank only once every rank
  // has reached it, which aligns the ranks' next events to within microseconds.
  Status DeviceBarrier(cudaStream_t s) override {
    KF_NCCL(ncclAllReduce(token_, token_, 1, ncclFloat32, ncclSum, comm_, s));
    return Status::Ok();
  }

 private:
  ncclComm_t comm_;
  float* token_;
};

}  // namespace

Result<std::string> NcclUniqueId() {
  ncclUniqueId id;
  KF_NCCL(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

int NcclVersion() {
  int v = 0;
  ncclGetVersion(&v);
  return v;
}

Result<std::unique_ptr<CollectiveBackend>> MakeNcclBackend(int rank, int world,
                                                           const std::string& unique_id) {
  ncclUniqueId id;
  if (unique_id.size() != sizeof(id.internal)) {
    return Error(ErrorKind::kHarness, "malformed NCCL unique id");
  }
  std::memcpy(id.internal, unique_id.data(), sizeof(id.internal));
  ncclComm_t comm;
  KF_NCCL(ncclCommInitRank(&comm, world, id, rank));
  float* token = nullptr;
  KF_CUDA(cudaMalloc(&token, sizeof(float)));
  KF_CUDA(cudaMemset(token, 0, sizeof(float)));
  return std::unique_ptr<CollectiveBackend>(std::make_unique<NcclBackend>(comm, token));
}

}  // namespace kforge::worker
