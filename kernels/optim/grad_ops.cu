// Gradient scaling and the two-pass sum of squares on the GPU: the launchers of the kernels in
// grad_ops_kernels.cuh (which describes them; tests/simt/ runs the same kernels on the CPU).
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.cuh"
#include "kernels/optim/grad_ops.hpp"
#include "kernels/optim/grad_ops_kernels.cuh"

namespace scalelab::cuda {

using namespace grad_ops_kernels;

template <typename F>
void scale_inplace(F* x, float factor, std::size_t N, cudaStream_t stream) {
  if (N == 0) return;
  const Split s = split_at_16_bytes(x, N);
  // One pack per thread; at least one block, for the scalar head and tail when there are no packs.
  scale_kernel<<<blocks_for(s.packs > 0 ? s.packs : 1), kThreads, 0, stream>>>(x, factor, N, s.head, s.packs,
                                                                               s.tail_begin);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

template <typename F>
void sum_squares(double* out, double* partials, const F* x, std::size_t N, cudaStream_t stream) {
  const Split s = split_at_16_bytes(x, N);
  // Always the full fixed grid (blocks past the end write 0), so the summation order depends
  // only on N (and x's alignment), never on timing.
  sum_squares_partial_kernel<<<kSumSquaresBlocks, kThreads, 0, stream>>>(partials, x, N, s.head, s.packs, s.tail_begin);
  SCALELAB_CUDA_LAUNCH_CHECK();
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(out, partials, kSumSquaresBlocks);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

#define SCALELAB_INSTANTIATE(F)                                         \
  template void scale_inplace<F>(F*, float, std::size_t, cudaStream_t); \
  template void sum_squares<F>(double*, double*, const F*, std::size_t, cudaStream_t);
SCALELAB_FOR_EACH_DTYPE(SCALELAB_INSTANTIATE)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
