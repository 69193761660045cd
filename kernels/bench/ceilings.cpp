// The copy and GEMM ceilings (see ceilings.hpp).
#include "kernels/bench/ceilings.hpp"

#include "kernels/core/blas.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/dtype.hpp"

namespace scalelab::cuda {

namespace {

constexpr std::size_t kCopyBytes = std::size_t{1} << 31;  // 2 GiB: far beyond the 50 MB L2
constexpr int kGemmSize = 8192;

double copy_gbps(const BenchOptions& o, const Stream& stream) {
  DeviceBuffer<unsigned char> src(kCopyBytes, MemCategory::kWorkspace, nullptr);
  DeviceBuffer<unsigned char> dst(kCopyBytes, MemCategory::kWorkspace, nullptr);
  const Timing t = time_launch(stream.get(), o.warmup, o.repeats, [&] {
    SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), kCopyBytes, cudaMemcpyDeviceToDevice, stream.get()));
  });
  return 2.0 * kCopyBytes / (t.median_ms * 1e-3) / 1e9;  // every byte is read once and written once
}

template <typename F>
double gemm_tflops(const BenchOptions& o, const Stream& stream) {
  const std::size_t n2 = static_cast<std::size_t>(kGemmSize) * kGemmSize;
  DeviceBuffer<F> a(n2, MemCategory::kWorkspace, nullptr), b(n2, MemCategory::kWorkspace, nullptr);
  DeviceBuffer<F> c(n2, MemCategory::kWorkspace, nullptr);
  fill_random(a, 1, 0.05f, 1.05f);
  fill_random(b, 2, 0.05f, 1.05f);
  const Blas blas(stream.get(), nullptr, /*allow_tf32=*/false);
  const int n = kGemmSize;
  const Timing t = time_launch(stream.get(), o.warmup, o.repeats, [&] {
    gemm<F>(blas, false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  });
  return 2.0 * n * static_cast<double>(n) * n / (t.median_ms * 1e-3) / 1e12;
}

}  // namespace

Ceilings measure_ceilings(const BenchOptions& options) {
  const Stream stream;
  Ceilings c;
  c.copy_bytes = kCopyBytes;
  c.gemm_size = kGemmSize;
  c.copy_gbps = copy_gbps(options, stream);
  c.bf16_gemm_tflops = gemm_tflops<bf16>(options, stream);
  c.fp32_gemm_tflops = gemm_tflops<float>(options, stream);
  return c;
}

}  // namespace scalelab::cuda
