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

// A sub-communicator as the backends see it: this rank's group of one of the
// task's [[groups]] (kind = its index in ctx->groups).
struct GroupView {
  int kind = 0;
  int index = 0;             // which group of that kind this rank is in
  int rank = 0;              // this rank inside it
  std::vector<int> members;  // world ranks, by group rank
};

// Every collective takes `group`: -1 for the whole world, else an index into
// the groups the backend was made with.
class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;
  virtual std::string Name() const = 0;
  virtual Status AllReduce(int group, const void* send, void* recv, size_t count, kf_dtype dt,
                           kf_redop op, cudaStream_t s) = 0;
  virtual Status AllGather(int group, const void* send, void* recv, size_t send_count, kf_dtype dt,
                           cudaStream_t s) = 0;
  virtual Status ReduceScatter(int group, const void* send, void* recv, size_t recv_count,
                               kf_dtype dt, kf_redop op, cudaStream_t s) = 0;
  virtual Status Broadcast(int group, const void* send, void* recv, size_t count, kf_dtype dt,
                           int root, cudaStream_t s) = 0;
  virtual Status Reduce(int group, const void* send, void* recv, size_t count, kf_dtype dt,
                        kf_redop op, int root, cudaStream_t s) = 0;
  virtual Status AllToAll(int group, const void* send, void* recv, size_t count, kf_dtype dt,
                          cudaStream_t s) = 0;
  virtual Status Barrier(int group, cudaStream_t s) = 0;
  // Point-to-point, world ranks; wrapped in GroupStart/GroupEnd.
  virtual Status GroupStart() = 0;
  virtual Status GroupEnd(cudaStream_t s) = 0;
  virtual Status Send(const void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) = 0;
  virtual Status Recv(void* buf, size_t count, kf_dtype dt, int peer, cudaStream_t s) = 0;
  // The sub-communicators of the current problem (replacing earlier ones).
  virtual Status SetGroups(const std::vector<GroupView>& groups) = 0;

  // kf_all_to_allv over the world: counts and displacements (elements) are
  // host arrays of `world` entries. Both backends already pair grouped sends
  // and receives (NCCL: ncclSend/ncclRecv in one group, as PyTorch's
  // all_to_all_single with splits does), so this is one grouped exchange; a
  // receive whose count differs from the peer's send fails in either.
  Status AllToAllV(int world, const void* send, const size_t* send_counts,
                   const size_t* send_displs, void* recv, const size_t* recv_counts,
                   const size_t* recv_displs, kf_dtype dt, cudaStream_t s);
};

// NCCL backend. `unique_id` is the 128 bytes from ncclGetUniqueId on rank 0;
// each group becomes an ncclCommSplit of the world communicator.
Result<std::unique_ptr<CollectiveBackend>> MakeNcclBackend(int rank, int world,
                                                           const std::string& unique_id);
// Rank 0's ncclGetUniqueId as raw bytes.
Result<std::string> NcclUniqueId();
// NCCL's version code (e.g. 22803), 0 when it cannot be loaded.
int NcclVersion();

// The backend the kf_* functions of this process use; null refuses every
// call with `refusal` (default: the task does not allow them).
void SetProcessBackend(CollectiveBackend* backend, const char* refusal = nullptr);

// The last failure of a kf_* call in this process, cleared by taking it: the
// reason behind a kernel's non-zero return ("" if no kf_* call failed).
std::string TakeCollectiveError();
// "<what> returned <rc>", with the failed kf_* call behind it if there was one.
std::string NonZeroReturn(const std::string& what, int rc);
// A policy violation if a kf_* call was refused since the last check, whatever
// the kernel returned: a kernel that found a forbidden collective's address at
// run time (past the import check) and ignored the refusal is still caught.
Status TakeRefusal(const std::string& where);

// Emulated backend. `staging_peers[r]` is rank r's staging buffer (mapped here).
std::unique_ptr<CollectiveBackend> MakeEmulatedBackend(int rank, int world,
                                                       std::vector<void*> staging_peers,
                                                       size_t staging_bytes,
                                                       eval::ControlBlock* control,
                                                       std::vector<GroupView> groups);

// Launches out[i] = op over r of in[r][offset + i] (in elements), accumulating
// in f32 for 16-bit floats. Defined in emulated_kernels.cu.
Status LaunchReduce(void* out, const std::vector<const void*>& in, size_t count, kf_dtype dt,
                    kf_redop op, cudaStream_t s);

}  // namespace kforge::worker
