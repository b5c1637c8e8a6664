// The kf_* harness collectives, exported by the kforge-worker executable and
// resolved when a kernel's shared object is loaded. They forward to the one
// backend of this process, which exists only when the task lets this kernel
// use them: the reference's harness worker always, a candidate worker only
// when the task's policy allows harness collectives. Otherwise every call is
// refused, whatever pointer or context it comes through.
#include <fmt/format.h>

#include <cstdio>
#include <string>
#include <utility>

#include "collectives.h"
#include "kforge/kernel.h"

using kforge::Status;
using kforge::worker::CollectiveBackend;

namespace kforge::worker {
namespace {
CollectiveBackend* g_backend = nullptr;
const char* g_refusal = "this task does not allow the harness collectives";
std::string g_last_error;
std::string g_first_refused;  // the first refused call since the last TakeRefusal
int g_refused = 0;
}  // namespace

std::string TakeCollectiveError() { return std::exchange(g_last_error, std::string()); }

std::string NonZeroReturn(const std::string& what, int rc) {
  std::string message = what + " returned " + std::to_string(rc);
  if (std::string why = TakeCollectiveError(); !why.empty()) message += " (" + why + ")";
  return message;
}

Status TakeRefusal(const std::string& where) {
  if (g_refused == 0) return Status::Ok();
  std::string what = std::exchange(g_first_refused, std::string());
  const int n = std::exchange(g_refused, 0);
  return Error(ErrorKind::kPolicyViolation,
               fmt::format("{} called {} ({} refused call{}): {}, whatever pointer it is called "
                           "through",
                           where, what, n, n == 1 ? "" : "s", g_refusal));
}

Status CollectiveBackend::AllToAllV(int world, const void* send, const size_t* send_counts,
                                    const size_t* send_displs, void* recv,
                                    const size_t* recv_counts, const size_t* recv_displs,
                                    kf_dtype dt, cudaStream_t s) {
  if (send_counts == nullptr || send_displs == nullptr || recv_counts == nullptr ||
      recv_displs == nullptr) {
    return Error(ErrorKind::kInvalidInput, "a count or displacement array is NULL");
  }
  const size_t elem = kf_dtype_size(dt);
  KF_RETURN_IF_ERROR(GroupStart());
  Status st = Status::Ok();
  for (int p = 0; p < world && st.ok(); ++p) {
    st = Send(static_cast<const char*>(send) + send_displs[p] * elem, send_counts[p], dt, p, s);
    if (st.ok())
      st = Recv(static_cast<char*>(recv) + recv_displs[p] * elem, recv_counts[p], dt, p, s);
  }
  // The group is closed whatever happened, so that the backend stays usable.
  Status end = GroupEnd(s);
  return st.ok() ? end : st;
}

void SetProcessBackend(CollectiveBackend* backend, const char* refusal) {
  g_backend = backend;
  if (refusal != nullptr) g_refusal = refusal;
}

}  // namespace kforge::worker

namespace {

int Report(kf_ctx* ctx, const char* what, const Status& s) {
  if (s.ok()) return 0;
  std::fprintf(stderr, "kforge rank %d: %s failed: %s\n", ctx ? ctx->rank : -1, what,
               s.message().c_str());
  kforge::worker::g_last_error = std::string(what) + " failed: " + s.message();
  return 1;
}

int Refuse(kf_ctx* ctx, const char* what) {
  std::fprintf(stderr, "kforge rank %d: %s refused: %s\n", ctx ? ctx->rank : -1, what,
               kforge::worker::g_refusal);
  kforge::worker::g_last_error = std::string(what) + " refused: " + kforge::worker::g_refusal;
  if (kforge::worker::g_refused++ == 0) kforge::worker::g_first_refused = what;
  return 1;
}

int GroupIndex(kf_ctx* ctx, int group) {
  return ctx != nullptr && group >= 0 && group < ctx->num_groups ? group : -2;
}

}  // namespace

#define KF_FORWARD(name, call)                                    \
  do {                                                            \
    CollectiveBackend* b = kforge::worker::g_backend;             \
    if (b == nullptr || ctx == nullptr) return Refuse(ctx, name); \
    return Report(ctx, name, b->call);                            \
  } while (0)

#define KF_FORWARD_GROUP(name, call)                                  \
  do {                                                                \
    CollectiveBackend* b = kforge::worker::g_backend;                 \
    if (b == nullptr || ctx == nullptr) return Refuse(ctx, name);     \
    const int g = GroupIndex(ctx, group);                             \
    if (g < 0) {                                                      \
      std::fprintf(stderr, "kforge: %s: no group %d\n", name, group); \
      return 1;                                                       \
    }                                                                 \
    return Report(ctx, name, b->call);                                \
  } while (0)

extern "C" {

int kf_all_reduce(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt,
                  kf_redop op) {
  KF_FORWARD("kf_all_reduce", AllReduce(-1, send, recv, count, dt, op, ctx->stream));
}
int kf_all_gather(kf_ctx* ctx, const void* send, void* recv, size_t send_count, kf_dtype dt) {
  KF_FORWARD("kf_all_gather", AllGather(-1, send, recv, send_count, dt, ctx->stream));
}
int kf_reduce_scatter(kf_ctx* ctx, const void* send, void* recv, size_t recv_count, kf_dtype dt,
                      kf_redop op) {
  KF_FORWARD("kf_reduce_scatter", ReduceScatter(-1, send, recv, recv_count, dt, op, ctx->stream));
}
int kf_broadcast(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt, int root) {
  KF_FORWARD("kf_broadcast", Broadcast(-1, send, recv, count, dt, root, ctx->stream));
}
int kf_reduce(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt, kf_redop op,
              int root) {
  KF_FORWARD("kf_reduce", Reduce(-1, send, recv, count, dt, op, root, ctx->stream));
}
int kf_all_to_all(kf_ctx* ctx, const void* send, void* recv, size_t count, kf_dtype dt) {
  KF_FORWARD("kf_all_to_all", AllToAll(-1, send, recv, count, dt, ctx->stream));
}
int kf_all_to_allv(kf_ctx* ctx, const void* send, const size_t* send_counts,
                   const size_t* send_displs, void* recv, const size_t* recv_counts,
                   const size_t* recv_displs, kf_dtype dt) {
  KF_FORWARD("kf_all_to_allv", AllToAllV(ctx->world_size, send, send_counts, send_displs, recv,
                                         recv_counts, recv_displs, dt, ctx->stream));
}
int kf_group_start(kf_ctx* ctx) { KF_FORWARD("kf_group_start", GroupStart()); }
int kf_group_end(kf_ctx* ctx) { KF_FORWARD("kf_group_end", GroupEnd(ctx->stream)); }
int kf_send(kf_ctx* ctx, const void* buf, size_t count, kf_dtype dt, int peer) {
  KF_FORWARD("kf_send", Send(buf, count, dt, peer, ctx->stream));
}
int kf_recv(kf_ctx* ctx, void* buf, size_t count, kf_dtype dt, int peer) {
  KF_FORWARD("kf_recv", Recv(buf, count, dt, peer, ctx->stream));
}
int kf_barrier(kf_ctx* ctx) { KF_FORWARD("kf_barrier", Barrier(-1, ctx->stream)); }

int kf_group_all_reduce(kf_ctx* ctx, int group, const void* send, void* recv, size_t count,
                        kf_dtype dt, kf_redop op) {
  KF_FORWARD_GROUP("kf_group_all_reduce", AllReduce(g, send, recv, count, dt, op, ctx->stream));
}
int kf_group_all_gather(kf_ctx* ctx, int group, const void* send, void* recv, size_t send_count,
                        kf_dtype dt) {
  KF_FORWARD_GROUP("kf_group_all_gather", AllGather(g, send, recv, send_count, dt, ctx->stream));
}
int kf_group_reduce_scatter(kf_ctx* ctx, int group, const void* send, void* recv, size_t recv_count,
                            kf_dtype dt, kf_redop op) {
  KF_FORWARD_GROUP("kf_group_reduce_scatter",
                   ReduceScatter(g, send, recv, recv_count, dt, op, ctx->stream));
}
int kf_group_broadcast(kf_ctx* ctx, int group, const void* send, void* recv, size_t count,
                       kf_dtype dt, int root) {
  KF_FORWARD_GROUP("kf_group_broadcast", Broadcast(g, send, recv, count, dt, root, ctx->stream));
}
int kf_group_all_to_all(kf_ctx* ctx, int group, const void* send, void* recv, size_t count,
                        kf_dtype dt) {
  KF_FORWARD_GROUP("kf_group_all_to_all", AllToAll(g, send, recv, count, dt, ctx->stream));
}
int kf_group_barrier(kf_ctx* ctx, int group) {
  KF_FORWARD_GROUP("kf_group_barrier", Barrier(g, ctx->stream));
}

}  // extern "C"
