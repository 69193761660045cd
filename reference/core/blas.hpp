// Row-major matrix product through a real BLAS, for float (training) and double (the fp64
// twins that gradient checks use). C = alpha * op(A) @ op(B) + beta * C.
//
// The library is a build option, SCALELAB_BLAS (cmake/ScalelabDeps.cmake), and only blas.cpp
// knows which one it is:
//   onednn    float through oneDNN's dnnl_sgemm, double through OpenBLAS (oneDNN has no dgemm)
//   openblas  both through OpenBLAS's CBLAS
//   blis      both through BLIS's CBLAS
// Each is deterministic (same inputs, same thread count: same bits), but two libraries sum in
// different orders, so a build's bits depend on which one it uses.
#pragma once

namespace scalelab {

// Defined for F = float and F = double.
template <typename F>
void gemm(bool trans_a, bool trans_b, int m, int n, int k, F alpha, const F* a, int lda, const F* b, int ldb, F beta,
          F* c, int ldc);

// Pin BLAS to n threads (1 for benchmarks against single-threaded peers); 0 leaves the default.
void set_blas_threads(int n);

// The library this build multiplies float matrices with: "oneDNN", "OpenBLAS" or "BLIS".
const char* blas_name();

}  // namespace scalelab
