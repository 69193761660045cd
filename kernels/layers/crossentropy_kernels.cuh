// The softmax + cross-entropy kernels (launched by crossentropy.cu; tests/simt/ runs them on the
// CPU). Softmax + cross-entropy: one block per row (V is up to 50257 wide); the fused backward is
// elementwise. Both are bound by memory, so each thread moves 16 bytes per access (a chunk of
// kPack = 16 / sizeof(F) consecutive columns) where the row allows it.
//
// Forward reads the row twice, not three times: a first pass keeps a running max m and a sum
// s = sum exp(z - m) ("online softmax": when a larger value arrives, s is rescaled by
// exp(m_old - m_new)); the second pass writes the probabilities. The second read finds the row
// in L2 (a few rows per SM are in flight: 2 to 4 blocks of 512 threads, 100 KB each for GPT-2's
// bf16 rows, about 30 MB over the GPU), and the writes and second reads carry a streaming hint
// (evict first) so that they do not push the rows still to be read out of L2.
//
// The GPU model runs a second pair that writes no probabilities: a forward that is pass 1 alone
// (the loss, one read of the logits), and a backward that recomputes each probability from its
// logit and the row's log-sum-exp, which the loss gives back (lse = loss + z[target]), writing
// dlogits over the logits. Per step that is one read and one write of the (N, V) logits fewer
// than the forward that writes probabilities and a backward that reads them (GPT-2, bf16: 0.8 GB
// each). The probability pair stays for the tensor-parallel head, whose probabilities come from
// its own kernels (tensor_parallel.hpp), and as the CPU twin's shape.
//
// Thread t always owns the same columns, chunks t, t + blockDim, ... of kPack columns, whether
// the row is 16-byte aligned (one 128-bit access per chunk) or not (kPack scalar accesses): the
// arithmetic, and so every bit of the result, does not depend on the row stride ld.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/core/dtype.cuh"

namespace scalelab::cuda::crossentropy_kernels {

constexpr int kRowThreads = 512;   // forward: threads per row's block
constexpr int kUnroll = 4;         // forward: chunks each thread loads before it uses them
constexpr int kBackThreads = 256;  // backward: threads per block, one chunk each

// Columns [j, j + kSize) of a row of V columns; columns past V read as -inf (they add exp(-inf)
// = 0 to the sum and never win the max). `streaming`: the last read of these bytes.
template <typename F>
__device__ __forceinline__ Pack16<F> load_chunk(const F* row, int j, int V, bool row_aligned, bool streaming) {
  Pack16<F> c;
  if (row_aligned && j + Pack16<F>::kSize <= V) {
    const int4* p = reinterpret_cast<const int4*>(row + j);
    const int4 raw = streaming ? __ldcs(p) : *p;
    memcpy(&c, &raw, sizeof raw);
  } else {
#pragma unroll
    for (int k = 0; k < Pack16<F>::kSize; ++k) c.v[k] = j + k < V ? row[j + k] : from_float<F>(-INFINITY);
  }
  return c;
}

// Writes the columns of c that are below V (never the padding past V), with a streaming hint.
template <typename F>
__device__ __forceinline__ void store_chunk(F* row, int j, int V, bool row_aligned, const Pack16<F>& c) {
  if (row_aligned && j + Pack16<F>::kSize <= V) {
    int4 raw;
    memcpy(&raw, &c, sizeof raw);
    __stcs(reinterpret_cast<int4*>(row + j), raw);
  } else {
#pragma unroll
    for (int k = 0; k < Pack16<F>::kSize; ++k)
      if (j + k < V) row[j + k] = c.v[k];
  }
}

// s, a sum of exp(z - m), re-expressed as a sum of exp(z - new_max) (new_max >= m). Where
// m == new_max nothing changes; that also covers m = new_max = -inf (an empty sum stays 0,
// where exp(-inf - -inf) would be NaN).
__device__ __forceinline__ float rescale(float s, float m, float new_max) {
  return m == new_max ? s : s * expf(m - new_max);
}

// Merges the running (max, sum) of another thread into (m, s). Symmetric in its two operands
// (fmaxf and + commute), so in the butterfly below every lane ends with the same bits.
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
  const float new_max = fmaxf(m, m2);
  s = rescale(s, m, new_max) + rescale(s2, m2, new_max);
  m = new_max;
}

// The (max, sum) of the whole block; every thread gets it. `shared` holds 2 x 32 floats.
__device__ __forceinline__ void block_merge(float& m, float& s, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1)
    merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) {
    shared[warp] = m;
    shared[32 + warp] = s;
  }
  __syncthreads();
  m = lane < warps ? shared[lane] : -INFINITY;
  s = lane < warps ? shared[32 + lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1)
    merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
}

// Pass 1 of both forward kernels: row z's max m and sum s = sum exp(z - m), every thread of the
// block gets them. Each thread keeps a running (max, sum) over its chunks, kUnroll loads in
// flight, then the block merges them. `shared` holds 2 x 32 floats.
template <typename F>
__device__ __forceinline__ void row_max_sum(const F* z, int V, bool z_aligned, float& m, float& s, float* shared) {
  constexpr int kSize = Pack16<F>::kSize;
  m = -INFINITY;
  s = 0.0f;
  const int step = blockDim.x * kSize;  // columns between two chunks of one thread
  for (int j0 = threadIdx.x * kSize; j0 < V; j0 += kUnroll * step) {
    Pack16<F> c[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)  // the loads first, so that kUnroll of them are in flight
      if (j0 + u * step < V) c[u] = load_chunk(z, j0 + u * step, V, z_aligned, false);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (j0 + u * step >= V) break;
      float chunk_max = -INFINITY;
#pragma unroll
      for (int k = 0; k < kSize; ++k) chunk_max = fmaxf(chunk_max, to_float(c[u].v[k]));
      if (chunk_max > m) {
        s = rescale(s, m, chunk_max);
        m = chunk_max;
      }
#pragma unroll
      for (int k = 0; k < kSize; ++k) s += expf(to_float(c[u].v[k]) - m);
    }
  }
  block_merge(m, s, shared);
}

// The row's loss, -log p[target], as log-sum-exp: finite even where p[target] underflows to zero.
__device__ __forceinline__ float row_loss(float m, float s, float target_logit) { return logf(s) - (target_logit - m); }

template <typename F>
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_forward_kernel(F* probs, float* losses, const F* logits, const int* targets, int V, int ld) {
  __shared__ float shared[64];
  constexpr int kSize = Pack16<F>::kSize;
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * ld;
  const F* z = logits + off;
  F* p = probs + off;
  const bool z_aligned = aligned16(z), p_aligned = aligned16(p);
  // Read the target's logit before probs (which may alias the logits) is written; block_merge
  // synchronises the block, so every write comes after this read.
  const float target_logit = threadIdx.x == 0 ? to_float(z[targets[blockIdx.x]]) : 0.0f;
  float m, s;
  row_max_sum(z, V, z_aligned, m, s, shared);
  const float inv = 1.0f / s;

  // Pass 2: the probabilities, each thread over the same chunks (read, then written: in place
  // no other thread touches them).
  const int step = blockDim.x * kSize;
  for (int j = threadIdx.x * kSize; j < V; j += step) {
    Pack16<F> c = load_chunk(z, j, V, z_aligned, true);
#pragma unroll
    for (int k = 0; k < kSize; ++k) c.v[k] = from_float<F>(expf(to_float(c.v[k]) - m) * inv);
    store_chunk(p, j, V, p_aligned, c);
  }
  if (threadIdx.x == 0) losses[blockIdx.x] = row_loss(m, s, target_logit);
}

// The loss alone, for a backward that starts from the logits (crossentropy_backward_logits_kernel):
// pass 1 only, no probabilities written.
template <typename F>
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_loss_kernel(float* losses, const F* logits, const int* targets, int V, int ld) {
  __shared__ float shared[64];
  const F* z = logits + static_cast<std::size_t>(blockIdx.x) * ld;
  float m, s;
  row_max_sum(z, V, aligned16(z), m, s, shared);
  if (threadIdx.x == 0) losses[blockIdx.x] = row_loss(m, s, to_float(z[targets[blockIdx.x]]));
}

// Row blockIdx.x, chunk blockIdx.y * blockDim.x + threadIdx.x: dlogits = (probs - onehot) * dloss.
template <typename F>
__global__ void crossentropy_backward_kernel(F* dlogits, const F* probs, const int* targets, float dloss, int V,
                                             int ld) {
  constexpr int kSize = Pack16<F>::kSize;
  const int j = (blockIdx.y * blockDim.x + threadIdx.x) * kSize;
  if (j >= V) return;
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * ld;
  const F* p = probs + off;
  F* d = dlogits + off;
  const int target = targets[blockIdx.x];
  Pack16<F> c = load_chunk(p, j, V, aligned16(p), true);
#pragma unroll
  for (int k = 0; k < kSize; ++k) {
    float g = to_float(c.v[k]) * dloss;
    if (j + k == target) g -= dloss;
    c.v[k] = from_float<F>(g);
  }
  store_chunk(d, j, V, aligned16(d), c);
}

// Row blockIdx.x: dlogits = (softmax(z) - onehot) * dloss from the logits z themselves, the
// softmax as exp(z - lse) with the row's log-sum-exp lse = loss + z[target] (the loss is
// lse - z[target]), so the forward need not write the probabilities. One block a row, each thread
// over chunks kRowThreads apart, kUnroll loads in flight: the target's logit is read once, before
// any thread writes (dlogits may alias the logits, and the target's chunk is one thread's).
template <typename F>
__global__ void __launch_bounds__(kRowThreads)
    crossentropy_backward_logits_kernel(F* dlogits, const F* logits, const float* losses, const int* targets,
                                        float dloss, int V, int ld) {
  __shared__ float lse_shared;
  constexpr int kSize = Pack16<F>::kSize;
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * ld;
  const F* z = logits + off;
  F* d = dlogits + off;
  const bool z_aligned = aligned16(z), d_aligned = aligned16(d);
  const int target = targets[blockIdx.x];
  if (threadIdx.x == 0) lse_shared = losses[blockIdx.x] + to_float(z[target]);
  __syncthreads();
  const float lse = lse_shared;
  const int step = blockDim.x * kSize;
  for (int j0 = threadIdx.x * kSize; j0 < V; j0 += kUnroll * step) {
    Pack16<F> c[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (j0 + u * step < V) c[u] = load_chunk(z, j0 + u * step, V, z_aligned, true);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int j = j0 + u * step;
      if (j >= V) break;
#pragma unroll
      for (int k = 0; k < kSize; ++k) {
        float g = expf(to_float(c[u].v[k]) - lse) * dloss;
        if (j + k == target) g -= dloss;
        c[u].v[k] = from_float<F>(g);
      }
      store_chunk(d, j, V, d_aligned, c[u]);
    }
  }
}

__global__ void mean_loss_kernel(float* mean, const float* losses, int N) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int i = threadIdx.x; i < N; i += blockDim.x) sum += losses[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) *mean = static_cast<float>(sum / N);
}

// The backward's grid: x the rows (up to 2^31 - 1 of them), y the chunks of a row, kBackThreads
// a block.
template <typename F>
dim3 backward_grid(int N, int V) {
  const int chunks = (V + Pack16<F>::kSize - 1) / Pack16<F>::kSize;
  return dim3(static_cast<unsigned>(N), static_cast<unsigned>((chunks + kBackThreads - 1) / kBackThreads));
}

}  // namespace scalelab::cuda::crossentropy_kernels
