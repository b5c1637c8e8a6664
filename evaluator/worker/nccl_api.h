// NCCL, loaded into a worker only when it needs it: the harness of a
// multi-GPU evaluation, a candidate whose task allows the harness collectives
// on real GPUs, the probe. The worker does not link NCCL, so a candidate whose
// task forbids it has no NCCL in its process to reach (the issue's "forbidden
// libraries are not loaded"); a kernel allowed NCCL links it itself.
#pragma once

#include <nccl.h>

#include "kforge/core/status.h"

namespace kforge::worker {

// The entry points the worker calls, from dlopen("libnccl.so.2").
struct NcclApi {
  decltype(&ncclGetVersion) GetVersion;
  decltype(&ncclGetUniqueId) GetUniqueId;
  decltype(&ncclGetErrorString) GetErrorString;
  decltype(&ncclCommInitRank) CommInitRank;
  decltype(&ncclCommSplit) CommSplit;
  decltype(&ncclCommDestroy) CommDestroy;
  decltype(&ncclCommCount) CommCount;
  decltype(&ncclAllReduce) AllReduce;
  decltype(&ncclAllGather) AllGather;
  decltype(&ncclReduceScatter) ReduceScatter;
  decltype(&ncclBroadcast) Broadcast;
  decltype(&ncclReduce) Reduce;
  decltype(&ncclSend) Send;
  decltype(&ncclRecv) Recv;
  decltype(&ncclGroupStart) GroupStart;
  decltype(&ncclGroupEnd) GroupEnd;
};

// Loads NCCL on first use (thread-safe) and returns its entry points; the
// error names the library or symbol that is missing. Later calls return the
// first outcome.
Result<const NcclApi*> Nccl();

// Whether this process has loaded NCCL (through Nccl() or otherwise).
bool NcclLoaded();

}  // namespace kforge::worker
