// Attention through BLAS: each (batch, head) pair is two T x T x hs matrix products forward and
// four backward, with a masked softmax between them. The strided views (leading dimension 3C)
// pick q, k and v of one head out of qkv without copying.
#include "model/layers/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "core/blas.hpp"
#include "core/fastmath.hpp"
#include "core/reduce.hpp"

namespace scalelab {

namespace {
constexpr int kQueryBlock = 64;  // queries (and keys) per causal block (see attention_forward)
}

template <typename F>
void attention_forward(F* out, F* att, const F* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const F* q = qkv + static_cast<std::size_t>(b) * T * C3 + h * hs;
      const F* k = q + C;
      const F* v = q + 2 * C;
      F* a = att + (static_cast<std::size_t>(b) * NH + h) * T * T;
      F* o = out + static_cast<std::size_t>(b) * T * C + h * hs;
      // The causal mask makes the scores above the diagonal dead work: queries [t0, t1) see
      // only keys [0, t1). Taking the queries in blocks of kQueryBlock rows skips most of them
      // (the products shrink to about 5/8 of T x T for T = 4 blocks).
      // a[t0:t1, 0:t1] (rows of a (T,T)) = scale * q[t0:t1] (t1-t0,hs) @ k[0:t1]^T (hs,t1)
      for (int t0 = 0; t0 < T; t0 += kQueryBlock) {
        const int t1 = std::min(T, t0 + kQueryBlock);
        gemm<F>(false, true, t1 - t0, t1, hs, scale, q + static_cast<std::size_t>(t0) * C3, C3, k, C3, F(0),
                a + static_cast<std::size_t>(t0) * T, T);
      }
      for (int t = 0; t < T; ++t) {
        F* row = a + static_cast<std::size_t>(t) * T;
        // softmax over keys 0..t (reduce_max/reduce_sum: core/reduce.hpp)
        const F maxv = reduce_max(row, t + 1);
        for (int u = 0; u <= t; ++u) row[u] = fast_exp(row[u] - maxv);
        const F inv = F(1) / reduce_sum(row, t + 1);
        for (int u = 0; u <= t; ++u) row[u] *= inv;
        for (int u = t + 1; u < T; ++u) row[u] = F(0);  // the causal mask
      }
      // out[t0:t1] (t1-t0,hs) = a[t0:t1, 0:t1] @ v[0:t1] (t1,hs), into columns h*hs.. of out (B,T,C)
      for (int t0 = 0; t0 < T; t0 += kQueryBlock) {
        const int t1 = std::min(T, t0 + kQueryBlock);
        gemm<F>(false, false, t1 - t0, hs, t1, F(1), a + static_cast<std::size_t>(t0) * T, T, v, C3, F(0),
                o + static_cast<std::size_t>(t0) * C, C);
      }
    }
}

template <typename F>
void attention_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* att, int B, int T, int C, int NH) {
  // LAB 00 BEGIN attention_backward: section 3.6
  const int hs = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h) {
      const std::size_t qoff = static_cast<std::size_t>(b) * T * C3 + h * hs;
      const F* q = qkv + qoff;
      const F* k = q + C;
      const F* v = q + 2 * C;
      F* dq = dqkv + qoff;
      F* dk = dq + C;
      F* dv = dq + 2 * C;
      const F* a = att + (static_cast<std::size_t>(b) * NH + h) * T * T;
      const F* d = dout + static_cast<std::size_t>(b) * T * C + h * hs;
      F* da = scratch;
      // Only the blocks on or below the diagonal can be non-zero (see attention_forward): query
      // block [t0, t1) involves keys [0, t1), key block [u0, u1) gets gradient from queries [u0, T).
      // da[t0:t1, 0:t1] = dout[t0:t1] (t1-t0,hs) @ v[0:t1]^T (hs,t1)
      for (int t0 = 0; t0 < T; t0 += kQueryBlock) {
        const int t1 = std::min(T, t0 + kQueryBlock);
        gemm<F>(false, true, t1 - t0, t1, hs, F(1), d + static_cast<std::size_t>(t0) * C, C, v, C3, F(0),
                da + static_cast<std::size_t>(t0) * T, T);
      }
      // softmax backward, in place: ds = a * (da - sum_u a*da); zero above the diagonal
      for (int t = 0; t < T; ++t) {
        const F* arow = a + static_cast<std::size_t>(t) * T;
        F* row = da + static_cast<std::size_t>(t) * T;
        const F dot = reduce_dot(arow, row, t + 1);  // sum over u <= t of a * da
        for (int u = 0; u <= t; ++u) row[u] = arow[u] * (row[u] - dot);
        for (int u = t + 1; u < T; ++u) row[u] = F(0);
      }
      // dq[t0:t1] (t1-t0,hs) = scale * ds[t0:t1, 0:t1] @ k[0:t1] (t1,hs)
      for (int t0 = 0; t0 < T; t0 += kQueryBlock) {
        const int t1 = std::min(T, t0 + kQueryBlock);
        gemm<F>(false, false, t1 - t0, hs, t1, scale, da + static_cast<std::size_t>(t0) * T, T, k, C3, F(0),
                dq + static_cast<std::size_t>(t0) * C3, C3);
      }
      // dv[u0:u1] (u1-u0,hs) = a[u0:T, u0:u1]^T @ dout[u0:T] ;  dk[u0:u1] = scale * ds[u0:T, u0:u1]^T @ q[u0:T]
      for (int u0 = 0; u0 < T; u0 += kQueryBlock) {
        const int u1 = std::min(T, u0 + kQueryBlock);
        const std::size_t corner = static_cast<std::size_t>(u0) * T + u0;  // element [u0, u0] of a (T,T)
        gemm<F>(true, false, u1 - u0, hs, T - u0, F(1), a + corner, T, d + static_cast<std::size_t>(u0) * C, C, F(0),
                dv + static_cast<std::size_t>(u0) * C3, C3);
        gemm<F>(true, false, u1 - u0, hs, T - u0, scale, da + corner, T, q + static_cast<std::size_t>(u0) * C3, C3,
                F(0), dk + static_cast<std::size_t>(u0) * C3, C3);
      }
    }
  // LAB 00 END
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int, int);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*, int, int, int,
                                         int);

}  // namespace scalelab
