// Emulated collectives for ranks that share one GPU. Each call stages this
// rank's send buffer into its symmetric staging area, meets the other ranks at
// a host barrier, reads what it needs from the peers' staging areas (peer
// pointers on the same device), and meets them again before the staging area
// may be reused. Correct and simple; its timings mean nothing for NVLink.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>

#include "collectives.h"
#include "cuda_check.h"
#include "protocol/control_block.h"

namespace kforge::worker {
namespace {

class EmulatedBackend final : public CollectiveBackend {
 public:
  EmulatedBackend(int rank, int world, std::vector<void*> staging, size_t staging_bytes,
                  eval::ControlBlock* control, std::vector<GroupView> groups)
      : rank_(rank),
        world_(world),
        staging_(std::move(staging)),
        staging_bytes_(staging_bytes),
        control_(control),
        groups_(std::move(groups)) {}

  std::string Name() const override { return "emulated"; }

  Status AllReduce(int group, const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
                   cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(Comm c, CommOf(group));
    KF_RETURN_IF_ERROR(Stage(c, send, count * kf_dtype_size(dt), s));
    KF_RETURN_IF_ERROR(LaunchReduce(recv, Peers(c, 0), count, dt, op, s));
    return Finish(c, s);
  }

  Status AllGather(int group, const void* send, void* recv, size_t send_count, kf_dtype dt,
                   cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(Comm c, CommOf(group));
    size_t bytes = send_count * kf_dtype_size(dt);
    KF_RETURN_IF_ERROR(Stage(c, send, bytes, s));
    for (size_t g = 0; g < c.members.size(); ++g) {
      KF_CUDA(cudaMemcpyAsync(static_cast<char*>(recv) + g * bytes, staging_[c.members[g]], bytes,
                              cudaMemcpyDeviceToDevice, s));
    }
    return Finish(c, s);
  }

  Status ReduceScatter(int group, const void* send, void* recv, size_t recv_count, kf_dtype dt,
                       kf_redop op, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(Comm c, CommOf(group));
    size_t chunk = recv_count * kf_dtype_size(dt);
    KF_RETURN_IF_ERROR(Stage(c, send, chunk * c.members.size(), s));
    KF_RETURN_IF_ERROR(LaunchReduce(recv, Peers(c, chunk * c.rank), recv_count, dt, op, s));
    return Finish(c, s);
  }

  Status Broadcast(int group, const void* send, void* recv, size_t count, kf_dtype dt, int root,
                   cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(Comm c, CommOf(group));
    KF_RETURN_IF_ERROR(CheckRank(c, root));
    size_t bytes = count * kf_dtype_size(dt);
    KF_RETURN_IF_ERROR(Stage(c, c.rank == root ? send : nullptr, bytes, s));
    KF_CUDA(cudaMemcpyAsync(recv, staging_[c.members[root]], bytes, cudaMemcpyDeviceToDevice, s));
    return Finish(c, s);
  }

  Status Reduce(int group, const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
                int root, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(Comm c, CommOf(group));
    KF_RETURN_IF_ERROR(CheckRank(c, root));
    KF_RETURN_IF_ERROR(Stage(c, send, count * kf_dtype_size(dt), s));
    if (c.rank == root) KF_RETURN_IF_ERROR(LaunchReduce(recv, Peers(c, 0), count, dt, op, s));
    return Finish(c, s);
  }

  Status AllToAll(int group, const void* send, void* recv, size_t count, kf_dtype dt,
                  cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(Comm c, CommOf(group));
    size_t bytes = count * kf_dtype_size(dt);
    KF_RETURN_IF_ERROR(Stage(c, send, bytes * c.members.size(), s));
    for (size_t p = 0; p < c.members.size(); ++p) {
      KF_CUDA(cudaMemcpyAsync(static_cast<char*>(recv) + p * bytes,
                              static_cast<const char*>(staging_[c.members[p]]) + c.rank * bytes,
                              bytes, cudaMemcpyDeviceToDevice, s));
    }
    return Finish(c, s);
  }

  Status Barrier(int group, cudaStream_t s) override {
    KF_ASSIGN_OR_RETURN(Comm c, CommOf(group));
    KF_CUDA(cudaStreamSynchronize(s));
    return Meet(c);
  }

  Status SetGroups(const std::vector<GroupView>& groups) override {
    groups_ = groups;
    return Status::Ok();
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
    KF_RETURN_IF_ERROR(CheckRank(World(), peer));
    sends_.push_back({buf, count * kf_dtype_size(dt), peer});
    return group_depth_ ? Status::Ok() : FlushP2p(s);
  }

  Status Recv(void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) override {
    KF_RETURN_IF_ERROR(CheckRank(World(), peer));
    recvs_.push_back({buf, count * kf_dtype_size(dt), peer});
    return group_depth_ ? Status::Ok() : FlushP2p(s);
  }

 private:
  struct P2pOp {
    const void* buf;
    size_t bytes;
    int peer;
  };
  // The ranks a collective runs over: the world, or this rank's group.
  struct Comm {
    int kind = -1;  // -1: the world
    int index = 0;
    int rank = 0;
    std::vector<int> members;
  };

  Comm World() const {
    Comm c;
    c.rank = rank_;
    for (int r = 0; r < world_; ++r) c.members.push_back(r);
    return c;
  }

  Result<Comm> CommOf(int group) const {
    if (group < 0) return World();
    if (group >= static_cast<int>(groups_.size())) {
      return Error(ErrorKind::kInvalidInput,
                   "group " + std::to_string(group) + " is not one of the task's groups");
    }
    const GroupView& g = groups_[static_cast<size_t>(group)];
    return Comm{g.kind, g.index, g.rank, g.members};
  }

  Status CheckRank(const Comm& c, int r) const {
    if (r < 0 || r >= static_cast<int>(c.members.size())) {
      return Error(ErrorKind::kInvalidInput, "rank " + std::to_string(r) + " out of range for " +
                                                 std::to_string(c.members.size()) + " ranks");
    }
    return Status::Ok();
  }

  Status Meet(const Comm& c) {
    return c.kind < 0 ? control_->Barrier()
                      : control_->GroupBarrier(c.kind, c.index, static_cast<int>(c.members.size()));
  }

  std::vector<const void*> Peers(const Comm& c, size_t offset) const {
    std::vector<const void*> v;
    for (int r : c.members) v.push_back(static_cast<const char*>(staging_[r]) + offset);
    return v;
  }

  // Copies `bytes` of `send` (if any) into this rank's staging area and waits
  // until every rank of the communicator has done the same.
  Status Stage(const Comm& c, const void* send, size_t bytes, cudaStream_t s) {
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
    return Meet(c);
  }

  // Waits for this rank's reads of peers' staging, then for every rank's.
  Status Finish(const Comm& c, cudaStream_t s) {
    KF_CUDA(cudaStreamSynchronize(s));
    return Meet(c);
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
      uint32_t count = std::min<uint32_t>(shared.p2p_count[r.peer], eval::kMaxP2pOps);
      for (uint32_t k = next[r.peer]; k < count; ++k) {
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
      if (match->bytes != r.bytes || match->offset + match->bytes > staging_bytes_) {
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
  std::vector<GroupView> groups_;
  int group_depth_ = 0;
  std::vector<P2pOp> sends_, recvs_;
};

}  // namespace

std::unique_ptr<CollectiveBackend> MakeEmulatedBackend(int rank, int world,
                                                       std::vector<void*> staging_peers,
                                                       size_t staging_bytes,
                                                       eval::ControlBlock* control,
                                                       std::vector<GroupView> groups) {
  return std::make_unique<EmulatedBackend>(rank, world, std::move(staging_peers), staging_bytes,
                                           control, std::move(groups));
}

}  // namespace kforge::worker
