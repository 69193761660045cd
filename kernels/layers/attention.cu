// Attention: per batch row b, strided-batched products over the NH heads, with the causal
// softmax (forward) and its backward as one-warp-per-row kernels in between. The calls follow
// the CPU twin line by line; only the loop over heads moved into cuBLAS's batch.
#include <cmath>

#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/attention.hpp"

namespace scalelab::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row of T scores

// In place on rows of (T,T) score matrices: row r is query position t = r % T.
// p[u] = exp(s[u] - max) / sum for u <= t, and 0 above the diagonal (the causal mask).
template <typename F>
__global__ void causal_softmax_kernel(F* att, long long rows, int T) {
  const int lane = threadIdx.x % 32;
  const long long r = static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int t = static_cast<int>(r % T);
  F* row = att + r * T;
  float maxv = -INFINITY;
  for (int u = lane; u <= t; u += 32) maxv = fmaxf(maxv, to_float(row[u]));
  maxv = warp_max(maxv);
  float sum = 0.0f;
  for (int u = lane; u <= t; u += 32) sum += expf(to_float(row[u]) - maxv);
  const float inv = 1.0f / warp_sum(sum);
  for (int u = lane; u < T; u += 32)
    row[u] = u <= t ? from_float<F>(expf(to_float(row[u]) - maxv) * inv) : from_float<F>(0.0f);
}

// In place on rows of (T,T) gradients da, with the saved probabilities a:
// ds[u] = a[u] * (da[u] - sum_v a[v] da[v]) for u <= t, and 0 above the diagonal.
template <typename F>
__global__ void causal_softmax_backward_kernel(F* da, const F* att, long long rows, int T) {
  const int lane = threadIdx.x % 32;
  const long long r = static_cast<long long>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int t = static_cast<int>(r % T);
  F* row = da + r * T;
  const F* arow = att + r * T;
  float dot = 0.0f;
  for (int u = lane; u <= t; u += 32) dot += to_float(arow[u]) * to_float(row[u]);
  dot = warp_sum(dot);
  for (int u = lane; u < T; u += 32)
    row[u] = u <= t ? from_float<F>(to_float(arow[u]) * (to_float(row[u]) - dot)) : from_float<F>(0.0f);
}

unsigned row_blocks(long long rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

template <typename F>
void attention_forward(F* out, F* att, const F* qkv, int B, int T, int C, int NH, const Blas& blas) {
  if (B <= 0 || T <= 0) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const long long TT = static_cast<long long>(T) * T;
  for (int b = 0; b < B; ++b) {
    const F* q = qkv + static_cast<std::size_t>(b) * T * C3;  // head h: + h*hs
    const F* k = q + C;
    F* a = att + static_cast<std::size_t>(b) * NH * TT;  // head h: + h*T*T
    // a_h (T,T) = scale * q_h (T,hs) @ k_h^T (hs,T)
    gemm_strided_batched<F>(blas, false, true, T, T, hs, scale, q, C3, hs, k, C3, hs, 0.0f, a, T, TT, NH);
  }
  const long long rows = static_cast<long long>(B) * NH * T;
  causal_softmax_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, blas.stream()>>>(att, rows, T);
  SCALELAB_CUDA_LAUNCH_CHECK();
  for (int b = 0; b < B; ++b) {
    const F* v = qkv + static_cast<std::size_t>(b) * T * C3 + 2 * C;
    const F* a = att + static_cast<std::size_t>(b) * NH * TT;
    F* o = out + static_cast<std::size_t>(b) * T * C;  // head h: columns h*hs.. of out (B,T,C)
    // out_h (T,hs) = a_h (T,T) @ v_h (T,hs)
    gemm_strided_batched<F>(blas, false, false, T, hs, T, 1.0f, a, T, TT, v, C3, hs, 0.0f, o, C, hs, NH);
  }
}

template <typename F>
void attention_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* att, int B, int T, int C, int NH,
                        const Blas& blas) {
  if (B <= 0 || T <= 0) return;
  const int hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  const long long TT = static_cast<long long>(T) * T;
  const long long rows = static_cast<long long>(NH) * T;  // softmax rows of one batch row
  for (int b = 0; b < B; ++b) {
    const std::size_t qoff = static_cast<std::size_t>(b) * T * C3;
    const F* q = qkv + qoff;
    const F* k = q + C;
    const F* v = q + 2 * C;
    F* dq = dqkv + qoff;
    F* dk = dq + C;
    F* dv = dq + 2 * C;
    const F* a = att + static_cast<std::size_t>(b) * NH * TT;
    const F* d = dout + static_cast<std::size_t>(b) * T * C;
    F* da = scratch;  // (NH,T,T)
    // da_h (T,T) = dout_h (T,hs) @ v_h^T ;  dv_h (T,hs) = a_h^T (T,T) @ dout_h (T,hs)
    gemm_strided_batched<F>(blas, false, true, T, T, hs, 1.0f, d, C, hs, v, C3, hs, 0.0f, da, T, TT, NH);
    gemm_strided_batched<F>(blas, true, false, T, hs, T, 1.0f, a, T, TT, d, C, hs, 0.0f, dv, C3, hs, NH);
    // softmax backward, in place: ds = a * (da - sum_u a*da); zero above the diagonal
    causal_softmax_backward_kernel<<<row_blocks(rows), kRowsPerBlock * 32, 0, blas.stream()>>>(da, a, rows, T);
    SCALELAB_CUDA_LAUNCH_CHECK();
    // dq_h = scale * ds_h @ k_h ;  dk_h = scale * ds_h^T @ q_h
    gemm_strided_batched<F>(blas, false, false, T, hs, T, scale, da, T, TT, k, C3, hs, 0.0f, dq, C3, hs, NH);
    gemm_strided_batched<F>(blas, true, false, T, hs, T, scale, da, T, TT, q, C3, hs, 0.0f, dk, C3, hs, NH);
  }
}

#define SCALELAB_INSTANTIATE(F)                                                          \
  template void attention_forward<F>(F*, F*, const F*, int, int, int, int, const Blas&); \
  template void attention_backward<F>(F*, F*, const F*, const F*, const F*, int, int, int, int, const Blas&);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
