// Stage 03 on the GPU: the loss scaler's inf/NaN check (train/loss_scaler.hpp). After backward
// with a scaled loss, any inf or NaN in the gradients means the scale was too large: the step is
// skipped and the scale lowered. The check leaves a flag on the device, so the host reads one
// integer instead of the gradients.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace scalelab::cuda {
// Sets *found (device memory) to 1 if any of x (N) is inf or NaN; leaves it unchanged otherwise,
// so several buffers can be checked into one flag (zero it first). F: float, bf16, fp16.
template <typename F>
void find_nonfinite(unsigned int* found, const F* x, std::size_t N, cudaStream_t stream);
}  // namespace scalelab::cuda
