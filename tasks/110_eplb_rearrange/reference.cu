// vLLM EPLB baseline (rebalance_execute.py move_to_buffer + move_from_buffer with the
// torch_nccl communicator): both maps to the host (vLLM's .cpu()), the plan in host code,
// then
//   1. local moves into the staging buffer (rows this rank already held);
//   2. one NCCL group (kf_group_start .. kf_group_end): for every expert this rank holds, in
//      expert order, a send of its first row of w13 and of w2 to each rank the split assigns
//      it; for every expert it needs from elsewhere, in expert order, a receive of both
//      tensors into the buffer row of its first slot wanting it (the primary);
//   3. the buffer rows back into w13 and w2, and the primary's row into any other slot
//      wanting the same expert (the duplicates).
// Sends read w13/w2 before step 3 overwrites them: the group completes first on this
// stream, and a peer's group completes only when its receives from this rank have landed.
#include <stdint.h>

#include <algorithm>
#include <map>
#include <vector>

#include "kforge/kernel.h"

namespace {

struct State {
  std::vector<int64_t> old_map, new_map;
  int64_t lp = 0, d1 = 0, d2 = 0;
  size_t elem = 0;
  char* buf13 = nullptr;  // [Lp][D1] staging
  char* buf2 = nullptr;   // [Lp][D2]
};

int Check(cudaError_t e) { return e == cudaSuccess ? 0 : 1; }

// vLLM's get_ep_ranks_with_experts_batch for one expert: the ranks holding it before (in order
// of first appearance, i.e. rank order) and those wanting it after that did not hold it.
void RanksOf(const State& st, int world, int64_t e, std::vector<int>* senders,
             std::vector<int>* receivers) {
  senders->clear();
  receivers->clear();
  for (int q = 0; q < world; ++q) {
    bool had = false, has = false;
    for (int64_t j = 0; j < st.lp; ++j) {
      had = had || st.old_map[q * st.lp + j] == e;
      has = has || st.new_map[q * st.lp + j] == e;
    }
    if (had) senders->push_back(q);
    if (has && !had) receivers->push_back(q);
  }
}

}  // namespace

extern "C" int kf_setup(kf_ctx* ctx) {
  const kf_tensor* w13 = kf_input(ctx, "w13");
  const kf_tensor* w2 = kf_input(ctx, "w2");
  if (w13 == nullptr || w2 == nullptr || w13->ndim != 2 || w2->ndim != 2) return 1;
  State* st = new State;
  st->lp = w13->shape[0];
  st->d1 = w13->shape[1];
  st->d2 = w2->shape[1];
  st->elem = kf_dtype_size(w13->dtype);
  const size_t b13 = (static_cast<size_t>(st->lp * st->d1) * st->elem + 255) / 256 * 256;
  st->buf13 = static_cast<char*>(ctx->workspace.data);
  st->buf2 = st->buf13 + b13;
  if (b13 + static_cast<size_t>(st->lp * st->d2) * st->elem > ctx->workspace.nbytes) {
    delete st;
    return 1;
  }
  st->old_map.resize(static_cast<size_t>(ctx->world_size * st->lp));
  st->new_map.resize(st->old_map.size());
  ctx->user = st;
  return 0;
}

extern "C" int kf_run(kf_ctx* ctx) {
  State* st = static_cast<State*>(ctx->user);
  if (st == nullptr) return 1;
  const int world = ctx->world_size, rank = ctx->rank;
  const int64_t lp = st->lp;
  cudaStream_t s = ctx->stream;
  kf_tensor* w13 = kf_input(ctx, "w13");
  kf_tensor* w2 = kf_input(ctx, "w2");
  const size_t row13 = static_cast<size_t>(st->d1) * st->elem,
               row2 = static_cast<size_t>(st->d2) * st->elem;
  char* t13 = static_cast<char*>(w13->data);
  char* t2 = static_cast<char*>(w2->data);

  const size_t map_bytes = st->old_map.size() * sizeof(int64_t);
  if (Check(cudaMemcpyAsync(st->old_map.data(), kf_input(ctx, "old_map")->data, map_bytes,
                            cudaMemcpyDeviceToHost, s)) ||
      Check(cudaMemcpyAsync(st->new_map.data(), kf_input(ctx, "new_map")->data, map_bytes,
                            cudaMemcpyDeviceToHost, s)) ||
      Check(cudaStreamSynchronize(s)))
    return 1;

  const int64_t* old_local = st->old_map.data() + rank * lp;
  const int64_t* new_local = st->new_map.data() + rank * lp;
  std::map<int64_t, int64_t> first_old;  // expert -> first local row holding it before
  for (int64_t j = 0; j < lp; ++j) first_old.emplace(old_local[j], j);
  std::vector<bool> unchanged(lp), local(lp), primary(lp, false);
  std::map<int64_t, int64_t> need;  // expert wanted from elsewhere -> its primary row
  for (int64_t j = 0; j < lp; ++j) {
    unchanged[j] = old_local[j] == new_local[j];
    local[j] = unchanged[j] || first_old.count(new_local[j]) != 0;
    if (!local[j] && need.emplace(new_local[j], j).second) primary[j] = true;
  }

  // 1. Local moves into the buffer.
  for (int64_t j = 0; j < lp; ++j) {
    if (unchanged[j] || !local[j]) continue;
    const int64_t src = first_old.at(new_local[j]);
    if (Check(cudaMemcpyAsync(st->buf13 + j * row13, t13 + src * row13, row13,
                              cudaMemcpyDeviceToDevice, s)) ||
        Check(cudaMemcpyAsync(st->buf2 + j * row2, t2 + src * row2, row2, cudaMemcpyDeviceToDevice,
                              s)))
      return 1;
  }

  // 2. One group of sends and receives, experts in increasing order on both sides.
  std::vector<int> senders, receivers;
  if (kf_group_start(ctx) != 0) return 1;
  for (const auto& [e, src] : first_old) {
    RanksOf(*st, world, e, &senders, &receivers);
    if (senders.empty() || receivers.empty()) continue;
    const size_t n = receivers.size() / senders.size(),
                 pos = std::find(senders.begin(), senders.end(), rank) - senders.begin();
    std::vector<int> to(receivers.begin() + pos * n, receivers.begin() + (pos + 1) * n);
    if (senders.size() * n + pos < receivers.size())
      to.push_back(receivers[senders.size() * n + pos]);
    for (int dst : to) {
      if (kf_send(ctx, t13 + src * row13, st->d1, w13->dtype, dst) != 0 ||
          kf_send(ctx, t2 + src * row2, st->d2, w2->dtype, dst) != 0)
        return 1;
    }
  }
  for (const auto& [e, dst_row] : need) {
    RanksOf(*st, world, e, &senders, &receivers);
    const size_t n = receivers.size() / senders.size(), m = senders.size() * n;
    const size_t i = std::find(receivers.begin(), receivers.end(), rank) - receivers.begin();
    const int src = i < m ? senders[i / n] : senders[i - m];
    if (kf_recv(ctx, st->buf13 + dst_row * row13, st->d1, w13->dtype, src) != 0 ||
        kf_recv(ctx, st->buf2 + dst_row * row2, st->d2, w2->dtype, src) != 0)
      return 1;
  }
  if (kf_group_end(ctx) != 0) return 1;

  // 3. Back from the buffer, then the duplicates from their primary.
  for (int64_t j = 0; j < lp; ++j) {
    if (unchanged[j] || !(local[j] || primary[j])) continue;
    if (Check(cudaMemcpyAsync(t13 + j * row13, st->buf13 + j * row13, row13,
                              cudaMemcpyDeviceToDevice, s)) ||
        Check(
            cudaMemcpyAsync(t2 + j * row2, st->buf2 + j * row2, row2, cudaMemcpyDeviceToDevice, s)))
      return 1;
  }
  for (int64_t j = 0; j < lp; ++j) {
    if (unchanged[j] || local[j] || primary[j]) continue;
    const int64_t p = need.at(new_local[j]);
    if (Check(cudaMemcpyAsync(t13 + j * row13, t13 + p * row13, row13, cudaMemcpyDeviceToDevice,
                              s)) ||
        Check(cudaMemcpyAsync(t2 + j * row2, t2 + p * row2, row2, cudaMemcpyDeviceToDevice, s)))
      return 1;
  }
  return 0;
}

extern "C" int kf_teardown(kf_ctx* ctx) {
  delete static_cast<State*>(ctx->user);
  ctx->user = nullptr;
  return 0;
}
