// The LayerNorm forward kernel (launched by layernorm.cu; tests/simt/ runs it on the CPU), with
// or without the residual add before it.
//
// Forward: one warp per row (each lane owns the row's packs lane, lane + 32, ...), two passes
// like the CPU twin (the mean, then the variance around it), then the output. The first pass
// loads kForwardUnroll packs per lane before it uses any (GPT-2's bf16 row, 768 channels, is 3
// packs a lane: the whole row in flight at once); the second pass and the output find the row in
// L1 (8 rows a block, 1.5 KB each in bf16). Bytes: the row read once and written once,
// 2 * N * C * sizeof(F), plus weight and bias (cache hits after the first rows) and the 8 bytes
// of statistics a row.
#pragma once

#include <cstddef>
#include <initializer_list>

#include "kernels/core/dtype.cuh"

namespace scalelab::cuda::layernorm_kernels {

constexpr int kRowsPerBlock = 8;  // warps per block (256 threads)

constexpr int kForwardUnroll = 4;  // forward: packs a lane loads in its first pass before it uses them

// Forward of row blockIdx.x * kRowsPerBlock + warp. P channels per access (C % P == 0, rows and
// pointers P * sizeof(F)-byte aligned). With kResidual the row is first made, not read: x = res_a + res_b
// rounded to F, as residual_forward rounds it, written to `residual` (which is then `inp`: the
// later passes read it back, each lane its own packs) and normalised from those rounded values,
// so the outputs are those of residual_forward then layernorm_forward, bit for bit, with one read
// of the residual stream less (stage 08's fused residual + LayerNorm).
template <typename F, int P, bool kResidual>
__global__ void layernorm_forward_kernel(F* out, float* mean, float* rstd, const F* inp, F* residual, const F* res_a,
                                         const F* res_b, const F* weight, const F* bias, int N, int C) {
  using V = Pack<F, P>;
  const int lane = threadIdx.x % 32;
  const int row = blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
  if (row >= N) return;  // the whole warp leaves together: the shuffles below stay full-warp
  const int packs = C / P;
  const std::size_t off = static_cast<std::size_t>(row) * C;
  const V* x = reinterpret_cast<const V*>(inp + off);

  // Pass 1: the mean, the row's one read from memory (of a and b with kResidual, the sum stored).
  float sum = 0.0f;
  for (int q0 = lane; q0 < packs; q0 += 32 * kForwardUnroll) {
    V xv[kForwardUnroll];
    if constexpr (kResidual) {
      const V* av = reinterpret_cast<const V*>(res_a + off);
      const V* bv = reinterpret_cast<const V*>(res_b + off);
      V ap[kForwardUnroll], bp[kForwardUnroll];
#pragma unroll
      for (int u = 0; u < kForwardUnroll; ++u)
        if (q0 + 32 * u < packs) {
          ap[u] = av[q0 + 32 * u];
          bp[u] = bv[q0 + 32 * u];
        }
#pragma unroll
      for (int u = 0; u < kForwardUnroll; ++u) {
        if (q0 + 32 * u >= packs) break;
#pragma unroll
        for (int k = 0; k < P; ++k) xv[u].v[k] = from_float<F>(to_float(ap[u].v[k]) + to_float(bp[u].v[k]));
        reinterpret_cast<V*>(residual + off)[q0 + 32 * u] = xv[u];
      }
    } else {
#pragma unroll
      for (int u = 0; u < kForwardUnroll; ++u)
        if (q0 + 32 * u < packs) xv[u] = x[q0 + 32 * u];
    }
#pragma unroll
    for (int u = 0; u < kForwardUnroll; ++u) {
      if (q0 + 32 * u >= packs) break;
#pragma unroll
      for (int k = 0; k < P; ++k) sum += to_float(xv[u].v[k]);
    }
  }
  const float m = warp_sum(sum) / C;

  // Pass 2: the variance around the mean (an L1 hit).
  float sq = 0.0f;
  for (int q = lane; q < packs; q += 32) {
    const V xv = x[q];
#pragma unroll
    for (int k = 0; k < P; ++k) {
      const float d = to_float(xv.v[k]) - m;
      sq += d * d;
    }
  }
  const float v = warp_sum(sq) / C;
  const float s = 1.0f / sqrtf(v + 1e-5f);

  // The output: x again (L1), weight and bias (shared by all rows: cache hits).
  const V* w = reinterpret_cast<const V*>(weight);
  const V* b = reinterpret_cast<const V*>(bias);
  V* o = reinterpret_cast<V*>(out + static_cast<std::size_t>(row) * C);
  for (int q = lane; q < packs; q += 32) {
    const V xv = x[q], wv = w[q], bv = b[q];
    V ov;
#pragma unroll
    for (int k = 0; k < P; ++k)
      ov.v[k] = from_float<F>((to_float(xv.v[k]) - m) * s * to_float(wv.v[k]) + to_float(bv.v[k]));
    o[q] = ov;
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// Blocks of kRowsPerBlock warps (one row each) for N rows.
inline unsigned layernorm_forward_blocks(int N) {
  return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}

// Whether every row of C values of F at each of `pointers` starts on a 16-byte boundary: then
// the kernels use 16-byte accesses (P = 16 / sizeof(F) channels), else scalar ones (P = 1).
template <typename F>
bool rows_on_16_bytes(int C, std::initializer_list<const void*> pointers) {
  if (C % Pack16<F>::kSize != 0) return false;
  for (const void* p : pointers)
    if (!aligned16(p)) return false;
  return true;
}

}  // namespace scalelab::cuda::layernorm_kernels
