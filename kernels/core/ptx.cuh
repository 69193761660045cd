// The kernels' inline PTX (sm_80 and later; built here for sm_90), and their dynamic shared
// memory: the part of those kernels that only nvcc can compile. Nothing
// else of them is PTX, so tests/simt/ runs the same kernel source on the CPU by putting its own
// version of this one file first on the include path (tests/simt/include/kernels/core/
// ptx.cuh emulates each instruction as the PTX ISA describes it). Keep the two in step: same
// functions, same meaning.
//
// ldmatrix loads tensor-core fragments from shared memory: each of its four 8x8 matrices has 8
// rows of 16 bytes, lane j (0..31) passes the address of row j % 8 of matrix j / 8, and register
// r of every lane receives matrix r's pair (row g, columns 2i, 2i+1), with g = lane / 4 and
// i = lane % 4; with .trans, the pair (rows 2i, 2i+1, column g) instead, i.e. the matrix
// transposed. mma.sync's fragment layouts are in kernels/core/mma.cuh.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/core/dtype.hpp"

namespace scalelab::cuda::ptx {

// The block's dynamic shared memory: as many bytes as the launch's third argument, 128-byte
// aligned.
__device__ __forceinline__ unsigned char* dynamic_shared_memory() {
  extern __shared__ __align__(128) unsigned char smem[];
  return smem;
}

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

// d += a b: D (16x8, fp32) += A (16x16, bf16/fp16, row-major) B (16x8, "col"), fp32 accumulation
// (fragment layouts: kernels/core/mma.cuh).
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

// Asynchronous 16-byte copy global -> shared that bypasses the registers (and L1): with
// `valid` false it reads nothing and writes 16 zero bytes, which is how tiles are padded past
// the end of the sequence. Until the copy's group has been waited for, the destination's
// contents are undefined.
__device__ __forceinline__ void cp_async_16(void* dst_shared, const void* src_global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
               :
               : "r"(smem_address(dst_shared)), "l"(src_global), "r"(valid ? 16 : 0));
}
// Closes this thread's current group of copies.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most `kPending` of this thread's committed groups are still in flight. The
// "memory" clobber keeps the compiler from moving shared-memory reads above the wait (the other
// threads' copies still need a __syncthreads after it).
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Asks L2 to fetch the line holding p ahead of a load (loads nothing into registers).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" : : "l"(p)); }

// tanh(u) in one instruction (sm_75+), relative error up to 2^-11 (kernels/layers/
// elementwise_ops.cuh says where that is enough).
__device__ __forceinline__ float tanh_approx(float u) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
  return t;
}

}  // namespace scalelab::cuda::ptx
