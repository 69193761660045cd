// Shared pieces of the kernel benchmark (scalelab_gpu_bench): CUDA-event timing of a launch
// repeated after warm-up, and device buffers filled with random values without generating
// hundreds of millions of them on the host.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kernels/core/device_buffer.hpp"

namespace scalelab::cuda {

struct BenchOptions {
  int batch = 8;     // B (GPT-2 124M shape: T = 1024, C = 768, NH = 12, V = 50257)
  int warmup = 3;    // untimed launches first (cuBLAS heuristics, caches, clocks)
  int repeats = 20;  // timed launches; the median is reported
  std::string json;  // where the JSON report goes ("" = none)
  // Throws ConfigError naming the first bad option.
  void validate() const;
};

struct Timing {
  double median_ms = 0, min_ms = 0;
};
// Runs `launch` (work on `stream`) warmup times, then `repeats` times, each timed alone between
// two CUDA events; returns the median and the minimum.
Timing time_launch(cudaStream_t stream, int warmup, int repeats, const std::function<void()>& launch);

// Fills d with values of random sign and magnitude in [lo, hi), rounded to F: a 1M-element block
// generated on the host, then copied over the rest of the buffer on the device (doubling). The
// repetition does not matter to a bandwidth or GEMM measurement; zeros would (a GEMM on zeros
// draws less power and runs faster).
template <typename F>
void fill_random(DeviceBuffer<F>& d, std::uint64_t seed, float lo = 0.05f, float hi = 1.05f);

}  // namespace scalelab::cuda
