// The kf_* harness collectives, exported by the kforge-worker executable and
// resolved when a kernel's shared object is loaded. Each forwards to the
// rank's CollectiveBackend (ctx->harness) and enqueues on ctx->stream.
#include <cstdio>

#include "collectives.h"
#include "kforge/kernel.h"

using kforge::Status;
using kforge::worker::CollectiveBackend;

namespace {

int Report(kf_ctx* ctx, const char* what, const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "kforge rank %d: %s failed: %s\n", ctx ? ctx->rank : -1, what,
               s.message().c_str());
  return 1;
}

CollectiveBackend* Backend(kf_ctx* ctx) {
  return ctx ? static_cast<CollectiveBackend*>(ctx->harness) : nullptr;
}

}  // namespace

#define KF_FORWARD(name, call)                                                     \
  do {                                                                             \
    CollectiveBackend* b = Backend(ctx);                                           \
    if (!b) {                                                                      \
      std::fprintf(stderr, "kforge: %s called without a harness context\n", name); \
      return 1;                                                                    \
    }                                                                              \
    return Report(ctx, name, b->call);                                             \
  } while (0)

extern "C" {

int kf_all_reduce(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt,
                  kf_redop op) {
  KF_FORWARD("kf_all_reduce", AllReduce(send, recv, count, dt, op, ctx->stream));
}
int kf_all_gather(kf_ctx* ctx, const void* send, void* recv, size_t send_count, kf_dtype dt) {
  KF_FORWARD("kf_all_gather", AllGather(send, recv, send_count, dt, ctx->stream));
}
int kf_reduce_scatter(kf_ctx* ctx, const void* send, void* recv, size_t recv_count, kf_dtype dt,
                      kf_redop op) {
  KF_FORWARD("kf_reduce_scatter", ReduceScatter(send, recv, recv_count, dt, op, ctx->stream));
}
int kf_broadcast(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt, int root) {
  KF_FORWARD("kf_broadcast", Broadcast(send, recv, count, dt, root, ctx->stream));
}
int kf_reduce(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
              int root) {
  KF_FORWARD("kf_reduce", Reduce(send, recv, count, dt, op, root, ctx->stream));
}
int kf_all_to_all(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt) {
  KF_FORWARD("kf_all_to_all", AllToAll(send, recv, count, dt, ctx->stream));
}
int kf_group_start(kf_ctx* ctx) { KF_FORWARD("kf_group_start", GroupStart()); }
int kf_group_end(kf_ctx* ctx) { KF_FORWARD("kf_group_end", GroupEnd(ctx->stream)); }
int kf_send(kf_ctx* ctx, const void* buf, size_t count, kf_dtype dt, int peer) {
  KF_FORWARD("kf_send", Send(buf, count, dt, peer, ctx->stream));
}
int kf_recv(kf_ctx* ctx, void* buf, size_t count, kf_dtype dt, int peer) {
  KF_FORWARD("kf_recv", Recv(buf, count, dt, peer, ctx->stream));
}
int kf_barrier(kf_ctx* ctx) { KF_FORWARD("kf_barrier", Barrier(ctx->stream)); }

}  // extern "C"
