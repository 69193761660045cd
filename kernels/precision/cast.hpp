// Stage 03 on the GPU: conversions between fp32 and the half formats. fp32 -> bf16/fp16 rounds
// to nearest, ties to even (the IEEE default, and what PyTorch's .to() does): overflow gives
// inf, NaN stays NaN, small values become subnormal before they become zero. bf16/fp16 -> fp32
// is exact. The CPU versions live in reference/precision/ (stage 03's lab); every result,
// NaN payloads included, has the same bits as theirs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/core/dtype.hpp"

namespace scalelab::cuda {
// out (N) = in (N) converted. Supported pairs: float -> bf16, float -> fp16, bf16 -> float,
// fp16 -> float (and the same type to itself, a copy).
template <typename To, typename From>
void cast(To* out, const From* in, std::size_t N, cudaStream_t stream);
}  // namespace scalelab::cuda
