// Emulated collectives for ranks that share one GPU. Each call stages this
// rank's send buffer into its symmetric staging area, meets the other ranks at
// a host barrier, reads what it needs from the peers' staging areas (peer
// pointers on the same device), and meets them again before the staging area
// may be reused. Correct and simple; its timings mean nothing for NVLink.
#include <cuda_runtime.h>

#include <cstring>

#include "collectives.h"
#include "cuda_check.h"
#include "protocol/control_block.h"

namespace kforge::worker {
namespace {

class EmulatedBackend final : public CollectiveBackend {
 public:
  EmulatedBackend(int rank, int world, std::vector<void*> staging, size_t staging_bytes,
                  eval::ControlBlock* control)
      : rank_(rank),
        world_(world),
        staging_(std::move(staging)),
        staging_bytes_(staging_bytes),
        control_(control) {}

  std::string Name() const override { return "emulated"; }

  Status AllReduce(const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
                   cudaStream_t s) override {
    KF_RETURN_IF_ERROR(Stage(send, count * kf_dtype_size(dt), s));
    KF_RETURN_IF_ERROR(LaunchReduce(recv, Peers(0), count, dt, op, s));
    return Finish(s);
  }

  Status AllGather(const void* send, void* recv, size_t send_count, kf_dtype dt,
                   cudaStream_t s) override {
    size_t bytes = send_count * kf_dtype_size(dt);
    KF_RETURN_IF_ERROR(Stage(send, bytes, s));
    for (int r = 0; r < world_; ++r) {
      KF_CUDA(cudaMemcpyAsync(static_cast<char*>(recv) + r * bytes, staging_[r], bytes,
                              cudaMemcpyDeviceToDevice, s));
    }
    return Finish(s);
  }

  Status ReduceScatter(const void* send, void* recv, size_t recv_count, kf_dtype dt, kf_redop op,
                       cudaStream_t s) override {
    size_t chunk = recv_count * kf_dtype_size(dt);
    KF_RETURN_IF_ERROR(Stage(send, chunk * world_, s));
    KF_RETURN_IF_ERROR(LaunchReduce(recv, Peers(chunk * rank_), recv_count, dt, op, s));
    return Finish(s);
  }

  Status Broadcast(const void* send, void* recv, size_t count, kf_dtype dt, int root,
                   cudaStream_t s) override {
    KF_RETURN_IF_ERROR(CheckRoot(root));
    size_t bytes = count * kf_dtype_size(dt);
    KF_RETURN_IF_ERROR(Stage(rank_ == root ? send : nullptr, bytes, s));
    KF_CUDA(cudaMemcpyAsync(recv, staging_[root], bytes, cudaMemcpyDeviceToDevice, s));
    return Finish(s);
  }

  Status Reduce(const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op, int root,
                cudaStream_t s) override {
    KF_RETURN_IF_ERROR(CheckRoot(root));
    KF_RETURN_IF_ERROR(Stage(send, count * kf_dtype_size(dt), s));
    if (rank_ == root) KF_RETURN_IF_ERROR(LaunchReduce(recv, Peers(0), count, dt, op, s));
    return Finish(s);
  }

  Status AllToAll(const void* send, void* recv, size_t count, kf_dtype dt,
                  cudaStream_t s) override {
    size_t bytes = count * kf_dtype_size(dt);
    KF_RETURN_IF_ERROR(Stage(send, bytes * world_, s));
    for (int p = 0; p < world_; ++p) {
      KF_CUDA(cudaMemcpyAsync(static_cast<char*>(recv) + p * bytes,
                              static_cast<const char*>(staging_[p]) + rank_ * bytes, bytes,
                              cudaMemcpyDeviceToDevice, s));
    }
    return Finish(s);
  }

  Status GroupStart() override {
    ++group_depth_;
    return Status::Ok();
  }

  Status GroupEnd(cudaStream_t s) override {
    if (group_depth_ == 0)
      return Error(ErrorKind::kInvalidInput, "kf_group_end without kf_group_start");
    if (--group_depth_ > 0) return Status::Ok();
    return FlushP2p(s);
  }

  Status Send(const void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) override {
    KF_RETURN_IF_ERROR(CheckRoot(peer));
    sends_.push_back({buf, count * kf_dtype_size(dt), peer});
    return group_depth_ ? Status::Ok() : FlushP2p(s);
  }

  Status Recv(void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) override {
    KF_RETURN_IF_ERROR(CheckRoot(peer));
    recvs_.push_back({buf, count * kf_dtype_size(dt), peer});
    return group_depth_ ? Status::Ok() : FlushP2p(s);
  }

  Status Barrier(cudaStream_t s) override {
    KF_CUDA(cudaStreamSynchronize(s));
    return control_->Barrier();
  }

  Status DeviceBarrier(cudaStream_t) override { return Status::Ok(); }

 private:
  struct P2pOp {
    const void* buf;
    size_t bytes;
    int peer;
  };

  Status CheckRoot(int r) const {
    if (r < 0 || r >= world_) {
      return Error(
          ErrorKind::kInvalidInput,
          "rank " + std::to_string(r) + " out of range for world " + std::to_string(world_));
    }
    return Status::Ok();
  }

  std::vector<const void*> Peers(size_t offset) const {
    std::vector<const void*> v;
    for (int r = 0; r < world_; ++r) v.push_back(static_cast<const char*>(staging_[r]) + offset);
    return v;
  }

  // Copies `bytes` of `send` (if any) into this rank's staging area and waits
  // until every rank has done the same.
  Status Stage(const void* send, size_t bytes, cudaStream_t s) {
    if (bytes > staging_bytes_) {
      return Error(ErrorKind::kRuntimeError,
                   "harness collective of " + std::to_string(bytes) +
                       " bytes exceeds the emulated backend's staging buffer (" +
                       std::to_string(staging_bytes_) + " bytes)");
    }
    if (send && bytes) {
      KF_CUDA(cudaMemcpyAsync(staging_[rank_], send, bytes, cudaMemcpyDeviceToDevice, s));
    }
    KF_CUDA(cudaStreamSynchronize(s));
    return control_->Barrier();
  }

  // Waits for this rank's reads of peers' staging, then for every rank's.
  Status Finish(cudaStream_t s) {
    KF_CUDA(cudaStreamSynchronize(s));
    return control_->Barrier();
  }

  // Stages every pending send back to back, publishes their placement in the
  // control block, and serves every pending receive from the matching peer
  // send (the k-th receive from p matches p's k-th send to this rank).
  Status FlushP2p(cudaStream_t s) {
    auto& shared = *control_->shared();
    if (sends_.size() > eval::kMaxP2pOps)
      return Error(ErrorKind::kRuntimeError, "too many sends in one group");
    size_t offset = 0;
    for (size_t i = 0; i < sends_.size(); ++i) {
      const P2pOp& op = sends_[i];
      if (offset + op.bytes > staging_bytes_) {
        return Error(ErrorKind::kRuntimeError, "grouped sends exceed the emulated staging buffer");
      }
      KF_CUDA(cudaMemcpyAsync(static_cast<char*>(staging_[rank_]) + offset, op.buf, op.bytes,
                              cudaMemcpyDeviceToDevice, s));
      shared.p2p[rank_][i] = {op.peer, 0, offset, op.bytes};
      offset += (op.bytes + 255) / 256 * 256;
    }
    shared.p2p_count[rank_] = static_cast<uint32_t>(sends_.size());
    KF_CUDA(cudaStreamSynchronize(s));
    KF_RETURN_IF_ERROR(control_->Barrier());

    std::vector<uint32_t> next(world_, 0);
    for (const P2pOp& r : recvs_) {
      const eval::P2pSendRecord* match = nullptr;
      for (uint32_t k = next[r.peer]; k < shared.p2p_count[r.peer]; ++k) {
        if (shared.p2p[r.peer][k].peer == rank_) {
          match = &shared.p2p[r.peer][k];
          next[r.peer] = k + 1;
          break;
        }
      }
      if (!match) {
        return Error(ErrorKind::kRuntimeError, "kf_recv from rank " + std::to_string(r.peer) +
                                                   " has no matching kf_send in the same group");
      }
      if (match->bytes != r.bytes) {
        return Error(ErrorKind::kRuntimeError, "kf_recv of " + std::to_string(r.bytes) +
                                                   " bytes from rank " + std::to_string(r.peer) +
                                                   " matches a kf_send of " +
                                                   std::to_string(match->bytes) + " bytes");
      }
      KF_CUDA(cudaMemcpyAsync(const_cast<void*>(r.buf),
                              static_cast<const char*>(staging_[r.peer]) + match->offset, r.bytes,
                              cudaMemcpyDeviceToDevice, s));
    }
    sends_.clear();
    recvs_.clear();
    KF_CUDA(cudaStreamSynchronize(s));
    return control_->Barrier();
  }

  int rank_, world_;
  std::vector<void*> staging_;
  size_t staging_bytes_;
  eval::ControlBlock* control_;
  int group_depth_ = 0;
  std::vector<P2pOp> sends_, recvs_;
};

}  // namespace

std::unique_ptr<CollectiveBackend> MakeEmulatedBackend(int rank, int world,
                                                       std::vector<void*> staging_peers,
                                                       size_t staging_bytes,
                                                       eval::ControlBlock* control) {
  return std::make_unique<EmulatedBackend>(rank, world, std::move(staging_peers), staging_bytes,
                                           control);
}

}  // namespace kforge::worker
