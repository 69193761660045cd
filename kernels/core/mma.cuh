// Warp-level tensor-core primitives in PTX (sm_80 and later; built here for sm_90), for kernels
// that keep their tiles in registers: the flash attention's forward and backward
// (kernels/layers/attention_flash_mma.cu). nvcuda::wmma hides where each element of a fragment
// lives, so a kernel on it must go through shared memory to touch single elements (the softmax
// needs to); mma.sync's fragment layouts are documented, so the softmax can work on the
// accumulator registers directly and turn them into the next product's input without a
// round trip. Only .cu files include this.
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
// ldmatrix loads the fragments from shared memory: each of its four 8x8 matrices has 8 rows of
// 16 bytes, lane j (0..31) passes the address of row j % 8 of matrix j / 8, and register r of
// every lane receives matrix r's pair (row g, columns 2i, 2i+1); with .trans, the pair
// (rows 2i, 2i+1, column g) instead, i.e. the matrix transposed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/core/dtype.hpp"
#include "kernels/core/mma_layout.hpp"

namespace scalelab::cuda::mma {

// The shared-memory address space's 32-bit address of a pointer into shared memory.
__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of 16-bit elements; row_address is this lane's row (see above).
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row_address)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(row_address)));
}

// d += a b, fp32 accumulation (see the layouts above).
template <typename F>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                            std::uint32_t b1) {
  static_assert(std::is_same_v<F, bf16> || std::is_same_v<F, fp16>, "tensor-core products take bf16 or fp16");
  if constexpr (std::is_same_v<F, bf16>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

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
// Asynchronous 16-byte copy global -> shared that bypasses the registers (and L1): with
// `valid` false it reads nothing and writes 16 zero bytes, which is how tiles are padded past
// the end of the sequence. Groups of copies are committed and waited for as below.
__device__ __forceinline__ void cp_async_16(void* dst_shared, const void* src_global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :
               : "r"(smem_address(dst_shared)), "l"(src_global), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `kPending` of this thread's committed groups are still in flight. The
// "memory" clobber keeps the compiler from moving shared-memory reads above the wait (the other
// threads' copies still need a __syncthreads after it).
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

}  // namespace scalelab::cuda::mma
