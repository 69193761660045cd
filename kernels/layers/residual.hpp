// The residual connection on the GPU; twin of model/layers/residual.hpp. F: float, bf16, fp16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace scalelab::cuda {
// out = a + b, (N) elementwise
template <typename F>
void residual_forward(F* out, const F* a, const F* b, std::size_t N, cudaStream_t stream);
// da, db (N) +=; dout (N)
template <typename F>
void residual_backward(F* da, F* db, const F* dout, std::size_t N, cudaStream_t stream);
}  // namespace scalelab::cuda
