// Matrix products on the GPU through cuBLAS, in the row-major form of the CPU's gemm()
// (core/blas.hpp): C = alpha * op(A) @ op(B) + beta * C, every matrix row-major with its
// leading dimension. Inputs and outputs are float, bf16 or fp16; accumulation is always fp32.
//
// cuBLAS is column-major. A row-major matrix (r, c) with leading dimension ld is the same memory
// as the column-major matrix (c, r) with the same ld, i.e. its transpose. So the row-major
// C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: call cuBLAS with A and B swapped,
// m and n swapped, and the transpose flags unchanged.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>

#include "core/memory.hpp"
#include "kernels/core/device_buffer.hpp"

namespace scalelab::cuda {

// What a matrix-product launcher needs: a cuBLAS handle bound to a stream, a workspace that the
// memory tracker counts, and whether fp32 products may use TF32 tensor cores (10-bit mantissa
// inputs: about 8x faster on an H100, but not comparable with an fp32 CPU reference to 1e-5;
// tests keep it off). Owning the handle here, not in a global, keeps the choice explicit.
class Blas {
 public:
  Blas(cudaStream_t stream, MemoryTracker* tracker, bool allow_tf32 = false);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  cublasHandle_t handle() const { return handle_; }
  cudaStream_t stream() const { return stream_; }
  bool allow_tf32() const { return allow_tf32_; }

  static constexpr std::size_t kWorkspaceBytes = 32u << 20;  // cuBLAS's recommendation for Hopper

 private:
  cublasHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool allow_tf32_ = false;
  DeviceBuffer<unsigned char> workspace_;
};

// Row-major C (m,n) = alpha * op(A) (m,k) @ op(B) (k,n) + beta * C. T: float, __nv_bfloat16, __half.
template <typename T>
void gemm(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* a, int lda,
          const T* b, int ldb, float beta, T* c, int ldc);

// The same for `batch` independent products whose matrices sit at fixed strides (in elements):
// product i uses a + i*stride_a, b + i*stride_b, c + i*stride_c. Attention uses it with the
// head as the batch index: heads are hs columns apart inside one row of qkv.
template <typename T>
void gemm_strided_batched(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* a,
                          int lda, long long stride_a, const T* b, int ldb, long long stride_b, float beta, T* c,
                          int ldc, long long stride_c, int batch);

}  // namespace scalelab::cuda
