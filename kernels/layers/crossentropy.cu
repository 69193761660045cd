// Softmax + cross-entropy on the GPU: the launchers of the kernels in crossentropy_kernels.cuh
// (which describes them; tests/simt/ runs the same kernels on the CPU).
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/layers/crossentropy.hpp"
#include "kernels/layers/crossentropy_kernels.cuh"

namespace scalelab::cuda {

using namespace crossentropy_kernels;

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
  if (N <= 0 || V <= 0) return;
  crossentropy_backward_kernel<<<backward_grid<F>(N, V), kBackThreads, 0, stream>>>(dlogits, probs, targets, dloss, V,
                                                                                    ld);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void crossentropy_loss(float* losses, const F* logits, const int* targets, int N, int V, int ld, cudaStream_t stream) {
  SCALELAB_CHECK(ld >= V, "crossentropy_loss: rows ", ld, " apart, fewer than V = ", V);
  if (N <= 0) return;
  crossentropy_loss_kernel<<<N, kRowThreads, 0, stream>>>(losses, logits, targets, V, ld);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void crossentropy_backward_logits(F* dlogits, const F* logits, const float* losses, const int* targets, float dloss,
                                  int N, int V, int ld, cudaStream_t stream) {
  SCALELAB_CHECK(ld >= V, "crossentropy_backward_logits: rows ", ld, " apart, fewer than V = ", V);
  if (N <= 0 || V <= 0) return;
  crossentropy_backward_logits_kernel<<<N, kRowThreads, 0, stream>>>(dlogits, logits, losses, targets, dloss, V, ld);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

void mean_loss(float* mean, const float* losses, int N, cudaStream_t stream) {
  SCALELAB_CHECK(N > 0, "mean_loss of ", N, " rows");
  mean_loss_kernel<<<1, 1024, 0, stream>>>(mean, losses, N);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                                                               \
  template void crossentropy_forward<F>(F*, float*, const F*, const int*, int, int, int, cudaStream_t);       \
  template void crossentropy_backward<F>(F*, const F*, const int*, float, int, int, int, cudaStream_t);       \
  template void crossentropy_loss<F>(float*, const F*, const int*, int, int, int, cudaStream_t);              \
  template void crossentropy_backward_logits<F>(F*, const F*, const float*, const int*, float, int, int, int, \
                                                cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
