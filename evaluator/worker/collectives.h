// The harness collectives behind kf_all_reduce & co (kforge/kernel.h). Two
// implementations: NCCL when every rank has its own GPU, and an emulated one
// (peer copies through the symmetric staging buffer plus host barriers) when
// ranks share a GPU, where NCCL refuses to run ("Duplicate GPU detected").
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "kforge/core/status.h"
#include "kforge/kernel.h"

namespace kforge::eval {
class ControlBlock;
}

namespace kforge::worker {

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  virtual std::string Name() const = 0;
  virtual Status AllReduce(const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
                           cudaStream_t s) = 0;
  virtual Status AllGather(const void* send, void* recv, size_t send_count, kf_dtype dt,
                           cudaStream_t s) = 0;
  virtual Status ReduceScatter(const void* send, void* recv, size_t recv_count, kf_dtype dt,
                               kf_redop op, cudaStream_t s) = 0;
  virtual Status Broadcast(const void* send, void* recv, size_t count, kf_dtype dt, int root,
                           cudaStream_t s) = 0;
  virtual Status Reduce(const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
                        int root, cudaStream_t s) = 0;
  virtual Status AllToAll(const void* send, void* recv, size_t count, kf_dtype dt,
                          cudaStream_t s) = 0;
  virtual Status GroupStart() = 0;
  virtual Status GroupEnd(cudaStream_t s) = 0;
  virtual Status Send(const void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) = 0;
  virtual Status Recv(void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) = 0;
  virtual Status Barrier(cudaStream_t s) = 0;
  // Used by the timing loop before each iteration, after the host barrier, so
  // that all ranks' start events are recorded together. May be a no-op.
  virtual Status DeviceBarrier(cudaStream_t s) = 0;
};

// NCCL backend. `unique_id` is the 128 bytes from ncclGetUniqueId on rank 0.
Result<std::unique_ptr<CollectiveBackend>> MakeNcclBackend(int rank, int world,
                                                           const std::string& unique_id);
// Rank 0's ncclGetUniqueId as raw bytes.
Result<std::string> NcclUniqueId();
int NcclVersion();

// Emulated backend. `staging_peers[r]` is rank r's staging buffer (mapped here).
std::unique_ptr<CollectiveBackend> MakeEmulatedBackend(int rank, int world,
                                                       std::vector<void*> staging_peers,
                                                       size_t staging_bytes,
                                                       eval::ControlBlock* control);

// Launches out[i] = op over r of in[r][offset + i] (in elements), accumulating
// in f32 for 16-bit floats. Defined in emulated_kernels.cu.
Status LaunchReduce(void* out, const std::vector<const void*>& in, size_t count, kf_dtype dt,
                    kf_redop op, cudaStream_t s);

}  // namespace kforge::worker
