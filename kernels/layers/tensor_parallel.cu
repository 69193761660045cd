// Stage 06's kernels: the masked embedding, the vocab-parallel cross-entropy's row passes, the
// row-parallel bias. One thread per element, or one block per row for the row reductions.
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/tensor_parallel.hpp"

namespace scalelab::cuda {

namespace {

constexpr int kRowThreads = 512;

template <typename F>
__global__ void vocab_embedding_forward_kernel(F* out, const int* local_tokens, const F* wte, int C, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const int token = local_tokens[i / C];
    out[i] = token >= 0 ? wte[std::size_t(token) * C + i % C] : from_float<F>(0.0f);
  }
}

template <typename F>
__global__ void add_position_kernel(F* out, const F* wpe, int first_row, int T, int C, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>((first_row + i / C) % T);
    out[i] = from_float<F>(to_float(out[i]) + to_float(wpe[std::size_t(t) * C + i % C]));
  }
}

// dwpe[t,c] += dout[i,c] over the rows i at position t: one thread per (t,c), rows in order.
template <typename F>
__global__ void position_backward_kernel(F* dwpe, const F* dout, int first_row, int rows, int T, int C) {
  const std::size_t n = std::size_t(T) * C;
  for (std::size_t k = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; k < n;
       k += std::size_t(gridDim.x) * blockDim.x) {
    const int t = static_cast<int>(k / C), c = static_cast<int>(k % C);
    float sum = 0.0f;
    for (int i = ((t - first_row) % T + T) % T; i < rows; i += T) sum += to_float(dout[std::size_t(i) * C + c]);
    dwpe[k] = from_float<F>(to_float(dwpe[k]) + sum);
  }
}

template <typename F>
__global__ void vocab_embedding_backward_kernel(F* dwte, const F* dout, const int* local_tokens, int C, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x) {
    const int token = local_tokens[i / C];
    if (token >= 0) atomic_add(&dwte[std::size_t(token) * C + i % C], to_float(dout[i]));
  }
}

template <typename F>
__global__ void row_max_kernel(float* row_max, const F* logits, int V, int ld) {
  __shared__ float shared[32];
  const F* z = logits + static_cast<std::size_t>(blockIdx.x) * ld;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, to_float(z[j]));
  m = block_max(m, shared);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

template <typename F>
__global__ void row_sums_kernel(float* sum_exp, float* target_logit, const F* logits, const float* row_max,
                                const int* local_targets, int V, int ld) {
  __shared__ float shared[32];
  const F* z = logits + static_cast<std::size_t>(blockIdx.x) * ld;
  const float m = row_max[blockIdx.x];
  float s = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(to_float(z[j]) - m);
  s = block_sum(s, shared);
  if (threadIdx.x == 0) {
    const int target = local_targets[blockIdx.x];
    sum_exp[blockIdx.x] = s;
    target_logit[blockIdx.x] = target >= 0 ? to_float(z[target]) : 0.0f;
  }
}

template <typename F>
__global__ void finish_kernel(F* probs, float* losses, const F* logits, const float* row_max, const float* sum_exp,
                              const float* target_logit, int V, int ld) {
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * ld;
  const float m = row_max[blockIdx.x], s = sum_exp[blockIdx.x], inv = 1.0f / s;
  for (int j = threadIdx.x; j < V; j += blockDim.x)
    probs[off + j] = from_float<F>(expf(to_float(logits[off + j]) - m) * inv);
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(s) - (target_logit[blockIdx.x] - m);
}

template <typename F>
__global__ void add_bias_kernel(F* y, const F* bias, int C, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < n;
       i += std::size_t(gridDim.x) * blockDim.x)
    y[i] = from_float<F>(to_float(y[i]) + to_float(bias[i % C]));
}

}  // namespace

template <typename F>
void vocab_embedding_forward(F* out, const int* local_tokens, const F* wte_local, int N, int C, cudaStream_t stream) {
  const std::size_t n = std::size_t(N) * C;
  if (n == 0) return;
  vocab_embedding_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, local_tokens, wte_local, C, n);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void add_position_embedding(F* out, const F* wpe, int first_row, int rows, int T, int C, cudaStream_t stream) {
  const std::size_t n = std::size_t(rows) * C;
  if (n == 0) return;
  add_position_kernel<<<blocks_for(n), kThreads, 0, stream>>>(out, wpe, first_row, T, C, n);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void vocab_embedding_backward(F* dwte_local, const F* dout, const int* local_tokens, int N, int C,
                              cudaStream_t stream) {
  const std::size_t n = std::size_t(N) * C;
  if (n == 0) return;
  vocab_embedding_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dwte_local, dout, local_tokens, C, n);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void position_embedding_backward(F* dwpe, const F* dout, int first_row, int rows, int T, int C, cudaStream_t stream) {
  if (rows <= 0 || std::size_t(T) * C == 0) return;
  position_backward_kernel<<<blocks_for(std::size_t(T) * C), kThreads, 0, stream>>>(dwpe, dout, first_row, rows, T, C);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void vocab_ce_row_max(float* row_max, const F* logits, int N, int V_real, int ld, cudaStream_t stream) {
  SCALELAB_CHECK(ld >= V_real, "vocab_ce_row_max: rows ", ld, " apart, fewer than ", V_real);
  if (N <= 0) return;
  row_max_kernel<<<N, kRowThreads, 0, stream>>>(row_max, logits, V_real, ld);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void vocab_ce_row_sums(float* sum_exp, float* target_logit, const F* logits, const float* row_max,
                       const int* local_targets, int N, int V_real, int ld, cudaStream_t stream) {
  SCALELAB_CHECK(ld >= V_real, "vocab_ce_row_sums: rows ", ld, " apart, fewer than ", V_real);
  if (N <= 0) return;
  row_sums_kernel<<<N, kRowThreads, 0, stream>>>(sum_exp, target_logit, logits, row_max, local_targets, V_real, ld);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void vocab_ce_finish(F* probs, float* losses, const F* logits, const float* row_max, const float* sum_exp,
                     const float* target_logit, int N, int V_real, int ld, cudaStream_t stream) {
  SCALELAB_CHECK(ld >= V_real, "vocab_ce_finish: rows ", ld, " apart, fewer than ", V_real);
  if (N <= 0) return;
  finish_kernel<<<N, kRowThreads, 0, stream>>>(probs, losses, logits, row_max, sum_exp, target_logit, V_real, ld);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void add_bias(F* y, const F* bias, int N, int C, cudaStream_t stream) {
  const std::size_t n = std::size_t(N) * C;
  if (n == 0) return;
  add_bias_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, bias, C, n);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                                                                        \
  template void vocab_embedding_forward<F>(F*, const int*, const F*, int, int, cudaStream_t);                          \
  template void add_position_embedding<F>(F*, const F*, int, int, int, int, cudaStream_t);                             \
  template void vocab_embedding_backward<F>(F*, const F*, const int*, int, int, cudaStream_t);                         \
  template void position_embedding_backward<F>(F*, const F*, int, int, int, int, cudaStream_t);                        \
  template void vocab_ce_row_max<F>(float*, const F*, int, int, int, cudaStream_t);                                    \
  template void vocab_ce_row_sums<F>(float*, float*, const F*, const float*, const int*, int, int, int, cudaStream_t); \
  template void vocab_ce_finish<F>(F*, float*, const F*, const float*, const float*, const float*, int, int, int,      \
                                   cudaStream_t);                                                                      \
  template void add_bias<F>(F*, const F*, int, int, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
