// The elementwise layers' launcher: runs an Op over every index of its tensors with the kernel of
// kernels/core/elementwise_kernel.cuh (16-byte accesses, several packs in flight per thread).
#pragma once

#include <cstddef>

#include "kernels/core/cuda_check.hpp"
#include "kernels/core/elementwise_kernel.cuh"

namespace scalelab::cuda {

// Runs op over the n values of the tensors of t, on `stream`.
template <typename F, typename Op>
void launch_elementwise(Op op, const ElementwiseTensors<F, Op::kIn, Op::kOut>& t, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  const ElementwiseLaunch l = elementwise_launch(t, n);
  elementwise_kernel<F, Op><<<l.blocks, kThreads, 0, stream>>>(op, t, n, l.split);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

}  // namespace scalelab::cuda
