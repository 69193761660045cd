// What the optimizer step does to the whole gradient buffer before AdamW, on the GPU: scaling
// (bitwise equal to the CPU's g *= s) and the sum of squares (against a CPU sum in double), which
// is also the step's inf/NaN check: non-finite on one inf or NaN, finite on the largest values.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/device.hpp"
#include "kernels/optim/grad_ops.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

// Up to a size where every thread of sum_squares' fixed 512-block grid loops several times.
const std::vector<std::size_t> kSizes = {1, 7, 33, 1000 + 3, (1u << 20) + 3};

TEMPLATE_TEST_CASE("scale_inplace is bitwise equal to the CPU's fp32 product, rounded once", "[gpu][grad_ops]", float,
                   bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  const float factor = 0.7310586f;  // e.g. a clipping coefficient: most products round
  for (std::size_t N : kSizes) {
    const std::string label = std::string("scale_inplace ") + dtype_name<F>() + " N=" + std::to_string(N);
    Rng rng(seed_for(label));
    std::vector<float> x = random_inputs<F>(N, rng);
    DeviceBuffer<F> d_x = upload<F>(x);
    cuda::scale_inplace(d_x.data(), factor, N, stream.get());
    stream.synchronize();
    for (float& v : x) v *= factor;
    round_to<F>(x);  // one rounding to F after the fp32 product
    check_bitwise(label, download(d_x), x);
  }
}

TEMPLATE_TEST_CASE("sum_squares matches a CPU sum in double", "[gpu][grad_ops]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  DeviceBuffer<double> d_partials(cuda::kSumSquaresBlocks, MemCategory::kWorkspace, nullptr);
  DeviceBuffer<double> d_sum(1, MemCategory::kWorkspace, nullptr);
  for (std::size_t N : kSizes) {
    const std::string label = std::string("sum_squares ") + dtype_name<F>() + " N=" + std::to_string(N);
    Rng rng(seed_for(label));
    const std::vector<float> x = random_inputs<F>(N, rng);
    DeviceBuffer<F> d_x = upload<F>(x);
    poison(d_partials);
    poison(d_sum);
    cuda::sum_squares(d_sum.data(), d_partials.data(), d_x.data(), N, stream.get());
    stream.synchronize();
    double want = 0;
    for (float v : x) want += static_cast<double>(v) * v;
    const double got = d_sum.to_host()[0];
    // Each square is exact in double; only the order of the additions differs, so the sums
    // agree to double's rounding (1e-16 per addition), far inside 1e-12.
    const double rel = std::fabs(got - want) / want;
    INFO(label << ": GPU " << got << ", CPU " << want << ", relative difference " << rel << " (tolerance 1e-12)");
    CHECK(rel <= 1e-12);
  }
}

TEMPLATE_TEST_CASE("sum_squares is non-finite on one inf or NaN anywhere, and finite at each type's largest values",
                   "[gpu][grad_ops]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  DeviceBuffer<double> d_partials(cuda::kSumSquaresBlocks, MemCategory::kWorkspace, nullptr);
  DeviceBuffer<double> d_sum(1, MemCategory::kWorkspace, nullptr);
  auto run = [&](const std::vector<float>& x) {
    DeviceBuffer<F> d_x = upload<F>(x);
    cuda::sum_squares(d_sum.data(), d_partials.data(), d_x.data(), x.size(), stream.get());
    stream.synchronize();
    return d_sum.to_host()[0];
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (std::size_t N : kSizes) {
    const std::string label = std::string("sum_squares inf/NaN ") + dtype_name<F>() + " N=" + std::to_string(N);
    Rng rng(seed_for(label));
    // Large finite values: the largest of each type must not overflow the double sum (the step
    // would be skipped for nothing).
    std::vector<float> x = random_inputs<F>(N, rng, 0.05f, std::is_same_v<F, fp16> ? 65504.0f : 3e38f);
    INFO(label);
    CHECK(std::isfinite(run(x)));
    for (float bad : {inf, -inf, nan}) {
      for (std::size_t at : {N - 1, std::size_t{0}}) {
        std::vector<float> y = x;
        y[at] = bad;
        INFO("planted " << bad << " at index " << at << " of " << N);
        CHECK(!std::isfinite(run(y)));
      }
    }
  }
}

}  // namespace
