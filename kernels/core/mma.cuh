// Warp-level tensor-core fragments, for kernels that keep their tiles in registers: the flash
// attention's forward and backward (kernels/layers/attention_flash_mma_kernels.cuh). nvcuda::wmma
// hides where each element of a fragment lives, so a kernel on it must go through shared memory
// to touch single elements (the softmax needs to); mma.sync's fragment layouts are documented, so
// the softmax can work on the accumulator registers directly and turn them into the next
// product's input without a round trip. Device code only (.cu files, and the CPU emulation of
// tests/simt/).
//
// The one product is D (16x8, fp32) += A (16x16, bf16/fp16, row-major) B (16x8, "col": each
// thread holds pairs down a column). With lane = 32 lanes, g = lane / 4 (the "group", 0..7) and
// i = lane % 4 (the thread in the group), a lane holds (PTX ISA, mma.m16n8k16):
//
//   A: 4 registers of 2 halves   a[0] = A[g][2i, 2i+1]     a[1] = A[g+8][2i, 2i+1]
//                                a[2] = A[g][2i+8, 2i+9]   a[3] = A[g+8][2i+8, 2i+9]
//   B: 2 registers of 2 halves   b[0] = B[2i, 2i+1][g]     b[1] = B[2i+8, 2i+9][g]
//   C, D: 4 fp32                 c[0], c[1] = C[g][2i, 2i+1]   c[2], c[3] = C[g+8][2i, 2i+1]
//
// (the lower half of a register is the first element of its pair). Two consequences the
// attention uses: a row of C is held by the 4 lanes of one group, so a row maximum or sum is
// two shuffles; and the C fragments of two neighbouring 16x8 products (columns 0-7 and 8-15)
// hold exactly the elements of one A fragment (16x16), so a product's fp32 result becomes the
// next product's left input by rounding pairs to bf16/fp16 in the same registers (to_a_fragment).
//
// The instructions themselves (ldmatrix, mma.sync, cp.async) are in kernels/core/ptx.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/core/dtype.hpp"
#include "kernels/core/mma_layout.hpp"
#include "kernels/core/ptx.cuh"

namespace scalelab::cuda::mma {

// Two fp32 values rounded to nearest even and packed, lo in the lower half.
template <typename F>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<F, bf16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const std::uint32_t*>(&v);
  }
}

// The A fragment (16x16) made of two C fragments (16x8): left = columns 0-7, right = 8-15.
// a[0] = left's (row g, columns 2i, 2i+1), a[1] = left's row g+8, a[2] and a[3] the same of right
// (mma_layout.hpp's a_register_source, which the CPU test checks).
template <typename F>
__device__ __forceinline__ void to_a_fragment(std::uint32_t (&a)[4], const float (&left)[4], const float (&right)[4]) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const AccumulatorPair from = a_register_source(r);
    const float(&acc)[4] = from.half == 0 ? left : right;
    a[r] = pack2<F>(acc[from.e], acc[from.e + 1]);
  }
}

}  // namespace scalelab::cuda::mma
