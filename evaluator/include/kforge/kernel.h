/* kforge kernel ABI, version 2.
 *
 * A kernel is ONE .cu file compiled to a shared object that exports three C
 * functions. The harness (one worker process per rank) calls them:
 *
 *   int kf_setup(kf_ctx* ctx);     once per problem shape; untimed; may allocate
 *                                  state and keep it in ctx->user.
 *   int kf_run(kf_ctx* ctx);       the timed call: read ctx->inputs, write
 *                                  ctx->outputs. All device work must be enqueued
 *                                  on ctx->stream (or joined into it) before it
 *                                  returns. Called many times, back to back.
 *   int kf_teardown(kf_ctx* ctx);  free what kf_setup made.
 *
 * Return 0 on success; non-zero is reported as a runtime error. kf_setup and
 * kf_teardown are optional; kf_run is required.
 *
 * Memory. Every input, output, the workspace and the signal pad is SYMMETRIC:
 * allocated with the same size on every rank, with rank r's buffer mapped into
 * every rank's address space at t.peers[r] (t.peers[ctx->rank] == t.data). A
 * kernel may load from and store to peers' buffers directly (NVLink P2P).
 * Buffers are 256-byte aligned. Inputs must not be modified: where the GPU
 * allows, they are mapped read-only (a store to one faults), and the harness
 * checks them after every call. Inputs the task declares in-place
 * (kf_tensor.inout = 1) are writable: the harness restores their contents
 * before every call and checks them after it. Outputs are poisoned
 * with a fresh, unpredictable pattern before every call, timed calls included, and every call's
 * outputs are checked. The harness rotates several copies of the inputs and
 * outputs between timed calls (to keep them out of L2): read every pointer from ctx in each kf_run,
 * never cache tensor pointers from kf_setup. The workspace and signal pad do not move. The signal
 * pad (64 KiB) is zeroed on every rank before each kf_setup and never again: keep barrier state
 * monotonic (epochs) so that back-to-back calls work.
 *
 * Synchronisation between ranks is the kernel's job: a rank may start kf_run
 * while a peer is still finishing its previous call. Every rank's inputs stay
 * as they are until every rank's call has returned (the harness writes new
 * inputs only then), so a kernel may read its peers' inputs up to its own end
 * without an end barrier; a peer's outputs and workspace are the peer's again
 * as soon as its next call starts. The harness times each call from a
 * cross-rank barrier to the end of ctx->stream on every rank.
 */
#ifndef KFORGE_KERNEL_H_
#define KFORGE_KERNEL_H_

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kforge/abi_limits.h" /* KF_ABI_VERSION, KF_MAX_RANKS, KF_MAX_TENSORS, ... */

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kf_dtype {
  KF_F64 = 0,
  KF_F32,
  KF_F16,
  KF_BF16,
  KF_FP8_E4M3,
  KF_FP8_E5M2,
  KF_I64,
  KF_I32,
  KF_I8,
  KF_U8,
  KF_BOOL
} kf_dtype;

typedef enum kf_redop { KF_SUM = 0, KF_PROD, KF_MAX, KF_MIN, KF_AVG } kf_redop;

typedef struct kf_tensor {
  const char* name;
  kf_dtype dtype;
  int ndim;
  int64_t shape[KF_MAX_DIMS]; /* row-major, contiguous; this rank's shape */
  int64_t numel;
  size_t nbytes;             /* this rank's bytes; peers' buffers are at least this large */
  int inout;                 /* 1: an input the kernel updates in place */
  void* data;                /* this rank's buffer (device memory) */
  void* peers[KF_MAX_RANKS]; /* peers[r]: rank r's buffer, valid for r < world_size */
} kf_tensor;

typedef struct kf_buffer {
  void* data;
  size_t nbytes;
  void* peers[KF_MAX_RANKS];
} kf_buffer;

/* A sub-communicator declared by the task ([[groups]] in task.toml): the world
 * split into world_size / size groups of `size` ranks each. */
typedef struct kf_group {
  const char* name;
  int size;                /* ranks in each group */
  int rank;                /* this rank's index inside its group */
  int index;               /* which group this rank belongs to */
  int ranks[KF_MAX_RANKS]; /* ranks[g]: the world rank of group rank g (this rank's group) */
} kf_group;

typedef struct kf_gpu_info {
  char name[96];
  int cc_major, cc_minor;
  int sm_count;
  int max_threads_per_block;
  size_t smem_per_block_optin; /* bytes, with cudaFuncAttributeMaxDynamicSharedMemorySize */
  size_t smem_per_sm;
  size_t l2_bytes;
  size_t hbm_bytes;
  int p2p_all; /* 1 if every rank's device can access every peer's memory */
} kf_gpu_info;

typedef struct kf_ctx {
  int abi_version; /* KF_ABI_VERSION */
  int rank;
  int world_size;
  int device;   /* CUDA device ordinal of this rank (already current) */
  int emulated; /* 1 when ranks share a GPU: correctness only, timings are not NVLink's */
  cudaStream_t stream;

  int num_inputs;
  kf_tensor inputs[KF_MAX_TENSORS]; /* in task.toml order */
  int num_outputs;
  kf_tensor outputs[KF_MAX_TENSORS]; /* in task.toml order */

  int num_params;
  const char* param_names[KF_MAX_PARAMS];
  double param_values[KF_MAX_PARAMS]; /* the task's scalar params (integers are exact) */

  int num_groups;
  kf_group groups[KF_MAX_GROUPS]; /* in task.toml order */

  kf_buffer workspace;  /* symmetric scratch; contents persist between calls */
  kf_buffer signal_pad; /* symmetric, zeroed once before kf_setup; use uint32_t/uint64_t slots */

  kf_gpu_info gpu;
  void* user;    /* the kernel's own state */
  void* harness; /* opaque to the kernel */
} kf_ctx;

/* The entry points a kernel defines. */
int kf_setup(kf_ctx* ctx);
int kf_run(kf_ctx* ctx);
int kf_teardown(kf_ctx* ctx);

/* Harness collectives. Enqueued on ctx->stream; buffers are device pointers of
 * this rank (symmetric or not); counts are in elements. They map 1:1 onto NCCL
 * when every rank has its own GPU, and onto a built-in peer-copy backend when
 * ranks share one. A task's policy says whether a kernel may call them. */
int kf_all_reduce(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt,
                  kf_redop op);
int kf_all_gather(kf_ctx* ctx, const void* send, void* recv, size_t send_count, kf_dtype dt);
int kf_reduce_scatter(kf_ctx* ctx, const void* send, void* recv, size_t recv_count, kf_dtype dt,
                      kf_redop op);
int kf_broadcast(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt, int root);
int kf_reduce(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
              int root);
/* count elements go to each peer: send holds world_size blocks, block p for rank p. */
int kf_all_to_all(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt);
/* Variable counts (all_to_all_single with splits, MPI_Alltoallv): send_counts[p]
 * elements from send + send_displs[p] go to rank p, and recv_counts[p]
 * elements from rank p land at recv + recv_displs[p]. The four arrays are HOST
 * arrays of world_size entries, in elements; recv_counts[p] must equal rank p's
 * send_counts[this rank] (exchange the counts first, e.g. with kf_all_to_all of
 * one count per peer, then copy them to the host). */
int kf_all_to_allv(kf_ctx* ctx, const void* send, const size_t* send_counts,
                   const size_t* send_displs, void* recv, const size_t* recv_counts,
                   const size_t* recv_displs, kf_dtype dt);
/* Point-to-point; wrap matching sends and receives in kf_group_start/kf_group_end. */
int kf_group_start(kf_ctx* ctx);
int kf_group_end(kf_ctx* ctx);
int kf_send(kf_ctx* ctx, const void* buf, size_t count, kf_dtype dt, int peer);
int kf_recv(kf_ctx* ctx, void* buf, size_t count, kf_dtype dt, int peer);
/* All ranks' ctx->stream work before the barrier completes before any after it. */
int kf_barrier(kf_ctx* ctx);

/* The same collectives inside one of ctx->groups (index `group`); every rank
 * calls them for its own group. Roots and counts are in group ranks; buffers
 * are this rank's. */
int kf_group_all_reduce(kf_ctx* ctx, int group, const void* send, void* recv, size_t count,
                        kf_dtype dt, kf_redop op);
int kf_group_all_gather(kf_ctx* ctx, int group, const void* send, void* recv, size_t send_count,
                        kf_dtype dt);
int kf_group_reduce_scatter(kf_ctx* ctx, int group, const void* send, void* recv, size_t recv_count,
                            kf_dtype dt, kf_redop op);
int kf_group_broadcast(kf_ctx* ctx, int group, const void* send, void* recv, size_t count,
                       kf_dtype dt, int root);
int kf_group_all_to_all(kf_ctx* ctx, int group, const void* send, void* recv, size_t count,
                        kf_dtype dt);
int kf_group_barrier(kf_ctx* ctx, int group);

/* Bytes per element. */
static inline size_t kf_dtype_size(kf_dtype dt) {
  switch (dt) {
    case KF_F64:
    case KF_I64:
      return 8;
    case KF_F32:
    case KF_I32:
      return 4;
    case KF_F16:
    case KF_BF16:
      return 2;
    default:
      return 1;
  }
}

/* Lookups by name; NULL / the fallback when absent. */
static inline kf_tensor* kf_input(kf_ctx* ctx, const char* name) {
  for (int i = 0; i < ctx->num_inputs; ++i)
    if (strcmp(ctx->inputs[i].name, name) == 0) return &ctx->inputs[i];
  return NULL;
}
static inline kf_tensor* kf_output(kf_ctx* ctx, const char* name) {
  for (int i = 0; i < ctx->num_outputs; ++i)
    if (strcmp(ctx->outputs[i].name, name) == 0) return &ctx->outputs[i];
  return NULL;
}
static inline int kf_group_index(const kf_ctx* ctx, const char* name) {
  for (int i = 0; i < ctx->num_groups; ++i)
    if (strcmp(ctx->groups[i].name, name) == 0) return i;
  return -1;
}
static inline double kf_param(const kf_ctx* ctx, const char* name, double fallback) {
  for (int i = 0; i < ctx->num_params; ++i)
    if (strcmp(ctx->param_names[i], name) == 0) return ctx->param_values[i];
  return fallback;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

/* Device helpers for cross-rank signalling through the signal pad (optional).
 * A flag written with kf_signal (release, system scope) after a kernel's
 * stores makes those stores visible to a peer that observed it with kf_wait
 * (acquire, system scope). kf_wait traps after ~10 s so that a lost signal
 * becomes a reported error instead of a silent hang. */
#ifdef __CUDACC__
static __device__ __forceinline__ void kf_signal(uint32_t* slot, uint32_t value) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(slot), "r"(value) : "memory");
}
static __device__ __forceinline__ uint32_t kf_load_acquire(const uint32_t* slot) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(slot) : "memory");
  return v;
}
static __device__ __forceinline__ uint64_t kf_globaltimer_ns(void) {
  uint64_t t;
  asm volatile("mov.u64 %0, %globaltimer;" : "=l"(t));
  return t;
}
/* Spins until *slot >= value (wrap-safe for monotonically increasing epochs). */
static __device__ __forceinline__ void kf_wait(const uint32_t* slot, uint32_t value) {
  uint64_t start = kf_globaltimer_ns();
  while ((int32_t)(kf_load_acquire(slot) - value) < 0) {
    if (kf_globaltimer_ns() - start > 10ull * 1000 * 1000 * 1000) __trap();
  }
}
#endif /* __CUDACC__ */

#endif /* KFORGE_KERNEL_H_ */
