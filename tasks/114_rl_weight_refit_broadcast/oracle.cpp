// RL weight refit (NeMo-RL packed broadcast): every rank's weights are the root's
// params, tensor by tensor, moved from the trainer's layout into the engine's.
#include "kforge/oracle.h"

#include <cstdint>
#include <string>
#include <vector>

namespace {

// The tensors of one Qwen2.5 decoder layer, in model.parameters() order (HF Qwen2DecoderLayer:
// self_attn, mlp, then the two norms).
enum Kind { kQw, kQb, kKw, kKb, kVw, kVb, kOw, kGate, kUp, kDown, kInLn, kPostLn, kKinds };

int64_t Numel(Kind k, int64_t h, int64_t kv, int64_t i) {
  switch (k) {
    case kQw:
    case kOw:
      return h * h;
    case kKw:
    case kVw:
      return kv * h;
    case kKb:
    case kVb:
      return kv;
    case kGate:
    case kUp:
    case kDown:
      return i * h;
    default:  // q bias and the norms
      return h;
  }
}

struct Tensor {
  int64_t layer;
  Kind kind;
};

}  // namespace

// Rows in the trainer's order: Megatron's contiguous buffer holds the parameters in reverse
// model.parameters() order, back to back. dst: vLLM's order, layer by layer, with q/k/v weights
// stacked (qkv_proj), then their biases, o_proj, gate/up stacked (gate_up_proj), down_proj and
// the norms.
KF_INPUT_GENERATOR(rl_weight_refit_broadcast) {
  if (gen.input_name != "tensors")
    return kforge::Error(kforge::ErrorKind::kHarness, "rl_weight_refit_broadcast: custom input");
  const auto var = [&](const char* name) { return static_cast<int64_t>(gen.params.at(name)); };
  const int64_t l = var("L"), h = var("H"), kv = var("KV"), inter = var("I"), p = var("P");
  static constexpr Kind kEngine[kKinds] = {kQw, kKw,   kVw, kQb,   kKb,   kVb,
                                           kOw, kGate, kUp, kDown, kInLn, kPostLn};
  std::vector<std::vector<int64_t>> dst(static_cast<size_t>(l), std::vector<int64_t>(kKinds));
  int64_t at = 0;
  for (int64_t layer = 0; layer < l; ++layer) {
    for (Kind k : kEngine) {
      dst[static_cast<size_t>(layer)][k] = at;
      at += Numel(k, h, kv, inter);
    }
  }
  if (at != p) return kforge::Error(kforge::ErrorKind::kHarness, "rl_weight_refit_broadcast: P");
  auto& v = gen.tensor->data;
  if (static_cast<int64_t>(v.size()) != 3 * kKinds * l)
    return kforge::Error(kforge::ErrorKind::kHarness, "rl_weight_refit_broadcast: NT");
  int64_t src = 0;
  size_t row = 0;
  for (int64_t layer = l - 1; layer >= 0; --layer) {
    for (int k = kKinds - 1; k >= 0; --k, ++row) {
      const int64_t n = Numel(static_cast<Kind>(k), h, kv, inter);
      v[3 * row] = static_cast<double>(src);
      v[3 * row + 1] = static_cast<double>(dst[static_cast<size_t>(layer)][k]);
      v[3 * row + 2] = static_cast<double>(n);
      src += n;
    }
  }
  return kforge::Status::Ok();
}

KF_ORACLE(rl_weight_refit_broadcast) {
  const int root = static_cast<int>(io.param("root"));
  auto params = io.in(root, "params");
  auto tensors = io.in(root, "tensors");
  const int64_t p = static_cast<int64_t>(params.size());
  std::vector<double> weights(static_cast<size_t>(p), 0.0);
  std::vector<int> covered(static_cast<size_t>(p), 0);
  for (size_t t = 0; 3 * t < tensors.size(); ++t) {
    const int64_t src = static_cast<int64_t>(tensors[3 * t]);
    const int64_t dst = static_cast<int64_t>(tensors[3 * t + 1]);
    const int64_t n = static_cast<int64_t>(tensors[3 * t + 2]);
    if (src < 0 || dst < 0 || n < 0 || src + n > p || dst + n > p)
      return kforge::Error(kforge::ErrorKind::kHarness, "rl_weight_refit_broadcast: table");
    for (int64_t j = 0; j < n; ++j) {
      weights[static_cast<size_t>(dst + j)] = params[static_cast<size_t>(src + j)];
      ++covered[static_cast<size_t>(dst + j)];
    }
  }
  for (int c : covered) {
    if (c != 1)
      return kforge::Error(kforge::ErrorKind::kHarness,
                           "rl_weight_refit_broadcast: dst ranges do not tile [0, P)");
  }
  for (int r = 0; r < io.world; ++r) {
    auto out = io.out(r, "weights");
    for (size_t j = 0; j < weights.size(); ++j) out[j] = weights[j];
  }
  return kforge::Status::Ok();
}
