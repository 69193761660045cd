// Row bookkeeping of the kernel benchmark (see kernel_bench.hpp).
#include "kernels/bench/kernel_bench.hpp"

#include <cstdio>

namespace scalelab::cuda {

std::size_t BenchShape::num_params() const {
  const std::size_t c = static_cast<std::size_t>(C);
  return static_cast<std::size_t>(V) * c + static_cast<std::size_t>(T) * c + L * (12 * c * c + 13 * c) + 2 * c;
}

void finish_row(KernelRow& row, const Ceilings& ceilings) {
  const double seconds = row.median_ms * 1e-3;
  row.gbps = row.bytes / seconds / 1e9;
  row.tflops = row.flops / seconds / 1e12;
  if (row.flops > 0) {
    const double peak = row.dtype == "fp32" ? ceilings.fp32_gemm_tflops : ceilings.bf16_gemm_tflops;
    row.fraction = peak > 0 ? row.tflops / peak : 0;
  } else {
    row.fraction = ceilings.copy_gbps > 0 ? row.gbps / ceilings.copy_gbps : 0;
  }
}

void RowRecorder::memory(const std::string& kernel, const std::string& pass, double bytes,
                         const std::function<void()>& launch) {
  add(kernel, pass, bytes, 0, launch);
}

void RowRecorder::compute(const std::string& kernel, const std::string& pass, double flops,
                          const std::function<void()>& launch) {
  add(kernel, pass, 0, flops, launch);
}

void RowRecorder::add(const std::string& kernel, const std::string& pass, double bytes, double flops,
                      const std::function<void()>& launch) {
  KernelRow row;
  row.kernel = kernel;
  row.pass = pass;
  row.dtype = dtype_;
  row.bytes = bytes;
  row.flops = flops;
  const Timing t = time_launch(stream_, options_.warmup, options_.repeats, launch);
  row.median_ms = t.median_ms;
  row.min_ms = t.min_ms;
  finish_row(row, ceilings_);
  std::fprintf(stderr, "  %-28s %-9s %-5s %9.3f ms\n", kernel.c_str(), pass.c_str(), dtype_.c_str(), t.median_ms);
  rows_.push_back(row);
}

}  // namespace scalelab::cuda
