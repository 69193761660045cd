// Checked CUDA and cuBLAS calls (introduced with the CUDA backend, stage 00 on the GPU).
// Every runtime/cuBLAS call and every kernel launch goes through one of these macros; a failure
// throws scalelab::Error naming the file, the line, the call and the library's own message, so a
// bad launch surfaces where it happened instead of at some later, unrelated synchronisation.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/error.hpp"

namespace scalelab::cuda {

// Throw helpers (out of line: the macros stay small and the strings are built only on failure).
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
const char* cublas_status_name(cublasStatus_t status);

}  // namespace scalelab::cuda

// SCALELAB_CUDA_CHECK(cudaMalloc(&p, n)) throws on anything but cudaSuccess.
#define SCALELAB_CUDA_CHECK(call)                                                      \
  do {                                                                                 \
    const cudaError_t scalelab_status_ = (call);                                       \
    if (scalelab_status_ != cudaSuccess)                                               \
      ::scalelab::cuda::throw_cuda_error(scalelab_status_, #call, __FILE__, __LINE__); \
  } while (0)

// SCALELAB_CUBLAS_CHECK(cublasGemmEx(...)) throws on anything but CUBLAS_STATUS_SUCCESS.
#define SCALELAB_CUBLAS_CHECK(call)                                                      \
  do {                                                                                   \
    const cublasStatus_t scalelab_status_ = (call);                                      \
    if (scalelab_status_ != CUBLAS_STATUS_SUCCESS)                                       \
      ::scalelab::cuda::throw_cublas_error(scalelab_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel<<<...>>> launch: a bad configuration (zero or too many blocks, too much shared
// memory) is reported by cudaGetLastError, not by the launch itself. Errors inside the kernel
// (an out-of-bounds access) appear at the next synchronising call, which is checked too.
#define SCALELAB_CUDA_LAUNCH_CHECK() SCALELAB_CUDA_CHECK(cudaGetLastError())
