// Chunked attention: one query at a time, its keys in chunks, with the online softmax. The memory
// beyond the inputs and outputs is one chunk of scores, whatever T is (the naive version keeps
// B*NH*T*T probabilities). Plain loops, not BLAS: the point here is the recurrence; the tiled,
// BLAS-backed version of the same idea is attention_flash.cpp.
#include "model/layers/attention_chunked.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/fastmath.hpp"
#include "core/reduce.hpp"
#include "model/layers/attention_head.hpp"

namespace scalelab {

std::size_t attention_chunked_scratch_elems(int chunk) { return static_cast<std::size_t>(chunk); }

template <typename F>
void attention_chunked_forward(F* out, F* lse, F* scratch, const F* qkv, int B, int T, int C, int NH, int chunk) {
  // LAB 08 BEGIN attention_chunked_forward: section 2
  const int hs = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  F* s = scratch;  // (chunk) scores, then unnormalised probabilities, of one query against one chunk
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const AttentionHead at = attention_head(b, h, T, C, NH);
      const F* q = qkv + at.qkv;
      const F* k = q + C;
      const F* v = q + 2 * C;
      F* o = out + at.out;
      F* lse_bh = lse + at.lse;
      for (int t = 0; t < T; ++t) {
        const F* qt = q + static_cast<std::size_t>(t) * C3;
        F* acc = o + static_cast<std::size_t>(t) * C;  // (hs) the output row, used as the accumulator
        // After the keys [0, u1) seen so far: m = max_u s_u, l = sum_u exp(s_u - m),
        // acc = sum_u exp(s_u - m) v_u. Subtracting the running maximum keeps every exp <= 1, so
        // nothing overflows however large the scores are.
        F m = F(0), l = F(0);
        for (int i = 0; i < hs; ++i) acc[i] = F(0);
        for (int u0 = 0; u0 <= t; u0 += chunk) {  // causal: query t sees keys 0..t
          const int n = std::min(chunk, t + 1 - u0);
          const F* ku = k + static_cast<std::size_t>(u0) * C3;
          const F* vu = v + static_cast<std::size_t>(u0) * C3;
          for (int j = 0; j < n; ++j) s[j] = scale * reduce_dot(qt, ku + static_cast<std::size_t>(j) * C3, hs);
          const F chunk_max = reduce_max(s, n);
          const F m_new = u0 == 0 ? chunk_max : std::max(m, chunk_max);
          // Every term of l and acc so far carries the factor exp(-m). Multiplying by
          // exp(m - m_new) turns each exp(s_u - m) into exp(s_u - m_new) exactly (in real
          // arithmetic), so old and new terms share one reference point and can be added.
          // Before the first chunk l and acc are zero and there is nothing to rescale.
          const F alpha = u0 == 0 ? F(0) : fast_exp(m - m_new);
          for (int j = 0; j < n; ++j) s[j] = fast_exp(s[j] - m_new);
          l = l * alpha + reduce_sum(s, n);
          for (int i = 0; i < hs; ++i) acc[i] *= alpha;
          for (int j = 0; j < n; ++j) {
            const F* vj = vu + static_cast<std::size_t>(j) * C3;
            for (int i = 0; i < hs; ++i) acc[i] += s[j] * vj[i];
          }
          m = m_new;
        }
        // out_t = sum_u softmax(s)_u v_u = acc / l; and log sum_u exp(s_u) = m + log(l).
        const F inv = F(1) / l;
        for (int i = 0; i < hs; ++i) acc[i] *= inv;
        lse_bh[t] = m + std::log(l);
      }
    }
  // LAB 08 END
}

template <typename F>
void attention_chunked_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* out, const F* lse, int B,
                                int T, int C, int NH, int chunk) {
  const int hs = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  F* p = scratch;  // (chunk) probabilities of one query against one chunk of keys, then their ds
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const AttentionHead at = attention_head(b, h, T, C, NH);
      const F* q = qkv + at.qkv;
      const F* k = q + C;
      const F* v = q + 2 * C;
      F* dq = dqkv + at.qkv;
      F* dk = dq + C;
      F* dv = dq + 2 * C;
      const F* d = dout + at.out;
      const F* o = out + at.out;
      const F* lse_bh = lse + at.lse;
      // dqkv is written (=): clear this head's columns, then every query adds its share.
      clear_head_dqkv(dq, T, C, hs);
      for (int t = 0; t < T; ++t) {
        const F* qt = q + static_cast<std::size_t>(t) * C3;
        const F* dt = d + static_cast<std::size_t>(t) * C;
        F* dqt = dq + static_cast<std::size_t>(t) * C3;
        // The softmax backward needs sum_u p_u dp_u with dp_u = dout_t . v_u. Since
        // out_t = sum_u p_u v_u, that sum is dout_t . out_t: one dot product instead of a pass
        // over all keys, and the reason backward takes out as an input.
        const F D = reduce_dot(dt, o + static_cast<std::size_t>(t) * C, hs);
        for (int u0 = 0; u0 <= t; u0 += chunk) {
          const int n = std::min(chunk, t + 1 - u0);
          // p = exp(s - lse) = exp(s) / sum exp(s): the forward's probabilities, recomputed from
          // the one number per query that forward saved.
          for (int j = 0; j < n; ++j) {
            const F* kj = k + static_cast<std::size_t>(u0 + j) * C3;
            p[j] = fast_exp(scale * reduce_dot(qt, kj, hs) - lse_bh[t]);
          }
          // dv_u += p_u dout_t
          for (int j = 0; j < n; ++j) {
            F* dvj = dv + static_cast<std::size_t>(u0 + j) * C3;
            for (int i = 0; i < hs; ++i) dvj[i] += p[j] * dt[i];
          }
          // ds_u = p_u (dp_u - D), in place of p
          for (int j = 0; j < n; ++j) {
            const F* vj = v + static_cast<std::size_t>(u0 + j) * C3;
            p[j] *= reduce_dot(dt, vj, hs) - D;
          }
          // s_u = scale q_t . k_u:  dq_t += scale ds_u k_u,  dk_u += scale ds_u q_t
          for (int j = 0; j < n; ++j) {
            const F* kj = k + static_cast<std::size_t>(u0 + j) * C3;
            F* dkj = dk + static_cast<std::size_t>(u0 + j) * C3;
            const F g = scale * p[j];
            for (int i = 0; i < hs; ++i) {
              dqt[i] += g * kj[i];
              dkj[i] += g * qt[i];
            }
          }
        }
      }
    }
}

template void attention_chunked_forward<float>(float*, float*, float*, const float*, int, int, int, int, int);
template void attention_chunked_forward<double>(double*, double*, double*, const double*, int, int, int, int, int);
template void attention_chunked_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                                int, int, int, int, int);
template void attention_chunked_backward<double>(double*, double*, const double*, const double*, const double*,
                                                 const double*, int, int, int, int, int);

}  // namespace scalelab
