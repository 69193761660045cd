// The LayerNorm kernels (launched by layernorm.cu; tests/simt/ runs them on the CPU): the
// forward, with or without the residual add before it, and the backward. Both are bound by
// memory, and move 16 bytes per access (P = 16 / sizeof(F) consecutive channels: 4 fp32 or 8
// bf16/fp16) where C and the pointers allow it.
//
// Forward: one warp per row (each lane owns the row's packs lane, lane + 32, ...), two passes
// like the CPU twin (the mean, then the variance around it), then the output. The first pass
// loads kForwardUnroll packs per lane before it uses any (GPT-2's bf16 row, 768 channels, is 3
// packs a lane: the whole row in flight at once); the second pass and the output find the row in
// L1 (8 rows a block, 1.5 KB each in bf16). Bytes: the row read once and written once,
// 2 * N * C * sizeof(F), plus weight and bias (cache hits after the first rows) and the 8 bytes
// of statistics a row.
//
// Backward is bound by memory: per row it reads dout, inp and dinp and writes dinp. One kernel
// reads each of them once, 16 bytes per access (P consecutive channels), and a small kernel
// totals the parameter gradients:
//  - one warp per row computes dinp (which needs two row sums) and adds the row's dweight and
//    dbias terms into the warp's own running sums (no atomics: one warp, one copy);
//  - at the end a block adds its warps' sums in warp order, and the kClusterBlocks blocks of a
//    thread block cluster (Hopper: blocks that can read each other's shared memory) add theirs
//    in rank order into one of the kLayerNormParamChunks slots of the scratch;
//  - the total kernel adds the slots in order. Every sum has a fixed order for a given N.
// The clusters are what let the kernel fill the GPU: the scratch has only kLayerNormParamChunks
// slots, and as many blocks alone would leave half of the SMs idle.
// The row kernel comes in two forms with the same results, bit for bit. Where a row fits a warp's
// registers (C <= 768 in bf16, 512 in fp32), the resident kernel makes one trip to memory per
// row and keeps its running sums in registers. For any C, the streamed kernel reads the row twice
// (the second time from cache) and keeps its sums in shared memory. The earlier single kernel,
// today's streamed one, reached 28% of the copy bandwidth on one H200 (GPT-2's bf16 shape): its
// second pass waits on a cache trip for every pack and adds into shared memory for every channel.
#pragma once

#include <cooperative_groups.h>

#include <algorithm>
#include <cstddef>
#include <initializer_list>

#include "core/error.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/core/ptx.cuh"
#include "kernels/layers/layernorm.hpp"

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

constexpr int kClusterBlocks = 4;  // blocks per cluster: one parameter-gradient slot per cluster
constexpr int kBackwardWarps = 8;  // warps per block of the backward kernels (fewer for very large C)
// Shared memory the backward kernels may take per block, (warps, 2, C) floats: 8 warps up to
// C = 1536; beyond, fewer warps. Above 48 KB a kernel must ask for it (cudaFuncSetAttribute).
constexpr int kBackwardSmemBudget = 96 * 1024;
constexpr int kMaxSmemPerBlock = 227 * 1024;  // sm_90's largest opt-in shared memory per block

// Both backward kernels compute, for each row i of the block's rows:
//   dinp[i,c] += rstd * (dnorm - mean_c(dnorm) - xhat * mean_c(dnorm * xhat)), dnorm = dout * weight,
//   dweight[c] += xhat[i,c] * dout[i,c], dbias[c] += dout[i,c]
// with the same arithmetic in the same order, through the two helpers below: their outputs are
// equal bit for bit (the tests check it).

// g++, which compiles these kernels for the CPU emulation (tests/simt/), cannot see that the
// resident kernel reads a pack only where it loaded it (q < packs in both loops) and warns that
// it may be unset; nvcc does not. Zero-filling the packs instead costs the kernel a spill in bf16.
#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Row `row`'s packs of dout, inp and dinp, and its mean and rstd.
template <typename F, int P>
struct BackwardRow {
  const Pack<F, P>* d;
  const Pack<F, P>* x;
  Pack<F, P>* dx;
  float m, s;
};
template <int P, typename F>
__device__ __forceinline__ BackwardRow<F, P> backward_row(F* dinp, const F* dout, const F* inp, const float* mean,
                                                          const float* rstd, int row, int C) {
  const std::size_t off = static_cast<std::size_t>(row) * C;
  return {reinterpret_cast<const Pack<F, P>*>(dout + off), reinterpret_cast<const Pack<F, P>*>(inp + off),
          reinterpret_cast<Pack<F, P>*>(dinp + off), mean[row], rstd[row]};
}

// One pack's terms of the row's two sums.
template <typename F, int P>
__device__ __forceinline__ void add_row_sums(const Pack<F, P>& xv, const Pack<F, P>& dv, const Pack<F, P>& wv, float m,
                                             float s, float& dnorm_sum, float& dnorm_xhat_sum) {
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const float xhat = (to_float(xv.v[k]) - m) * s;
    const float dnorm = to_float(dv.v[k]) * to_float(wv.v[k]);
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * xhat;
  }
}

// One pack's dinp (added into dxv), and its terms of dweight and dbias, handed to
// add_params(k, dweight term, dbias term) for channel k of the pack.
template <typename F, int P, typename AddParams>
__device__ __forceinline__ void backward_pack(Pack<F, P>& dxv, const Pack<F, P>& xv, const Pack<F, P>& dv,
                                              const Pack<F, P>& wv, float m, float s, float dnorm_mean,
                                              float dnorm_xhat_mean, AddParams add_params) {
#pragma unroll
  for (int k = 0; k < P; ++k) {
    const float dout_k = to_float(dv.v[k]);
    const float xhat = (to_float(xv.v[k]) - m) * s;
    const float dnorm = dout_k * to_float(wv.v[k]);
    dxv.v[k] = from_float<F>(to_float(dxv.v[k]) + s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean));
    add_params(k, xhat * dout_k, dout_k);
  }
}

// The end of both kernels. acc is the block's (warps, 2, P, C / P) floats: each warp's sums of
// dweight, then of dbias, channel q * P + k (pack q, element k) at k * (C / P) + q, so that the 32
// lanes, which hold consecutive packs, touch consecutive words (no shared-memory bank conflicts).
// The block adds its warps' sums in warp order into warp 0's place (each thread reads and writes
// only its own columns c); then rank 0 of the cluster adds the other blocks' (read from their
// shared memory) in rank order and writes slot blockIdx.x / kClusterBlocks of partial_w/partial_b.
template <int P>
__device__ void add_block_and_cluster_sums(float* acc, float* partial_w, float* partial_b, int C) {
  const int warps = blockDim.x / 32, packs = C / P;
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) {
    float t = acc[c];
    for (int k = 1; k < warps; ++k) t += acc[static_cast<std::size_t>(k) * 2 * C + c];
    acc[c] = t;
  }
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

// The fast kernel, for rows a warp can hold: C <= 32 * L * P, at most L packs a lane. Each lane
// keeps, for its packs lane, lane + 32, ..., in registers:
//  - the current row's packs of inp, dout and dinp, all loaded before any is used: the row's one
//    trip to memory (GPT-2's bf16 row is 3 packs a lane: 9 loads in flight);
//  - its channels' running sums of dweight and dbias over the warp's rows (2 * L * P floats), so
//    that no row touches shared memory; they go there once, at the end.
// weight, shared by all rows, is read where it is used (cache hits). As it starts a row, the warp
// asks L2 for its next row, so that the next row's trip is to L2, not to memory.
// L <= max_resident_packs(P) keeps it within the 128 registers that let two blocks share an SM.
template <typename F, int P, int L>
__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kBackwardWarps * 32, 2)
    layernorm_backward_resident_kernel(F* dinp, float* partial_w, float* partial_b, const F* dout, const F* inp,
                                       const F* weight, const float* mean, const float* rstd, int N, int C,
                                       int block_rows) {
  using V = Pack<F, P>;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int packs = C / P;  // per row; lane owns packs lane + 32 u, u < L
  const V* w = reinterpret_cast<const V*>(weight);
  float sum_w[L][P] = {}, sum_b[L][P] = {};

  const int first = blockIdx.x * block_rows, last = min(N, first + block_rows);
  for (int row = first + warp; row < last; row += warps) {
    const auto [d, x, dx, m, s] = backward_row<P>(dinp, dout, inp, mean, rstd, row, C);
    if (row + warps < last) {  // the warp's next row, into L2: a hint, it loads no registers
#pragma unroll
      for (int u = 0; u < L; ++u) {
        const int q = lane + 32 * u;
        if (q < packs) {
          ptx::prefetch_l2(x + static_cast<std::size_t>(warps) * packs + q);
          ptx::prefetch_l2(d + static_cast<std::size_t>(warps) * packs + q);
          ptx::prefetch_l2(dx + static_cast<std::size_t>(warps) * packs + q);
        }
      }
    }
    V xv[L], dv[L], dxv[L];  // a lane past the row leaves its last packs unset and unused
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const int q = lane + 32 * u;
      if (q < packs) {
        xv[u] = x[q];
        dv[u] = d[q];
        dxv[u] = dx[q];
      }
    }

    float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
#pragma unroll
    for (int u = 0; u < L; ++u)
      if (lane + 32 * u < packs) add_row_sums(xv[u], dv[u], w[lane + 32 * u], m, s, dnorm_sum, dnorm_xhat_sum);
    const float dnorm_mean = warp_sum(dnorm_sum) / C;
    const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / C;
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const int q = lane + 32 * u;
      if (q >= packs) break;
      backward_pack(dxv[u], xv[u], dv[u], w[q], m, s, dnorm_mean, dnorm_xhat_mean, [&](int k, float dw, float db) {
        sum_w[u][k] += dw;
        sum_b[u][k] += db;
      });
      dx[q] = dxv[u];
    }
  }

  float* acc = reinterpret_cast<float*>(ptx::dynamic_shared_memory());
  float* acc_w = acc + static_cast<std::size_t>(warp) * 2 * C;
  float* acc_b = acc_w + C;
#pragma unroll
  for (int u = 0; u < L; ++u) {
    const int q = lane + 32 * u;
    if (q >= packs) break;
#pragma unroll
    for (int k = 0; k < P; ++k) {
      acc_w[k * packs + q] = sum_w[u][k];
      acc_b[k * packs + q] = sum_b[u][k];
    }
  }
  add_block_and_cluster_sums<P>(acc, partial_w, partial_b, C);
}

#if defined(__GNUC__) && !defined(__CUDACC__)
#pragma GCC diagnostic pop
#endif

// The kernel for any C: the row streamed through twice, since it may not fit the registers.
// Pass 1 loads kUnroll packs a lane before it uses any, for the row sums, and asks L2 for the row
// of dinp; pass 2 reads inp, dout and weight again (cache hits) with dinp (from L2), kUnroll2
// packs at a time (pass 2 holds four tensors' packs: more spills registers in bf16), and adds the
// row's dweight and dbias terms into the warp's running sums in shared memory (one warp, one copy:
// no atomics), in the layout add_block_and_cluster_sums reads.
constexpr int kUnroll = 4;
constexpr int kUnroll2 = 1;
template <typename F, int P>
__global__ void __cluster_dims__(kClusterBlocks, 1, 1) __launch_bounds__(kBackwardWarps * 32, 2)
    layernorm_backward_streamed_kernel(F* dinp, float* partial_w, float* partial_b, const F* dout, const F* inp,
                                       const F* weight, const float* mean, const float* rstd, int N, int C,
                                       int block_rows) {
  using V = Pack<F, P>;
  float* acc = reinterpret_cast<float*>(ptx::dynamic_shared_memory());
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const int packs = C / P;  // per row; lane owns packs lane, lane + 32, ...
  float* acc_w = acc + static_cast<std::size_t>(warp) * 2 * C;
  float* acc_b = acc_w + C;
  for (int c = lane; c < 2 * C; c += 32) acc_w[c] = 0.0f;  // only this warp uses them until the end
  __syncwarp();

  const V* w = reinterpret_cast<const V*>(weight);
  const int first = blockIdx.x * block_rows, last = min(N, first + block_rows);
  for (int row = first + warp; row < last; row += warps) {
    const auto [d, x, dx, m, s] = backward_row<P>(dinp, dout, inp, mean, rstd, row, C);

    // Pass 1: the two row sums.
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
          ptx::prefetch_l2(dx + q);  // a hint: loads nothing into registers
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (q0 + 32 * u >= packs) break;
        add_row_sums(xv[u], dv[u], wv[u], m, s, dnorm_sum, dnorm_xhat_sum);
      }
    }
    const float dnorm_mean = warp_sum(dnorm_sum) / C;
    const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / C;

    // Pass 2: dinp, and this row's terms of dweight and dbias.
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
        backward_pack(dxv[u], xv[u], dv[u], wv[u], m, s, dnorm_mean, dnorm_xhat_mean, [&](int k, float dw, float db) {
          acc_w[k * packs + q] += dw;
          acc_b[k * packs + q] += db;
        });
        dx[q] = dxv[u];
      }
    }
  }
  add_block_and_cluster_sums<P>(acc, partial_w, partial_b, C);
}

// Packs a lane holds in the resident kernel: the most it may take at P channels a pack (at most 4
// packs and 24 channels: the packs of three tensors and two sums a channel within the 128
// registers; bf16 at 4 packs spills), and how many a row of C channels needs (0: the row does not
// fit; the streamed kernel runs).
constexpr int max_resident_packs(int P) { return std::min(4, 24 / P); }
inline int resident_packs(int C, int P) {
  const int L = (C / P + 31) / 32;
  return L <= max_resident_packs(P) ? L : 0;
}

// A backward row kernel: layernorm_backward_resident_kernel or layernorm_backward_streamed_kernel.
template <typename F>
using BackwardRowKernel = void (*)(F*, float*, float*, const F*, const F*, const F*, const float*, const float*, int,
                                   int, int);

// The resident row kernel for P channels an access and L packs a lane (nullptr past the most).
template <typename F, int P, int L = 1>
BackwardRowKernel<F> resident_row_kernel(int packs_per_lane) {
  if constexpr (L <= max_resident_packs(P)) {
    if (packs_per_lane == L) return layernorm_backward_resident_kernel<F, P, L>;
    return resident_row_kernel<F, P, L + 1>(packs_per_lane);
  } else {
    return nullptr;
  }
}

// The row kernel the launcher runs for C channels, P an access: the resident one where `choice`
// allows it and the row fits a warp's registers, else the streamed one.
template <typename F, int P>
BackwardRowKernel<F> backward_row_kernel(int C, LayerNormBackwardKernel choice) {
  const int L = resident_packs(C, P);
  if (choice == LayerNormBackwardKernel::kAuto && L > 0) return resident_row_kernel<F, P>(L);
  return layernorm_backward_streamed_kernel<F, P>;
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

// The backward's launch for N rows of C channels: blocks of `warps` warps (fewer than
// kBackwardWarps where their sums would not fit kBackwardSmemBudget) with shared_bytes of
// shared memory; rows cut into at most kLayerNormParamChunks * kClusterBlocks blocks of
// block_rows rows each, the blocks grouped kClusterBlocks to a cluster and a slot (the last blocks
// may have no rows: they add zeros).
struct BackwardLaunch {
  int warps;
  std::size_t shared_bytes;
  int blocks, block_rows, slots;
};
inline BackwardLaunch layernorm_backward_launch(int N, int C) {
  const std::size_t warp_bytes = 2 * static_cast<std::size_t>(C) * sizeof(float);
  const int warps = static_cast<int>(
      std::clamp<std::size_t>(kBackwardSmemBudget / warp_bytes, 1, std::size_t{kBackwardWarps}));
  const std::size_t smem = warps * warp_bytes;
  SCALELAB_CHECK(smem <= kMaxSmemPerBlock, "layernorm_backward: C = ", C, " needs ", smem,
                 " bytes of shared memory, more than a block has");
  constexpr int kMaxBlocks = kLayerNormParamChunks * kClusterBlocks;
  const int block_rows = (N + kMaxBlocks - 1) / kMaxBlocks;
  const int slots = ((N + block_rows - 1) / block_rows + kClusterBlocks - 1) / kClusterBlocks;
  return {warps, smem, slots * kClusterBlocks, block_rows, slots};
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

// The backward row kernel layernorm_backward launches for these tensors (the tests run the same):
// 16-byte accesses where every row allows them.
template <typename F>
BackwardRowKernel<F> pick_backward_row_kernel(int C, const F* dinp, const F* dout, const F* inp, const F* weight,
                                              LayerNormBackwardKernel choice) {
  return rows_on_16_bytes<F>(C, {dinp, dout, inp, weight}) ? backward_row_kernel<F, Pack16<F>::kSize>(C, choice)
                                                           : backward_row_kernel<F, 1>(C, choice);
}

}  // namespace scalelab::cuda::layernorm_kernels
