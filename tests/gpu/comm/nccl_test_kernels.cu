// A kernel that keeps the GPU busy for a set time and then writes a known pattern.
#include "nccl_test_kernels.hpp"

#include "kernels/core/cuda_check.hpp"

namespace scalelab_test {

namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One block: thread 0 spins, the others wait at the barrier, then all write.
__global__ void spin_then_fill_kernel(float* out, std::size_t n, float scale, unsigned long long spin_ns) {
  if (threadIdx.x == 0) {
    const unsigned long long start = global_ns();
    while (global_ns() - start < spin_ns) {
    }
  }
  __syncthreads();
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = scale * static_cast<float>(i % 5 + 1);
}

}  // namespace

void spin_then_fill(float* out, std::size_t n, float scale, int spin_ms, cudaStream_t stream) {
  spin_then_fill_kernel<<<1, 256, 0, stream>>>(out, n, scale, static_cast<unsigned long long>(spin_ms) * 1000000ull);
  SCALELAB_CUDA_LAUNCH_CHECK();
}

}  // namespace scalelab_test
