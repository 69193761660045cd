// The error messages behind SCALELAB_CUDA_CHECK and SCALELAB_CUBLAS_CHECK.
#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(detail::concat(file, ":", line, ": CUDA error ", cudaGetErrorName(status), " (",
                             cudaGetErrorString(status), ") in ", call));
}

const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cuBLAS status";
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(detail::concat(file, ":", line, ": cuBLAS error ", cublas_status_name(status), " (",
                             static_cast<int>(status), ") in ", call));
}

}  // namespace scalelab::cuda
