// Softmax + cross-entropy: one block per row (V is up to 50257 wide), block-wide max and sum;
// the fused backward is elementwise.
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/crossentropy.hpp"

namespace scalelab::cuda {

namespace {

constexpr int kRowThreads = 512;

template <typename F>
__global__ void crossentropy_forward_kernel(F* probs, float* losses, const F* logits, const int* targets, int V,
                                            int ld) {
  __shared__ float shared[32];
  const std::size_t off = static_cast<std::size_t>(blockIdx.x) * ld;
  const F* z = logits + off;
  F* p = probs + off;
  // Read the target's logit before probs (which may alias the logits) is written; the
  // reductions below synchronise the block, so every write comes after this read.
  const float target_logit = threadIdx.x == 0 ? to_float(z[targets[blockIdx.x]]) : 0.0f;
  float maxv = -INFINITY;
  for (int j = threadIdx.x; j < V; j += blockDim.x) maxv = fmaxf(maxv, to_float(z[j]));
  maxv = block_max(maxv, shared);
  float sum = 0.0f;
  for (int j = threadIdx.x; j < V; j += blockDim.x) sum += expf(to_float(z[j]) - maxv);
  sum = block_sum(sum, shared);
  const float inv = 1.0f / sum;
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = from_float<F>(expf(to_float(z[j]) - maxv) * inv);
  // -log p[target] as log-sum-exp: finite even where p[target] underflows to zero
  if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum) - (target_logit - maxv);
}

// idx runs over the N V valid elements; (i, j) is its place in rows ld apart.
template <typename F>
__global__ void crossentropy_backward_kernel(F* dlogits, const F* probs, const int* targets, float dloss, int V, int ld,
                                             std::size_t n) {
  for (std::size_t idx = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; idx < n;
       idx += std::size_t(gridDim.x) * blockDim.x) {
    const std::size_t i = idx / V;
    const int j = static_cast<int>(idx % V);
    const std::size_t at = i * ld + j;
    float d = to_float(probs[at]) * dloss;
    if (j == targets[i]) d -= dloss;
    dlogits[at] = from_float<F>(d);
  }
}

__global__ void mean_loss_kernel(float* mean, const float* losses, int N) {
  __shared__ double shared[32];
  double sum = 0.0;
  for (int i = threadIdx.x; i < N; i += blockDim.x) sum += losses[i];
  sum = block_sum(sum, shared);
  if (threadIdx.x == 0) *mean = static_cast<float>(sum / N);
}

}  // namespace

template <typename F>
void crossentropy_forward(F* probs, float* losses, const F* logits, const int* targets, int N, int V, int ld,
                          cudaStream_t stream) {
  SCALELAB_CHECK(ld >= V, "crossentropy_forward: rows ", ld, " apart, fewer than V = ", V);
  if (N <= 0) return;
  crossentropy_forward_kernel<<<N, kRowThreads, 0, stream>>>(probs, losses, logits, targets, V, ld);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void crossentropy_backward(F* dlogits, const F* probs, const int* targets, float dloss, int N, int V, int ld,
                           cudaStream_t stream) {
  SCALELAB_CHECK(ld >= V, "crossentropy_backward: rows ", ld, " apart, fewer than V = ", V);
  const std::size_t n = static_cast<std::size_t>(N) * V;
  if (n == 0) return;
  crossentropy_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dlogits, probs, targets, dloss, V, ld, n);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

void mean_loss(float* mean, const float* losses, int N, cudaStream_t stream) {
  SCALELAB_CHECK(N > 0, "mean_loss of ", N, " rows");
  mean_loss_kernel<<<1, 1024, 0, stream>>>(mean, losses, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                                                         \
  template void crossentropy_forward<F>(F*, float*, const F*, const int*, int, int, int, cudaStream_t); \
  template void crossentropy_backward<F>(F*, const F*, const int*, float, int, int, int, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
