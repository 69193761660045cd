// GELU (tanh form, GPT-2's) on the GPU; twin of model/layers/gelu.hpp. F: float, bf16, fp16.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

namespace scalelab::cuda {
// out, inp (N) elementwise
template <typename F>
void gelu_forward(F* out, const F* inp, std::size_t N, cudaStream_t stream);
// dinp (N) = (written; may alias dout); dout, inp (N)
template <typename F>
void gelu_backward(F* dinp, const F* dout, const F* inp, std::size_t N, cudaStream_t stream);
}  // namespace scalelab::cuda
