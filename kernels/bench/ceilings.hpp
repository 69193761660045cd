// The device's measured ceilings, which every kernel's speed is a fraction of: memory bandwidth
// (a large device-to-device copy) and matrix-product throughput (a large cuBLAS GEMM on random
// data). Measured rather than read off a datasheet, because the datasheet's peak is not what the
// device reaches (an H100 SXM: 3.35 TB/s and 989 TFLOP/s bf16 on paper).
#pragma once

#include "kernels/bench/bench_util.hpp"

namespace scalelab::cuda {

struct Ceilings {
  double copy_gbps = 0;         // cudaMemcpy device to device, bytes read + bytes written per second
  double bf16_gemm_tflops = 0;  // 8192^3 bf16 GEMM, fp32 accumulation
  double fp32_gemm_tflops = 0;  // 8192^3 fp32 GEMM, TF32 off: the ceiling of the fp32 rows
  std::size_t copy_bytes = 0;   // size of the copied buffer
  int gemm_size = 0;            // m = n = k
};

Ceilings measure_ceilings(const BenchOptions& options);

}  // namespace scalelab::cuda
