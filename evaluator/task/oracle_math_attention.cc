// Attention and the log-sum-exp merge of partial attention results for
// oracles (kforge/oracle_math.h), in fp64.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kforge/oracle.h"
#include "kforge/oracle_math.h"
#include "oracle_math_checks.h"

namespace kforge::om {

using internal::CheckDim;
using internal::CheckOptional;
using internal::CheckSize;
using internal::Fail;

void Attention(std::span<const double> q, std::span<const double> k, std::span<const double> v,
               std::span<double> out, std::span<double> lse, const AttentionDims& d, double scale) {
  const char* fn = "Attention";
  CheckDim(fn, "batch", d.batch);
  CheckDim(fn, "q_len", d.q_len);
  CheckDim(fn, "kv_len", d.kv_len);
  CheckDim(fn, "head_dim", d.head_dim);
  if (d.q_heads <= 0 || d.kv_heads <= 0 || d.q_heads % d.kv_heads != 0)
    Fail(fn, "q_heads must be a positive multiple of kv_heads");
  const int64_t hd = d.head_dim, hq = d.q_heads, hkv = d.kv_heads, group = hq / hkv;
  CheckSize(fn, "q", q.size(), d.batch * d.q_len * hq * hd);
  CheckSize(fn, "k", k.size(), d.batch * d.kv_len * hkv * hd);
  CheckSize(fn, "v", v.size(), d.batch * d.kv_len * hkv * hd);
  CheckSize(fn, "out", out.size(), d.batch * d.q_len * hq * hd);
  CheckOptional(fn, "lse", lse.size(), d.batch * hq * d.q_len);
  // One item per (batch, query head, query): each writes only its own row.
  OracleParallelFor(
      d.batch * hq * d.q_len,
      [&](int64_t begin, int64_t end) {
        std::vector<double> s(static_cast<size_t>(d.kv_len));
        for (int64_t item = begin; item < end; ++item) {
          const int64_t b = item / (hq * d.q_len), h = item / d.q_len % hq, i = item % d.q_len;
          const int64_t kh = h / group;
          const double* qi = q.data() + ((b * d.q_len + i) * hq + h) * hd;
          double* oi = out.data() + ((b * d.q_len + i) * hq + h) * hd;
          // Keys 0 .. visible-1 are the ones query i sees.
          int64_t visible = d.kv_len;
          if (d.causal) visible = std::clamp<int64_t>(d.q_pos0 + i - d.kv_pos0 + 1, 0, d.kv_len);
          double mx = -std::numeric_limits<double>::infinity();
          for (int64_t j = 0; j < visible; ++j) {
            const double* kj = k.data() + ((b * d.kv_len + j) * hkv + kh) * hd;
            double dot = 0;
            for (int64_t c = 0; c < hd; ++c) dot += qi[c] * kj[c];
            s[j] = scale * dot;
            mx = std::max(mx, s[j]);
          }
          std::fill(oi, oi + hd, 0.0);
          double sum = 0;
          for (int64_t j = 0; j < visible; ++j) {
            const double p = std::exp(s[j] - mx);
            sum += p;
            const double* vj = v.data() + ((b * d.kv_len + j) * hkv + kh) * hd;
            for (int64_t c = 0; c < hd; ++c) oi[c] += p * vj[c];
          }
          if (visible > 0)
            for (int64_t c = 0; c < hd; ++c) oi[c] /= sum;
          if (!lse.empty()) {
            lse[(b * hq + h) * d.q_len + i] =
                visible > 0 ? mx + std::log(sum) : -std::numeric_limits<double>::infinity();
          }
        }
      },
      16);
}

void MergeAttention(std::span<double> out, std::span<double> lse, std::span<const double> out_b,
                    std::span<const double> lse_b, int64_t batch, int64_t len, int64_t heads,
                    int64_t head_dim) {
  const char* fn = "MergeAttention";
  CheckDim(fn, "batch", batch);
  CheckDim(fn, "len", len);
  CheckDim(fn, "heads", heads);
  CheckDim(fn, "head_dim", head_dim);
  CheckSize(fn, "out", out.size(), batch * len * heads * head_dim);
  CheckSize(fn, "out_b", out_b.size(), batch * len * heads * head_dim);
  CheckSize(fn, "lse", lse.size(), batch * heads * len);
  CheckSize(fn, "lse_b", lse_b.size(), batch * heads * len);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < len; ++i) {
        double& l = lse[(b * heads + h) * len + i];
        const double lb = lse_b[(b * heads + h) * len + i];
        const double mx = std::max(l, lb);
        if (std::isinf(mx) && mx < 0) continue;  // neither side saw a key
        const double ea = std::exp(l - mx), eb = std::exp(lb - mx);
        const double merged = mx + std::log(ea + eb);
        const double wa = ea / (ea + eb), wb = eb / (ea + eb);
        double* o = out.data() + ((b * len + i) * heads + h) * head_dim;
        const double* ob = out_b.data() + ((b * len + i) * heads + h) * head_dim;
        for (int64_t c = 0; c < head_dim; ++c) o[c] = wa * o[c] + wb * ob[c];
        l = merged;
      }
}

void AttentionBackward(std::span<const double> q, std::span<const double> k,
                       std::span<const double> v, std::span<const double> dout,
                       std::span<const double> out, std::span<const double> lse,
                       std::span<double> dq, std::span<double> dk, std::span<double> dv,
                       const AttentionDims& d, double scale) {
  const char* fn = "AttentionBackward";
  CheckDim(fn, "batch", d.batch);
  CheckDim(fn, "q_len", d.q_len);
  CheckDim(fn, "kv_len", d.kv_len);
  CheckDim(fn, "head_dim", d.head_dim);
  if (d.q_heads <= 0 || d.kv_heads <= 0 || d.q_heads % d.kv_heads != 0)
    Fail(fn, "q_heads must be a positive multiple of kv_heads");
  const int64_t hd = d.head_dim, hq = d.q_heads, hkv = d.kv_heads, group = hq / hkv;
  const int64_t q_elems = d.batch * d.q_len * hq * hd, kv_elems = d.batch * d.kv_len * hkv * hd;
  CheckSize(fn, "q", q.size(), q_elems);
  CheckSize(fn, "k", k.size(), kv_elems);
  CheckSize(fn, "v", v.size(), kv_elems);
  CheckSize(fn, "dout", dout.size(), q_elems);
  CheckSize(fn, "out", out.size(), q_elems);
  CheckSize(fn, "lse", lse.size(), d.batch * hq * d.q_len);
  CheckSize(fn, "dq", dq.size(), q_elems);
  CheckSize(fn, "dk", dk.size(), kv_elems);
  CheckSize(fn, "dv", dv.size(), kv_elems);
  // One item per (batch, kv head): it owns the dk, dv rows of that head and the dq rows of the
  // query heads that read it.
  OracleParallelFor(
      d.batch * hkv,
      [&](int64_t begin, int64_t end) {
        std::vector<double> p(static_cast<size_t>(d.kv_len)), ds(static_cast<size_t>(d.kv_len));
        for (int64_t item = begin; item < end; ++item) {
          const int64_t b = item / hkv, kh = item % hkv;
          auto kv_row = [&](std::span<const double> x, int64_t j) {
            return x.data() + ((b * d.kv_len + j) * hkv + kh) * hd;
          };
          for (int64_t j = 0; j < d.kv_len; ++j) {
            std::fill_n(dk.data() + ((b * d.kv_len + j) * hkv + kh) * hd, hd, 0.0);
            std::fill_n(dv.data() + ((b * d.kv_len + j) * hkv + kh) * hd, hd, 0.0);
          }
          for (int64_t h = kh * group; h < (kh + 1) * group; ++h)
            for (int64_t i = 0; i < d.q_len; ++i) {
              const int64_t row = ((b * d.q_len + i) * hq + h) * hd;
              const double* qi = q.data() + row;
              const double* doi = dout.data() + row;
              const double* oi = out.data() + row;
              double* dqi = dq.data() + row;
              std::fill_n(dqi, hd, 0.0);
              int64_t visible = d.kv_len;
              if (d.causal)
                visible = std::clamp<int64_t>(d.q_pos0 + i - d.kv_pos0 + 1, 0, d.kv_len);
              const double l = lse[(b * hq + h) * d.q_len + i];
              double delta = 0;
              for (int64_t c = 0; c < hd; ++c) delta += doi[c] * oi[c];
              for (int64_t j = 0; j < visible; ++j) {
                const double *kj = kv_row(k, j), *vj = kv_row(v, j);
                double s = 0, dp = 0;
                for (int64_t c = 0; c < hd; ++c) {
                  s += qi[c] * kj[c];
                  dp += doi[c] * vj[c];
                }
                p[j] = std::exp(scale * s - l);
                ds[j] = p[j] * (dp - delta);
              }
              for (int64_t j = 0; j < visible; ++j) {
                const double* kj = kv_row(k, j);
                double* dkj = dk.data() + ((b * d.kv_len + j) * hkv + kh) * hd;
                double* dvj = dv.data() + ((b * d.kv_len + j) * hkv + kh) * hd;
                for (int64_t c = 0; c < hd; ++c) {
                  dqi[c] += scale * ds[j] * kj[c];
                  dkj[c] += scale * ds[j] * qi[c];
                  dvj[c] += p[j] * doi[c];
                }
              }
            }
        }
      },
      1);
}

}  // namespace kforge::om
