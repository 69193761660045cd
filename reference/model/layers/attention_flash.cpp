// Flash attention on the CPU: the chunked online softmax (attention_chunked.cpp) done for a tile
// of Br queries at once, so that scores and outputs are matrix products through BLAS. The strided
// views (leading dimension 3C for qkv, C for out) pick one head out of the packed tensors without
// copying, as in attention.cpp. Workspace: a few Br x Bc tiles and one row of T, never T x T.
#include "model/layers/attention_flash.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/blas.hpp"
#include "core/fastmath.hpp"
#include "core/reduce.hpp"
#include "model/layers/attention_head.hpp"

namespace scalelab {

std::size_t attention_flash_scratch_elems(int T, int Br, int Bc) {
  const std::size_t tile = static_cast<std::size_t>(Br) * Bc;
  return std::max(tile + 2 * static_cast<std::size_t>(Br), 2 * tile + static_cast<std::size_t>(T));
}

template <typename F>
void attention_flash_forward(F* out, F* lse, F* scratch, const F* qkv, int B, int T, int C, int NH, int Br, int Bc) {
  const int hs = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  F* S = scratch;                                // (Br,Bc) scores, then probabilities, of one tile
  F* m = S + static_cast<std::size_t>(Br) * Bc;  // (Br) running maximum of each query row
  F* l = m + Br;                                 // (Br) running sum of exp(s - m) of each row
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const AttentionHead at = attention_head(b, h, T, C, NH);
      const F* q = qkv + at.qkv;
      const F* k = q + C;
      const F* v = q + 2 * C;
      F* o = out + at.out;
      F* lse_bh = lse + at.lse;
      for (int t0 = 0; t0 < T; t0 += Br) {
        const int t1 = std::min(T, t0 + Br), nr = t1 - t0;
        F* ot = o + static_cast<std::size_t>(t0) * C;  // (nr,hs) rows of out, the tile's accumulator
        for (int i = 0; i < nr; ++i)
          for (int c = 0; c < hs; ++c) ot[static_cast<std::size_t>(i) * C + c] = F(0);
        // Causal: queries [t0, t1) see keys [0, t1) only. Key tiles starting at or after t1 lie
        // wholly above the diagonal and are never computed; the last one is cut at t1.
        for (int u0 = 0; u0 < t1; u0 += Bc) {
          const int u1 = std::min(t1, u0 + Bc), nc = u1 - u0;
          // S[0:nr, 0:nc] (rows of S (Br,Bc)) = scale * q[t0:t1] (nr,hs) @ k[u0:u1]^T (hs,nc)
          gemm<F>(false, true, nr, nc, hs, scale, q + static_cast<std::size_t>(t0) * C3, C3,
                  k + static_cast<std::size_t>(u0) * C3, C3, F(0), S, Bc);
          for (int i = 0; i < nr; ++i) {
            F* row = S + static_cast<std::size_t>(i) * Bc;
            // Keys u0 .. t0+i are visible to query t0+i; in a tile on the diagonal the rest are
            // masked. With Br > Bc a row can see none of this tile: it contributes nothing.
            const int valid = std::min(nc, t0 + i + 1 - u0);
            if (valid <= 0) {
              for (int j = 0; j < nc; ++j) row[j] = F(0);
              continue;
            }
            // The online softmax of attention_chunked_forward, for row i: rescaling by
            // exp(m_old - m_new) moves the old terms of l and of the output row onto the new
            // maximum, so they add to this tile's terms exactly. Key tile 0 is every row's first
            // (key 0 is visible to all), where l and the output row are zero.
            const F row_max = reduce_max(row, valid);
            const F m_new = u0 == 0 ? row_max : std::max(m[i], row_max);
            const F alpha = u0 == 0 ? F(0) : fast_exp(m[i] - m_new);
            for (int j = 0; j < valid; ++j) row[j] = fast_exp(row[j] - m_new);
            for (int j = valid; j < nc; ++j) row[j] = F(0);  // the causal mask
            l[i] = (u0 == 0 ? F(0) : l[i] * alpha) + reduce_sum(row, valid);
            m[i] = m_new;
            F* orow = ot + static_cast<std::size_t>(i) * C;
            for (int c = 0; c < hs; ++c) orow[c] *= alpha;
          }
          // out[t0:t1] (nr,hs) += P[0:nr, 0:nc] @ v[u0:u1] (nc,hs)
          gemm<F>(false, false, nr, hs, nc, F(1), S, Bc, v + static_cast<std::size_t>(u0) * C3, C3, F(1), ot, C);
        }
        // Normalise once at the end: out = acc / l, and lse = log sum_u exp(s_u) = m + log(l).
        for (int i = 0; i < nr; ++i) {
          const F inv = F(1) / l[i];
          F* orow = ot + static_cast<std::size_t>(i) * C;
          for (int c = 0; c < hs; ++c) orow[c] *= inv;
          lse_bh[t0 + i] = m[i] + std::log(l[i]);
        }
      }
    }
}

template <typename F>
void attention_flash_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* out, const F* lse, int B,
                              int T, int C, int NH, int Br, int Bc) {
  // LAB 08 BEGIN attention_flash_backward: section 3
  const int hs = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  F* P = scratch;                                 // (Br,Bc) probabilities of one tile
  F* dS = P + static_cast<std::size_t>(Br) * Bc;  // (Br,Bc) dP = dout v^T of one tile, then dS
  F* D = dS + static_cast<std::size_t>(Br) * Bc;  // (T) D_t = dout_t . out_t of one head
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
      // dqkv is written (=): clear this head's columns; the tiles then accumulate into them.
      clear_head_dqkv(dq, T, C, hs);
      // The softmax backward's sum_u p_tu dp_tu, with dp_tu = dout_t . v_u, equals
      // dout_t . (sum_u p_tu v_u) = dout_t . out_t: computed once per query from out, where the
      // naive version sums a row of the T x T matrix.
      for (int t = 0; t < T; ++t)
        D[t] = reduce_dot(d + static_cast<std::size_t>(t) * C, o + static_cast<std::size_t>(t) * C, hs);
      // Key tiles outer, as FlashAttention-2 does (there each key tile is one thread block that
      // owns its dk, dv); the query tiles inner start at the one holding query u0, since queries
      // before u0 cannot see these keys.
      for (int u0 = 0; u0 < T; u0 += Bc) {
        const int u1 = std::min(T, u0 + Bc), nc = u1 - u0;
        const F* ku = k + static_cast<std::size_t>(u0) * C3;
        const F* vu = v + static_cast<std::size_t>(u0) * C3;
        for (int t0 = (u0 / Br) * Br; t0 < T; t0 += Br) {
          const int t1 = std::min(T, t0 + Br), nr = t1 - t0;
          const F* qt = q + static_cast<std::size_t>(t0) * C3;
          const F* dt = d + static_cast<std::size_t>(t0) * C;
          // P = exp(scale q k^T - lse): the forward's probabilities, recomputed; zero where masked.
          gemm<F>(false, true, nr, nc, hs, scale, qt, C3, ku, C3, F(0), P, Bc);
          for (int i = 0; i < nr; ++i) {
            F* row = P + static_cast<std::size_t>(i) * Bc;
            const int valid = std::clamp(t0 + i + 1 - u0, 0, nc);
            for (int j = 0; j < valid; ++j) row[j] = fast_exp(row[j] - lse_bh[t0 + i]);
            for (int j = valid; j < nc; ++j) row[j] = F(0);
          }
          // dv[u0:u1] (nc,hs) += P^T (nc,nr) @ dout[t0:t1] (nr,hs)
          gemm<F>(true, false, nc, hs, nr, F(1), P, Bc, dt, C, F(1), dv + static_cast<std::size_t>(u0) * C3, C3);
          // dP (nr,nc) = dout[t0:t1] (nr,hs) @ v[u0:u1]^T (hs,nc)
          gemm<F>(false, true, nr, nc, hs, F(1), dt, C, vu, C3, F(0), dS, Bc);
          // dS = P * (dP - D): the softmax backward; masked entries have P = 0, so dS = 0 there.
          for (int i = 0; i < nr; ++i) {
            const F* prow = P + static_cast<std::size_t>(i) * Bc;
            F* row = dS + static_cast<std::size_t>(i) * Bc;
            for (int j = 0; j < nc; ++j) row[j] = prow[j] * (row[j] - D[t0 + i]);
          }
          // dq[t0:t1] (nr,hs) += scale * dS (nr,nc) @ k[u0:u1] (nc,hs)
          gemm<F>(false, false, nr, hs, nc, scale, dS, Bc, ku, C3, F(1), dq + static_cast<std::size_t>(t0) * C3, C3);
          // dk[u0:u1] (nc,hs) += scale * dS^T (nc,nr) @ q[t0:t1] (nr,hs)
          gemm<F>(true, false, nc, hs, nr, scale, dS, Bc, qt, C3, F(1), dk + static_cast<std::size_t>(u0) * C3, C3);
        }
      }
    }
  // LAB 08 END
}

template void attention_flash_forward<float>(float*, float*, float*, const float*, int, int, int, int, int, int);
template void attention_flash_forward<double>(double*, double*, double*, const double*, int, int, int, int, int, int);
template void attention_flash_backward<float>(float*, float*, const float*, const float*, const float*, const float*,
                                              int, int, int, int, int, int);
template void attention_flash_backward<double>(double*, double*, const double*, const double*, const double*,
                                               const double*, int, int, int, int, int, int);

}  // namespace scalelab
