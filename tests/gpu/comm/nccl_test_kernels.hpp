// Kernels for test_nccl's overlap case: busy work whose end the test can see.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace scalelab_test {

// On `stream`: wait about `spin_ms` milliseconds on the GPU, then out[i] = scale * (i % 5 + 1).
void spin_then_fill(float* out, std::size_t n, float scale, int spin_ms, cudaStream_t stream);

}  // namespace scalelab_test
