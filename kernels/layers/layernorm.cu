// LayerNorm kernels. Both are bound by memory, and move 16 bytes per access (P = 16 / sizeof(F)
// consecutive channels: 4 fp32 or 8 bf16/fp16) where C and the pointers allow it. The forward
// kernel is in layernorm_forward_kernel.cuh (tests/simt/ runs it on the CPU too).
//
// Backward is bound by memory: per row it reads dout, inp and dinp and writes dinp. It is one
// kernel that reads each of them once, 16 bytes per access (P consecutive channels), plus a
// small kernel that totals the parameter gradients:
//  - one warp per row computes dinp (which needs two row sums) and adds the row's dweight and
//    dbias terms into its own running sums in shared memory (no atomics: one warp, one copy);
//  - at the end a block adds its warps' sums in warp order, and the kClusterBlocks blocks of a
//    thread block cluster (Hopper: blocks that can read each other's shared memory) add theirs
//    in rank order into one of the kLayerNormParamChunks slots of the scratch;
//  - the total kernel adds the slots in order. Every sum has a fixed order for a given N.
// The clusters are what let the kernel fill the GPU: the scratch has only kLayerNormParamChunks
// slots, and as many blocks alone would leave half of the SMs idle.
#include <cooperative_groups.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/layernorm_forward_kernel.cuh"

namespace scalelab::cuda {

namespace {

using namespace layernorm_kernels;

constexpr int kClusterBlocks = 4;  // blocks per cluster: one parameter-gradient slot per cluster
constexpr int kBackwardWarps = 8;  // warps per block of the backward kernel (fewer for very large C)
// Packs a lane loads before it uses them, so that several loads are in flight: 4 in pass 1; 1
// in pass 2, which holds four tensors' packs (more spills registers to local memory in bf16).
// Pass 1 asks L2 to fetch the row of dinp ahead, so pass 2 does not wait on memory for it.
constexpr int kUnroll = 4;
constexpr int kUnroll2 = 1;
// Shared memory the backward kernel may take per block, (warps, 2, C) floats: 8 warps up to
// C = 1536; beyond, fewer warps. Above 48 KB a kernel must ask for it (cudaFuncSetAttribute).
constexpr int kBackwardSmemBudget = 96 * 1024;
constexpr int kMaxSmemPerBlock = 227 * 1024;  // sm_90's largest opt-in shared memory per block

// Backward of rows [first, last) of this block, first = blockIdx.x * block_rows:
//   dinp[i,c] += rstd * (dnorm - mean_c(dnorm) - xhat * mean_c(dnorm * xhat)), dnorm = dout * weight,
//   dweight[c] = sum_i xhat[i,c] * dout[i,c], dbias[c] = sum_i dout[i,c] (this cluster's rows:
//   written to slot blockIdx.x / kClusterBlocks of partial_w and partial_b, C values each).
// P channels per access (C % P == 0, rows and pointers P * sizeof(F)-byte aligned).
template <typename F, int P>
__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kBackwardWarps * 32, 2)
    layernorm_backward_kernel(F* dinp, float* partial_w, float* partial_b, const F* dout, const F* inp, const F* weight,
                              const float* mean, const float* rstd, int N, int C, int block_rows) {
  using V = Pack<F, P>;
  // (warps, 2, P, C / P): each warp's running sums of dweight, then of dbias. Channel q * P + k
  // (pack q, element k) is kept at k * (C / P) + q, so that the 32 lanes, which hold consecutive
  // packs, touch consecutive words (no shared-memory bank conflicts).
  extern __shared__ float acc[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int packs = C / P;  // per row; lane owns packs lane, lane + 32, ...
  float* acc_w = acc + static_cast<std::size_t>(warp) * 2 * C;
  float* acc_b = acc_w + C;
  for (int c = lane; c < 2 * C; c += 32) acc_w[c] = 0.0f;  // only this warp uses them until the end
  __syncwarp();

  const V* w = reinterpret_cast<const V*>(weight);
  const int first = blockIdx.x * block_rows, last = min(N, first + block_rows);
  for (int row = first + warp; row < last; row += warps) {
    const std::size_t off = static_cast<std::size_t>(row) * C;
    const V* d = reinterpret_cast<const V*>(dout + off);
    const V* x = reinterpret_cast<const V*>(inp + off);
    V* dx = reinterpret_cast<V*>(dinp + off);
    const float m = mean[row], s = rstd[row];

    // Pass 1: the two row sums. The loads of kUnroll packs go out before any is used.
    float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
    for (int q0 = lane; q0 < packs; q0 += 32 * kUnroll) {
      V xv[kUnroll], dv[kUnroll], wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int q = q0 + 32 * u;
        if (q < packs) {
          xv[u] = x[q];
          dv[u] = d[q];
          wv[u] = w[q];
          asm volatile("prefetch.global.L2 [%0];" : : "l"(dx + q));  // a hint: loads nothing into registers
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (q0 + 32 * u >= packs) break;
#pragma unroll
        for (int k = 0; k < P; ++k) {
          const float xhat = (to_float(xv[u].v[k]) - m) * s;
          const float dnorm = to_float(dv[u].v[k]) * to_float(wv[u].v[k]);
          dnorm_sum += dnorm;
          dnorm_xhat_sum += dnorm * xhat;
        }
      }
    }
    const float dnorm_mean = warp_sum(dnorm_sum) / C;
    const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / C;

    // Pass 2: dinp, and this row's terms of dweight and dbias. inp, dout and weight were just
    // read (cache hits); dinp was prefetched into L2 by pass 1.
    for (int q0 = lane; q0 < packs; q0 += 32 * kUnroll2) {
      V xv[kUnroll2], dv[kUnroll2], wv[kUnroll2], dxv[kUnroll2];
#pragma unroll
      for (int u = 0; u < kUnroll2; ++u) {
        const int q = q0 + 32 * u;
        if (q < packs) {
          xv[u] = x[q];
          dv[u] = d[q];
          wv[u] = w[q];
          dxv[u] = dx[q];
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll2; ++u) {
        const int q = q0 + 32 * u;
        if (q >= packs) break;
#pragma unroll
        for (int k = 0; k < P; ++k) {
          const float dout_k = to_float(dv[u].v[k]);
          const float xhat = (to_float(xv[u].v[k]) - m) * s;
          const float dnorm = dout_k * to_float(wv[u].v[k]);
          dxv[u].v[k] = from_float<F>(to_float(dxv[u].v[k]) + s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean));
          acc_w[k * packs + q] += xhat * dout_k;
          acc_b[k * packs + q] += dout_k;
        }
        dx[q] = dxv[u];
      }
    }
  }

  // The block's sums: the warps' in warp order, into warp 0's place (each thread reads and
  // writes only its own columns c).
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
    float t = acc[c];
    for (int k = 1; k < warps; ++k) t += acc[static_cast<std::size_t>(k) * 2 * C + c];
    acc[c] = t;
  }
  // The cluster's sums: rank 0 adds the other blocks' (read from their shared memory) in rank
  // order and writes the slot.
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();  // every block of the cluster has its sums in place
  if (cluster.block_rank() == 0) {
    const std::size_t slot = blockIdx.x / kClusterBlocks;
    for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
      float t = acc[c];
      for (unsigned r = 1; r < kClusterBlocks; ++r) t += cluster.map_shared_rank(acc, r)[c];
      const int i = c % C, channel = (i % packs) * P + i / packs;  // undo the layout above
      if (c < C)
        partial_w[slot * C + channel] = t;
      else
        partial_b[slot * C + channel] = t;
    }
  }
  cluster.sync();  // a block's shared memory must outlive the reads of the others
}

// dweight[c] += the slots' partial sums, added in slot order. A block is 32 channels by 8
// stripes: stripe y adds slots y, y + 8, ... (independent loads, all in flight), then stripe 0
// adds the 8 stripe sums in order.
template <typename F>
__global__ void layernorm_backward_params_total_kernel(F* dweight, F* dbias, const float* partial_w,
                                                       const float* partial_b, int C, int slots) {
  __shared__ float sw[8][32], sb[8][32];
  const int c = blockIdx.x * 32 + threadIdx.x;
  float tw = 0.0f, tb = 0.0f;
  if (c < C) {
    for (int k = threadIdx.y; k < slots; k += 8) {
      tw += partial_w[static_cast<std::size_t>(k) * C + c];
      tb += partial_b[static_cast<std::size_t>(k) * C + c];
    }
  }
  sw[threadIdx.y][threadIdx.x] = tw;
  sb[threadIdx.y][threadIdx.x] = tb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    tw = 0.0f;
    tb = 0.0f;
    for (int y = 0; y < 8; ++y) {
      tw += sw[y][threadIdx.x];
      tb += sb[y][threadIdx.x];
    }
    dweight[c] = from_float<F>(to_float(dweight[c]) + tw);
    dbias[c] = from_float<F>(to_float(dbias[c]) + tb);
  }
}

// Launches the backward kernel with P channels per access.
template <typename F, int P>
void launch_layernorm_backward(F* dinp, float* partial_w, float* partial_b, const F* dout, const F* inp,
                               const F* weight, const float* mean, const float* rstd, int N, int C, int blocks,
                               int block_rows, cudaStream_t stream) {
  const std::size_t warp_bytes = 2 * static_cast<std::size_t>(C) * sizeof(float);
  const int warps = static_cast<int>(
      std::clamp<std::size_t>(kBackwardSmemBudget / warp_bytes, 1, std::size_t{kBackwardWarps}));
  const std::size_t smem = warps * warp_bytes;
  SCALELAB_CHECK(smem <= kMaxSmemPerBlock, "layernorm_backward: C = ", C, " needs ", smem,
                 " bytes of shared memory, more than a block has");
  if (smem > 48 * 1024)
    SCALELAB_CUDA_CHECK(cudaFuncSetAttribute(layernorm_backward_kernel<F, P>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  layernorm_backward_kernel<F, P><<<blocks, warps * 32, smem, stream>>>(dinp, partial_w, partial_b, dout, inp, weight,
                                                                        mean, rstd, N, C, block_rows);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

// The forward kernel over N rows, with 16-byte accesses where every tensor's rows allow them.
template <typename F, bool kResidual>
void launch_layernorm_forward(F* out, float* mean, float* rstd, const F* inp, F* residual, const F* a, const F* b,
                              const F* weight, const F* bias, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = layernorm_forward_blocks(N);
  if (rows_on_16_bytes<F>(C, {out, inp, residual, a, b, weight, bias}))
    layernorm_forward_kernel<F, Pack16<F>::kSize, kResidual>
        <<<blocks, kRowsPerBlock * 32, 0, stream>>>(out, mean, rstd, inp, residual, a, b, weight, bias, N, C);
  else
    layernorm_forward_kernel<F, 1, kResidual>
        <<<blocks, kRowsPerBlock * 32, 0, stream>>>(out, mean, rstd, inp, residual, a, b, weight, bias, N, C);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

}  // namespace

template <typename F>
void layernorm_forward(F* out, float* mean, float* rstd, const F* inp, const F* weight, const F* bias, int N, int C,
                       cudaStream_t stream) {
  launch_layernorm_forward<F, false>(out, mean, rstd, inp, nullptr, nullptr, nullptr, weight, bias, N, C, stream);
}

template <typename F>
void residual_layernorm_forward(F* residual, F* out, float* mean, float* rstd, const F* a, const F* b, const F* weight,
                                const F* bias, int N, int C, cudaStream_t stream) {
  launch_layernorm_forward<F, true>(out, mean, rstd, residual, residual, a, b, weight, bias, N, C, stream);
}

template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, float* scratch, const F* dout, const F* inp, const F* weight,
                        const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  // Rows are cut into at most kLayerNormParamChunks * kClusterBlocks blocks of block_rows rows
  // each, the blocks grouped kClusterBlocks to a cluster and a slot (the last blocks may have no
  // rows: they add zeros).
  constexpr int kMaxBlocks = kLayerNormParamChunks * kClusterBlocks;
  const int block_rows = (N + kMaxBlocks - 1) / kMaxBlocks;
  const int slots = ((N + block_rows - 1) / block_rows + kClusterBlocks - 1) / kClusterBlocks;
  const int blocks = slots * kClusterBlocks;
  float* partial_w = scratch;
  float* partial_b = scratch + static_cast<std::size_t>(kLayerNormParamChunks) * C;
  if (rows_on_16_bytes<F>(C, {dinp, dout, inp, weight}))
    launch_layernorm_backward<F, Pack16<F>::kSize>(dinp, partial_w, partial_b, dout, inp, weight, mean, rstd, N, C,
                                                   blocks, block_rows, stream);
  else
    launch_layernorm_backward<F, 1>(dinp, partial_w, partial_b, dout, inp, weight, mean, rstd, N, C, blocks, block_rows,
                                    stream);
  layernorm_backward_params_total_kernel<<<(C + 31) / 32, dim3(32, 8), 0, stream>>>(dweight, dbias, partial_w,
                                                                                    partial_b, C, slots);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                                                                     \
  template void layernorm_forward<F>(F*, float*, float*, const F*, const F*, const F*, int, int, cudaStream_t);     \
  template void residual_layernorm_forward<F>(F*, F*, float*, float*, const F*, const F*, const F*, const F*, int,  \
                                              int, cudaStream_t);                                                   \
  template void layernorm_backward<F>(F*, F*, F*, float*, const F*, const F*, const F*, const float*, const float*, \
                                      int, int, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
