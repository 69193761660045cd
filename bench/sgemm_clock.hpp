// Time spent inside the BLAS's float matrix product (sgemm), for bench_step: how much of a
// training step is matrix products, and so how fast the step could be if everything else took no
// time at all.
//
// It works by interposition: sgemm_clock.cpp defines the function core/blas.hpp calls for float
// (dnnl_sgemm with SCALELAB_BLAS=onednn, cblas_sgemm with openblas or blis) in the benchmark
// executable, so the linker binds the library's calls to it; it starts a clock, calls the
// library's own function (found with dlsym(RTLD_NEXT)) and adds the time and the FLOPs (2 m n k)
// to a running total. Nothing in reference/ knows it is being timed.
#pragma once

#include <cstdint>

namespace scalelab::bench {

struct SgemmTotals {
  std::uint64_t calls = 0;
  double seconds = 0;
  double flops = 0;  // 2 m n k per call
};

// The totals since the last reset (one thread: bench_step pins BLAS and itself to one).
SgemmTotals sgemm_totals();
void reset_sgemm_totals();

}  // namespace scalelab::bench
