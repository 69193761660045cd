// The cuBLAS handle, its workspace, and the row-major gemm wrappers.
#include "kernels/core/blas.hpp"

#include "kernels/core/dtype.hpp"

namespace scalelab::cuda {

Blas::Blas(cudaStream_t stream, MemoryTracker* tracker, bool allow_tf32)
    : stream_(stream), allow_tf32_(allow_tf32), workspace_(kWorkspaceBytes, MemCategory::kWorkspace, tracker) {
  SCALELAB_CUBLAS_CHECK(cublasCreate(&handle_));
  try {
    SCALELAB_CUBLAS_CHECK(cublasSetStream(handle_, stream_));
    // Our workspace (counted by the tracker) instead of one cuBLAS would allocate on its own.
    SCALELAB_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()));
    // Reductions inside a product (split-K) stay in fp32 even for half inputs.
    SCALELAB_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
  } catch (...) {
    cublasDestroy(handle_);
    throw;
  }
}

Blas::~Blas() {
  if (handle_) cublasDestroy(handle_);
}

namespace {
cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <typename T>
cublasComputeType_t compute_type(const Blas& blas) {
  // fp32 accumulation always; TF32 inputs only for fp32 data and only when allowed.
  if constexpr (sizeof(T) == sizeof(float)) {
    if (blas.allow_tf32()) return CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  return CUBLAS_COMPUTE_32F;
}
}  // namespace

template <typename T>
void gemm(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* a, int lda,
          const T* b, int ldb, float beta, T* c, int ldc) {
  if (m == 0 || n == 0) return;
  const cudaDataType_t t = DType<T>::cuda_type;
  // Row-major C = op(A) op(B)  <=>  column-major C^T = op(B)^T op(A)^T (see the header).
  SCALELAB_CUBLAS_CHECK(cublasGemmEx(blas.handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, t, ldb, a, t, lda,
                                     &beta, c, t, ldc, compute_type<T>(blas), CUBLAS_GEMM_DEFAULT));
}

template <typename T>
void gemm_strided_batched(const Blas& blas, bool trans_a, bool trans_b, int m, int n, int k, float alpha, const T* a,
                          int lda, long long stride_a, const T* b, int ldb, long long stride_b, float beta, T* c,
                          int ldc, long long stride_c, int batch) {
  if (m == 0 || n == 0 || batch == 0) return;
  const cudaDataType_t t = DType<T>::cuda_type;
  SCALELAB_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas.handle(), op(trans_b), op(trans_a), n, m, k, &alpha, b, t, ldb,
                                                   stride_b, a, t, lda, stride_a, &beta, c, t, ldc, stride_c, batch,
                                                   compute_type<T>(blas), CUBLAS_GEMM_DEFAULT));
}

#define SCALELAB_INSTANTIATE(T)                                                                                       \
  template void gemm<T>(const Blas&, bool, bool, int, int, int, float, const T*, int, const T*, int, float, T*, int); \
  template void gemm_strided_batched<T>(const Blas&, bool, bool, int, int, int, float, const T*, int, long long,      \
                                        const T*, int, long long, float, T*, int, long long, int);
SCALELAB_INSTANTIATE(float)
SCALELAB_INSTANTIATE(bf16)
SCALELAB_INSTANTIATE(fp16)
#undef SCALELAB_INSTANTIATE

}  // namespace scalelab::cuda
