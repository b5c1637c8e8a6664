// A kernel's view of one set of one problem (kf_ctx): this rank's and every
// peer's pointers into the arena, the params, the groups, the GPU.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "arena.h"
#include "collectives.h"
#include "kforge/evaluator/task.h"
#include "kforge/kernel.h"
#include "protocol/layout.h"

namespace kforge::worker {

// Everything a context is built from; must outlive the contexts (kf_ctx
// points into its strings).
struct ProblemView {
  eval::Problem problem;
  eval::proto::ArenaLayout layout;
  std::vector<std::pair<std::string, double>> params;
  std::vector<GroupView> groups;
};

// This rank's group of every one of the problem's [[groups]].
std::vector<GroupView> GroupViews(const eval::Problem& p, int rank);

struct ContextBase {
  int rank = 0, world = 1, device = 0;
  bool emulated = false;
  cudaStream_t stream = nullptr;
  kf_gpu_info gpu{};
};

// Makes the kf_* collectives of this process serve `view`: the emulated
// backend over every rank's staging area in `arenas` (kept in *emulated), or
// `nccl` with the problem's groups; `refusal` non-null makes every call fail
// with it instead.
Status InstallCollectives(const ContextBase& base, const ProblemView& view,
                          const PeerArenas& arenas, eval::ControlBlock* control,
                          CollectiveBackend* nccl, std::unique_ptr<CollectiveBackend>* emulated,
                          const char* refusal = nullptr);

// kf_ctx for input/output set `set` over `arenas` (every rank's arena mapped
// here). ctx->harness is always null: the collectives use this process's
// backend (collectives_api.cc).
kf_ctx BuildContext(const ContextBase& base, const ProblemView& view, const PeerArenas& arenas,
                    int set);

}  // namespace kforge::worker
