// fp64 building blocks for task oracles: GEMM, norms, activations, softmax
// and cross-entropy, attention with log-sum-exp merging, a two-layer MLP,
// Adam/AdamW, and the fp8/int8/bf16/f16 rounding and block quantization that a
// correct kernel is required to perform. One implementation for every oracle,
// unit-tested on hand-computed cases (tests/tasks/oracle_math_test.cc).
//
// Conventions for every function here:
//  - Tensors are row-major spans of doubles; sizes are int64_t element counts.
//  - Outputs are overwritten (never accumulated into) unless a `beta` says so.
//    Outputs must not alias inputs.
//  - A span whose size disagrees with the stated shape is a bug in the calling
//    oracle: the function prints "oracle_math: <Function>: ..." to stderr and
//    aborts. Functions whose *values* can be inconsistent (an out-of-range
//    target index) return a Status instead.
//  - Where a parameter is documented as "may be empty", an empty span means
//    the default stated there (weights of ones, bias of zeros, or "do not
//    compute this gradient").
//  - Everything is deterministic: the same inputs give the same bits whatever
//    the number of threads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kforge/core/status.h"

namespace kforge::om {

// ---------------------------------------------------------------------------
// GEMM

// C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C.
// op(A) is A stored [m,k], or with trans_a, A stored [k,m] (op(A) = A^T).
// op(B) is B stored [k,n], or with trans_b, B stored [n,k] (op(B) = B^T).
// With beta == 0, C is not read (NaN in C does not propagate), as in BLAS.
// Plain fp64 sums in order p = 0..k-1; rows are spread over threads.
void Gemm(std::span<const double> a, std::span<const double> b, std::span<double> c, int64_t m,
          int64_t n, int64_t k, bool trans_a = false, bool trans_b = false, double alpha = 1.0,
          double beta = 0.0);

// ---------------------------------------------------------------------------
// Normalisation (per row of x[rows, cols])

// RMSNorm (HF LlamaRMSNorm): y = x / sqrt(mean(x^2) + eps) * weight.
// weight [cols] may be empty (ones).
void RmsNorm(std::span<const double> x, std::span<const double> weight, std::span<double> y,
             int64_t rows, int64_t cols, double eps);

// Gradients of RmsNorm given dy [rows, cols]. With r = 1/sqrt(mean(x^2)+eps),
// xhat = x*r, g = dy*weight:  dx = r * (g - xhat * mean(g*xhat)),
// dweight[c] = sum over rows of dy*xhat. weight may be empty (ones); dweight
// may be empty (not computed).
void RmsNormBackward(std::span<const double> x, std::span<const double> weight,
                     std::span<const double> dy, std::span<double> dx, std::span<double> dweight,
                     int64_t rows, int64_t cols, double eps);

// LayerNorm (torch.nn.functional.layer_norm over the last dim): with mean mu
// and biased variance var of the row, y = (x - mu) / sqrt(var + eps) * gamma
// + beta. gamma [cols] may be empty (ones); beta [cols] may be empty (zeros).
void LayerNorm(std::span<const double> x, std::span<const double> gamma,
               std::span<const double> beta, std::span<double> y, int64_t rows, int64_t cols,
               double eps);

// Gradients of LayerNorm given dy. With r = 1/sqrt(var+eps), xhat = (x-mu)*r,
// g = dy*gamma:  dx = r * (g - mean(g) - xhat * mean(g*xhat)),
// dgamma[c] = sum over rows of dy*xhat, dbeta[c] = sum over rows of dy.
// gamma may be empty (ones); dgamma and dbeta may be empty (not computed).
void LayerNormBackward(std::span<const double> x, std::span<const double> gamma,
                       std::span<const double> dy, std::span<double> dx, std::span<double> dgamma,
                       std::span<double> dbeta, int64_t rows, int64_t cols, double eps);

// ---------------------------------------------------------------------------
// Activations and their derivatives d act(x) / dx

// torch gelu(approximate='tanh'): 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).
double Gelu(double x);
double GeluGrad(double x);
// torch gelu (default, erf): 0.5x(1 + erf(x/sqrt(2))).
double GeluExact(double x);
double GeluExactGrad(double x);
// SiLU / swish: x * sigmoid(x).
double Silu(double x);
double SiluGrad(double x);

enum class Activation { kGelu, kGeluExact, kSilu, kRelu, kIdentity };

// act(x) and act'(x) for any Activation. ReLU is max(x, 0) with derivative 0
// at x <= 0 (torch's threshold_backward).
double Activate(Activation act, double x);
double ActivateGrad(Activation act, double x);

// ---------------------------------------------------------------------------
// Softmax and cross-entropy (per row of [rows, cols])

// y = exp(x - max) / sum(exp(x - max)) per row. A row of all -inf gives NaN,
// as torch.softmax does.
void Softmax(std::span<const double> x, std::span<double> y, int64_t rows, int64_t cols);

// log(sum(exp(row))), computed as max + log(sum(exp(row - max))). An empty
// row or a row of all -inf gives -inf; any +inf gives +inf; NaN gives NaN.
double LogSumExp(std::span<const double> row);

// Top-k then top-p (nucleus) filtering of one row of logits z, as samplers do
// (NeMo-RL, vLLM), with ties decided by value: the top-k set is every value
// >= the k-th largest counted with multiplicity (k = min(top_k, |z|)); top-p
// then keeps groups of equal values, largest first, while the softmax mass of
// the strictly larger values is < top_p times the top-k set's (the first group
// always). The support is {v : z[v] >= theta} plus `target`, which is always
// part of it. Returns m = max z, theta and log_z = log(sum over the support of
// exp(z[v] - m)), so that a kept token's log-probability is z[v] - m - log_z.
// top_k >= 1, 0 < top_p <= 1, z not empty, 0 <= target < |z|.
struct FilteredRow {
  double m = 0, theta = 0, log_z = 0;
};
FilteredRow TopKTopPFilter(std::span<const double> z, int64_t target, int64_t top_k, double top_p);

// torch.nn.functional.cross_entropy(logits, targets, reduction='none'):
// loss[r] = LogSumExp(logits[r, :]) - logits[r, targets[r]], and 0 where
// targets[r] == ignore_index (torch's default is -100). logits [rows, cols],
// targets [rows], loss [rows]. A target outside [0, cols) that is not
// ignore_index is kInvalidInput. The double overload takes targets as the
// oracle sees integer tensors; a non-integral target is kInvalidInput.
Status CrossEntropy(std::span<const double> logits, std::span<const int64_t> targets,
                    std::span<double> loss, int64_t rows, int64_t cols,
                    int64_t ignore_index = -100);
Status CrossEntropy(std::span<const double> logits, std::span<const double> targets,
                    std::span<double> loss, int64_t rows, int64_t cols,
                    int64_t ignore_index = -100);

// Gradient of CrossEntropy given dloss [rows] (for a mean reduction pass
// dloss[r] = 1/count of non-ignored rows): dlogits[r, :] = dloss[r] *
// (softmax(logits[r, :]) - onehot(targets[r])), and 0 for ignored rows.
Status CrossEntropyBackward(std::span<const double> logits, std::span<const int64_t> targets,
                            std::span<const double> dloss, std::span<double> dlogits, int64_t rows,
                            int64_t cols, int64_t ignore_index = -100);

// ---------------------------------------------------------------------------
// Scaled dot-product attention in flash-attention's layout, for the
// context-parallel tasks (ring attention and its variants)

// q [batch, q_len, q_heads, head_dim]; k, v [batch, kv_len, kv_heads, head_dim];
// q_heads is a multiple of kv_heads (GQA/MQA): query head h reads kv head
// h / (q_heads / kv_heads). Each query's keys carry global sequence positions:
// query i sits at q_pos0 + i, key j at kv_pos0 + j, so a sequence shard is
// attended to by passing its offset.
struct AttentionDims {
  int64_t batch = 1;
  int64_t q_len = 0;
  int64_t kv_len = 0;
  int64_t q_heads = 1;
  int64_t kv_heads = 1;
  int64_t head_dim = 0;
  bool causal = false;  // key j is visible to query i iff kv_pos0 + j <= q_pos0 + i
  int64_t q_pos0 = 0;
  int64_t kv_pos0 = 0;
};

// With s_ij = scale * q_i . k_j over the keys j visible to query i:
//   out_i = sum_j softmax_j(s_i) v_j     out [batch, q_len, q_heads, head_dim]
//   lse_i = log(sum_j exp(s_ij))         lse [batch, q_heads, q_len] (may be empty)
// (lse in flash-attention's [B, H, S] layout, natural log of the scaled
// scores). A query that sees no key gets out 0 and lse -inf, the identity of
// MergeAttention. Rows are spread over threads; results do not depend on it.
void Attention(std::span<const double> q, std::span<const double> k, std::span<const double> v,
               std::span<double> out, std::span<double> lse, const AttentionDims& dims,
               double scale);

// Combines two partial results of the same queries over disjoint sets of keys
// (ring-flash-attention's merge), in place on (out, lse):
//   lse' = log(exp(lse) + exp(lse_b))
//   out' = exp(lse - lse') * out + exp(lse_b - lse') * out_b
// out, out_b [batch, len, heads, head_dim]; lse, lse_b [batch, heads, len].
// A side with lse -inf contributes nothing; both -inf leaves (0, -inf).
void MergeAttention(std::span<double> out, std::span<double> lse, std::span<const double> out_b,
                    std::span<const double> lse_b, int64_t batch, int64_t len, int64_t heads,
                    int64_t head_dim);

// The gradients of sum(dout .* out) for out = Attention(q, k, v) (flash-attention's backward),
// given the forward's out and lse: with p_ij = exp(s_ij - lse_i) over the keys j visible to
// query i, delta_i = dout_i . out_i, dp_ij = dout_i . v_j and ds_ij = p_ij (dp_ij - delta_i),
//   dq_i = scale sum_j ds_ij k_j,   dk_j = scale sum_i ds_ij q_i,   dv_j = sum_i p_ij dout_i
// where dk and dv sum over every query head that reads the kv head. dout, out and dq are shaped
// like q, dk and dv like k, lse [batch, q_heads, q_len]. They are the gradient only where out
// and lse are Attention's of the same q, k, v; the formula is applied as given either way.
void AttentionBackward(std::span<const double> q, std::span<const double> k,
                       std::span<const double> v, std::span<const double> dout,
                       std::span<const double> out, std::span<const double> lse,
                       std::span<double> dq, std::span<double> dk, std::span<double> dv,
                       const AttentionDims& dims, double scale);

// ---------------------------------------------------------------------------
// Two-layer MLP without biases: y = act(x * w1) * w2.
// x [tokens, d_model], w1 [d_model, d_ff], w2 [d_ff, d_model], y [tokens, d_model].

// hidden_out [tokens, d_ff] receives the PRE-activation h = x * w1 (what the
// backward pass needs); it may be empty (not returned).
void MlpForward(std::span<const double> x, std::span<const double> w1, std::span<const double> w2,
                std::span<double> hidden_out, std::span<double> y, int64_t tokens, int64_t d_model,
                int64_t d_ff, Activation act);

struct MlpGrads {
  std::vector<double> dx;   // [tokens, d_model]
  std::vector<double> dw1;  // [d_model, d_ff]
  std::vector<double> dw2;  // [d_ff, d_model]
};

// Gradients of sum(dy .* y) for y = MlpForward(x, w1, w2), dy [tokens, d_model]:
// h = x*w1, a = act(h); dw2 = a^T*dy; dh = (dy*w2^T) .* act'(h);
// dw1 = x^T*dh; dx = dh*w1^T. The forward pass is recomputed internally.
MlpGrads MlpBackward(std::span<const double> x, std::span<const double> w1,
                     std::span<const double> w2, std::span<const double> dy, int64_t tokens,
                     int64_t d_model, int64_t d_ff, Activation act);

// torch.nn.Linear -> ReLU -> Linear with MSE loss, the model of
// ParallelKernelBench's DDP / ZeRO / FSDP problems:
//   z = x * w1^T + b1, h = relu(z), out = h * w2^T + b2,
//   loss = mean((out - y)^2) over all n * d_out elements (F.mse_loss).
// x [n, d_in], y [n, d_out], w1 [hidden, d_in], b1 [hidden], w2 [d_out, hidden],
// b2 [d_out] (nn.Linear's [out_features, in_features] layout). Returns the
// loss and its gradients with respect to the four parameters (ReLU' = 0 at 0).
struct LinearReluMseGrads {
  double loss = 0;
  std::vector<double> w1, b1, w2, b2;
};
LinearReluMseGrads LinearReluMseBackward(std::span<const double> x, std::span<const double> y,
                                         std::span<const double> w1, std::span<const double> b1,
                                         std::span<const double> w2, std::span<const double> b2,
                                         int64_t n, int64_t d_in, int64_t hidden, int64_t d_out);

// ---------------------------------------------------------------------------
// Adam / AdamW, matching torch.optim.Adam and torch.optim.AdamW (amsgrad=False,
// maximize=False) for one step t = `step` (1-based):
//   Adam  (decoupled = false): g = grad + weight_decay * param
//   AdamW (decoupled = true):  param *= 1 - lr * weight_decay;  g = grad
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   param -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// i.e. eps is added to sqrt of the bias-corrected v, as torch does.
struct AdamConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = true;  // true: AdamW; false: Adam with L2 weight decay
  int64_t step = 1;       // 1-based step count after this update, for bias correction
};

// Updates param, m (exp_avg) and v (exp_avg_sq) in place; all four spans have
// the same size. step < 1 aborts.
void AdamStep(std::span<double> param, std::span<const double> grad, std::span<double> m,
              std::span<double> v, const AdamConfig& config);

// ---------------------------------------------------------------------------
// Rounding to narrow floating formats, round-to-nearest-even, with subnormals.
// NaN stays NaN and the sign of zero is kept. Input is rounded once, straight
// from double.

// OCP FP8 E4M3 "fn" (torch.float8_e4m3fn): bias 7, 3 mantissa bits, max 448,
// min normal 2^-6, min subnormal 2^-9, no infinities. Choice: values whose
// magnitude rounds above 448, and +-inf, SATURATE to +-448, as a cast after
// clamp(-448, 448) does and as CUDA's __NV_SATFINITE conversion does. (c10's
// unclamped fp8e4m3fn_from_fp32_value gives NaN for |x| > 464 and for inf.)
double RoundToE4M3(double x);

// OCP FP8 E5M2 (torch.float8_e5m2): bias 15, 2 mantissa bits, max 57344,
// min normal 2^-14, min subnormal 2^-16, IEEE-like: overflow follows IEEE
// round-to-nearest, so |x| >= 61440 becomes +-inf and inf stays inf. Callers
// that need saturation clamp to +-57344 first.
double RoundToE5M2(double x);

// bfloat16 (8 exponent bits, 7 mantissa bits) and IEEE binary16 (5, 10);
// overflow to +-inf as IEEE round-to-nearest does (|x| >= 65520 for f16).
double RoundToBf16(double x);
double RoundToF16(double x);

// Round half to even to an integer (2.5 -> 2, 3.5 -> 4, -0.5 -> -0).
double RoundHalfEven(double x);

// ---------------------------------------------------------------------------
// Block quantization (DeepSeek-V3 act_quant style). For every block,
// scale = amax / qmax, where amax = max |x| over the block and qmax is 448
// (fp8 e4m3) or 127 (int8); a block whose amax is 0 gets scale 1 (so q = 0
// and dequantization is exact). q = round(x / scale) in the target format.
// Scales are not rounded (kernels keep them in fp32; the difference is far
// below fp8/int8 resolution). A NaN in a block makes its scale NaN.

struct BlockQuant {
  std::vector<double> q;      // quantized values, same layout as x
  std::vector<double> scale;  // one per block, row-major over the block grid
};

// x [rows, cols] in blocks of [block_rows, block_cols]; edge blocks may be
// partial. scale is [cdiv(rows, block_rows), cdiv(cols, block_cols)];
// q = RoundToE4M3(x / scale).
BlockQuant QuantizeFp8Blocked(std::span<const double> x, int64_t rows, int64_t cols,
                              int64_t block_rows, int64_t block_cols);

// x [n] in consecutive blocks of `block` (the last may be partial):
// scale [cdiv(n, block)] = amax / 127, q = RoundHalfEven(x / scale) clamped
// to [-127, 127]. n must equal x.size().
BlockQuant QuantizeInt8Blocked(std::span<const double> x, int64_t n, int64_t block);

// q * scale of the block each element is in; the inverse layout of the
// quantizers above (for int8 or a flat vector use rows = 1, block_rows = 1).
std::vector<double> DequantizeBlocked(const BlockQuant& bq, int64_t rows, int64_t cols,
                                      int64_t block_rows, int64_t block_cols);

// Flat-vector conveniences: QuantizeFp8Blocked(x, 1, x.size(), 1, block) and
// DequantizeBlocked(bq, 1, bq.q.size(), 1, block).
BlockQuant QuantizeFp8Flat(std::span<const double> x, int64_t block);
std::vector<double> DequantizeFlat(const BlockQuant& bq, int64_t block);

}  // namespace kforge::om
