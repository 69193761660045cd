// test_nccl's busy kernel (tests/gpu/comm/nccl_test_kernels.cu) for the emulated runtime: the
// fill alone. An emulated stream's work is done when it is issued, so there is nothing to spin
// for; the one test that measures the spin ([overlap]) is left out of the emulated runs.
#include <cstddef>

#include "nccl_test_kernels.hpp"

namespace scalelab_test {

void spin_then_fill(float* out, std::size_t n, float scale, int /*spin_ms*/, cudaStream_t /*stream*/) {
  for (std::size_t i = 0; i < n; ++i) out[i] = scale * static_cast<float>(i % 5 + 1);
}

}  // namespace scalelab_test
