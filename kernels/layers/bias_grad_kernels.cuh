// The GPU bias gradient's kernels (launched by matmul.cu; tests/simt/ runs them on the CPU).
//
// The bias gradient, dbias[j] += sum_i dout[i,j], in two passes with a fixed order, so that it is
// the same bits on every run (no atomics) and spread over the whole GPU: a one-pass kernel can
// give a block only a strip of columns and every row of it, and at GPT-2's widths (768 to 3072
// columns) that left 24 to 96 blocks to read up to 50 MB, a third of the attention projection's
// backward on one H200.
//   pass 1  rows in G chunks; block (column strip, chunk) sums its chunk of 32 x kPack columns
//           into partials[chunk][column] (fp32): 32 lanes a row of packs (kPack values in one
//           16-byte load), 8 rows at a time, then the 8 row sums added in shared memory in order;
//   pass 2  dbias[j] += partials[0][j] + partials[1][j] + ... in chunk order.
// G depends only on N and OC (not on the device), so the order, and the result, is the same on
// every GPU. The partials live in the Blas workspace (cuBLAS's scratch: the products before and
// after run on the same stream, so nothing else uses it meanwhile).
#pragma once

#include <algorithm>
#include <cstddef>

#include "core/error.hpp"
#include "kernels/core/dtype.cuh"

namespace scalelab::cuda::bias_grad {

constexpr int kRowLanes = 8;
constexpr int kTargetBlocks = 528;  // about 4 blocks for each SM of an H100/H200

template <typename F, int kPack>
__global__ void __launch_bounds__(32 * kRowLanes)
    partials_kernel(float* partials, const F* dout, int N, int OC, int ld, int rows_per_chunk) {
  constexpr int kColumns = 32 * kPack;  // a block's strip
  __shared__ float sums[kRowLanes][kColumns];
  const int col0 = blockIdx.x * kColumns + threadIdx.x * kPack;
  const int row_end = min(N, (static_cast<int>(blockIdx.y) + 1) * rows_per_chunk);
  float acc[kPack] = {};
  if (col0 < OC) {
#pragma unroll 4
    for (int r = blockIdx.y * rows_per_chunk + threadIdx.y; r < row_end; r += kRowLanes) {
      const F* row = dout + static_cast<std::size_t>(r) * ld + col0;
      if constexpr (kPack > 1) {
        const Pack16<F> p = load_pack(row);
#pragma unroll
        for (int e = 0; e < kPack; ++e) acc[e] += to_float(p.v[e]);
      } else {
        acc[0] += to_float(row[0]);
      }
    }
  }
#pragma unroll
  for (int e = 0; e < kPack; ++e) sums[threadIdx.y][threadIdx.x * kPack + e] = acc[e];
  __syncthreads();
  for (int c = threadIdx.y * 32 + threadIdx.x; c < kColumns; c += 32 * kRowLanes) {
    float total = 0.0f;
    for (int y = 0; y < kRowLanes; ++y) total += sums[y][c];  // row lanes in order
    const int col = blockIdx.x * kColumns + c;
    if (col < OC) partials[static_cast<std::size_t>(blockIdx.y) * OC + col] = total;
  }
}

template <typename F>
__global__ void sum_kernel(F* dbias, const float* partials, int chunks, int OC) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= OC) return;
  float total = 0.0f;
  for (int g = 0; g < chunks; ++g) total += partials[static_cast<std::size_t>(g) * OC + j];  // chunks in order
  dbias[j] = from_float<F>(to_float(dbias[j]) + total);
}

// The launch of the two passes for dout (N, OC) with kPack columns a load, partial sums in a
// workspace of workspace_bytes: strips x chunks blocks of (32, kRowLanes) threads.
struct Launch {
  int strips, chunks, rows_per_chunk;
};
template <int kPack>
Launch launch_shape(int N, int OC, std::size_t workspace_bytes) {
  constexpr int kColumns = 32 * kPack;
  const int strips = (OC + kColumns - 1) / kColumns;
  // Enough chunks to fill the GPU, each at least 4 rows per row lane, no more than the workspace.
  const int max_chunks = static_cast<int>(workspace_bytes / (sizeof(float) * static_cast<std::size_t>(OC)));
  SCALELAB_CHECK(max_chunks >= 1, "matmul: a bias of ", OC, " columns has no room for its partial sums in the ",
                 workspace_bytes, "-byte cuBLAS workspace");
  const int chunks = std::max(1, std::min({(kTargetBlocks + strips - 1) / strips,
                                           (N + 4 * kRowLanes - 1) / (4 * kRowLanes), max_chunks}));
  return {strips, chunks, (N + chunks - 1) / chunks};
}

}  // namespace scalelab::cuda::bias_grad
