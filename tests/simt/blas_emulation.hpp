// cuBLAS and cuBLASLt on the CPU: the subset of their C API that kernels/core/blas.cpp calls,
// written from the documentation in the toolkit's headers (cublas_api.h, cublasLt.h), on host
// memory (the CUDA runtime's calls: runtime_emulation.cpp). Linked instead of the real
// libraries, it runs blas.cpp's row-major wrappers (gemm, gemm_strided_batched, gemm_epilogue)
// without a GPU, so that the translation to the column-major library (which matrix is first,
// the transposes, the leading dimensions, the epilogue's bias and aux) is checked against the
// CPU twin: test_blas_emulated.cpp.
//
// It computes each product in double and rounds once to the output's type. It refuses, with the
// library's status, what the documentation says the library refuses: a leading dimension below
// a matrix's rows, layouts whose shapes do not make a product, an attribute set with the wrong
// size, an aux leading dimension that is not a multiple of 8 or is below D's rows, an epilogue
// without its bias or aux pointer. Its GELU is the tanh form (blas.hpp says why that is close
// enough to the library's). Not emulated: anything else in either library (a call to a function
// outside the subset does not link), batches in cuBLASLt, pointer mode device, streams (the work
// is done when the call returns).
#pragma once

#include <cstddef>

namespace scalelab::blas_emulation {

// What the emulation saw and what it should do, for the tests.
struct Controls {
  // cublasLtMatmulAlgoGetHeuristic: how many calls, and whether to find no algorithm.
  int heuristic_calls = 0;
  bool heuristic_finds_none = false;
  // cublasLtMatmul: how many products ran, and whether to answer CUBLAS_STATUS_NOT_SUPPORTED
  // (doing nothing), as the library may for an algorithm its heuristic offered.
  int lt_matmuls = 0;
  bool lt_matmul_not_supported = false;
  // cublasGemmEx and cublasGemmStridedBatchedEx calls.
  int gemms = 0;
};

// The one set of controls of this process (the emulated library's state, as a library has).
Controls& controls();

}  // namespace scalelab::blas_emulation
