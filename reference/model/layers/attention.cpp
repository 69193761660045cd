// Attention through BLAS: each (batch, head) pair is two T x T x hs matrix products forward and
// four backward, with a masked softmax between them. The strided views (leading dimension 3C)
// pick q, k and v of one head out of qkv without copying.
#include "model/layers/attention.hpp"

#include <cmath>
#include <cstddef>

#include "core/blas.hpp"

namespace scalelab {

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
      // a (T,T) = scale * q (T,hs) @ k^T (hs,T)
      gemm<F>(false, true, T, T, hs, scale, q, C3, k, C3, F(0), a, T);
      for (int t = 0; t < T; ++t) {
        F* row = a + static_cast<std::size_t>(t) * T;
        F maxv = row[0];
        for (int u = 1; u <= t; ++u) maxv = row[u] > maxv ? row[u] : maxv;
        F sum = 0;
        for (int u = 0; u <= t; ++u) {
          row[u] = std::exp(row[u] - maxv);
          sum += row[u];
        }
        const F inv = F(1) / sum;
        for (int u = 0; u <= t; ++u) row[u] *= inv;
        for (int u = t + 1; u < T; ++u) row[u] = F(0);  // the causal mask
      }
      // out (T,hs) = a (T,T) @ v (T,hs), written into columns h*hs.. of out (B,T,C)
      F* o = out + static_cast<std::size_t>(b) * T * C + h * hs;
      gemm<F>(false, false, T, hs, T, F(1), a, T, v, C3, F(0), o, C);
    }
}

template <typename F>
void attention_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* att, int B, int T, int C,
                        int NH) {
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
      // da (T,T) = dout (T,hs) @ v^T ;  dv (T,hs) = a^T (T,T) @ dout (T,hs)
      gemm<F>(false, true, T, T, hs, F(1), d, C, v, C3, F(0), da, T);
      gemm<F>(true, false, T, hs, T, F(1), a, T, d, C, F(0), dv, C3);
      // softmax backward, in place: ds = a * (da - sum_u a*da); zero above the diagonal
      for (int t = 0; t < T; ++t) {
        const F* arow = a + static_cast<std::size_t>(t) * T;
        F* row = da + static_cast<std::size_t>(t) * T;
        F dot = 0;
        for (int u = 0; u <= t; ++u) dot += arow[u] * row[u];
        for (int u = 0; u <= t; ++u) row[u] = arow[u] * (row[u] - dot);
        for (int u = t + 1; u < T; ++u) row[u] = F(0);
      }
      // dq = scale * ds @ k ;  dk = scale * ds^T @ q
      gemm<F>(false, false, T, hs, T, scale, da, T, k, C3, F(0), dq, C3);
      gemm<F>(true, false, T, hs, T, scale, da, T, q, C3, F(0), dk, C3);
    }
  // LAB 00 END
}

template void attention_forward<float>(float*, float*, const float*, int, int, int, int);
template void attention_forward<double>(double*, double*, const double*, int, int, int, int);
template void attention_backward<float>(float*, float*, const float*, const float*, const float*, int, int, int, int);
template void attention_backward<double>(double*, double*, const double*, const double*, const double*, int, int, int,
                                         int);

}  // namespace scalelab
