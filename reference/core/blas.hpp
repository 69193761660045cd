// Row-major matrix product through a real BLAS, for float (training) and double (the fp64
// twins that gradient checks use). C = alpha * op(A) @ op(B) + beta * C.
#pragma once

#include <cblas.h>

namespace scalelab {

template <typename F>
inline void gemm(bool trans_a, bool trans_b, int m, int n, int k, F alpha, const F* a, int lda, const F* b, int ldb,
                 F beta, F* c, int ldc) {
  const auto ta = trans_a ? CblasTrans : CblasNoTrans;
  const auto tb = trans_b ? CblasTrans : CblasNoTrans;
  if constexpr (sizeof(F) == sizeof(float)) {
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

// Pin BLAS to n threads (1 for benchmarks against single-threaded peers); 0 leaves the default.
void set_blas_threads(int n);

}  // namespace scalelab
