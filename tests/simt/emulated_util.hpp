// Shared pieces of the emulated kernel tests (tests/simt/test_*_emulated.cpp), the counterpart of
// tests/gpu/kernels/gpu_test_util.hpp for kernels run by the CPU emulation: "device" tensors are
// host vectors of the kernel's storage type F, so a kernel reads and writes them directly.
// Inputs are random values rounded to F; the CPU twin runs in fp32 on those rounded values; the
// kernel's output is widened to fp32 and compared by the relative norm error, with the GPU tests'
// tolerances (gpu_test_util.hpp explains them).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "compare.hpp"
#include "core/rng.hpp"
#include "kernel_tolerances.hpp"
#include "kernels/core/dtype.hpp"
#include "precision/half.hpp"
#include "simt.hpp"

namespace scalelab_simt_test {

using scalelab::cuda::bf16;
using scalelab::cuda::fp16;

// The GPU tests' tolerances (kernel_tolerances.hpp).
template <typename F>
constexpr double tolerance() {
  return scalelab_test::rel_tolerance<F>();
}

template <typename F>
const char* dtype_name() {
  return scalelab::cuda::DType<F>::name;
}

template <typename F>
constexpr scalelab::HalfFormat half_format() {
  return std::is_same_v<F, bf16> ? scalelab::HalfFormat::kBF16 : scalelab::HalfFormat::kFP16;
}

// n values of random sign and magnitude in [lo, hi), rounded to F (never zero: an output left at
// 0 cannot pass by accident).
template <typename F>
std::vector<float> random_inputs(std::size_t n, scalelab::Rng& rng, float lo = 0.05f, float hi = 1.05f) {
  std::vector<float> x(n);
  for (float& v : x) {
    const float m = lo + (hi - lo) * static_cast<float>(rng.uniform());
    v = rng.uniform() < 0.5 ? -m : m;
  }
  if constexpr (!std::is_same_v<F, float>) scalelab::round_to_half(x.data(), x.size(), half_format<F>());
  return x;
}

// x as a tensor of F from element `offset` on (the elements before it 0): an offset that is not a
// multiple of 16 / sizeof(F) takes data() + offset off the 16-byte alignment of 16-byte accesses.
template <typename F>
std::vector<F> to_tensor(const std::vector<float>& x, std::size_t offset = 0) {
  std::vector<F> out(offset + x.size());
  if constexpr (std::is_same_v<F, float>) {
    std::memcpy(out.data() + offset, x.data(), 4 * x.size());
  } else {
    std::vector<std::uint16_t> bits(x.size());
    scalelab::float_to_half(bits.data(), x.data(), x.size(), half_format<F>());
    std::memset(static_cast<void*>(out.data()), 0, 2 * offset);
    std::memcpy(static_cast<void*>(out.data() + offset), bits.data(), 2 * bits.size());
  }
  return out;
}

// The tensor's values from element `offset` on, widened to fp32 (exactly).
template <typename F>
std::vector<float> widen(const std::vector<F>& x, std::size_t offset = 0) {
  std::vector<float> out(x.size() - offset);
  if constexpr (std::is_same_v<F, float>) {
    std::memcpy(out.data(), x.data() + offset, 4 * out.size());
  } else {
    std::vector<std::uint16_t> bits(out.size());
    std::memcpy(bits.data(), static_cast<const void*>(x.data() + offset), 2 * bits.size());
    scalelab::half_to_float(out.data(), bits.data(), bits.size(), half_format<F>());
  }
  return out;
}

// 0xFF bytes: NaN in fp32, bf16 and fp16, so an output element the kernel does not write fails.
template <typename T>
void poison(std::vector<T>& x) {
  std::memset(static_cast<void*>(x.data()), 0xFF, sizeof(T) * x.size());
}

// CHECKs ||got - want|| / ||want|| <= tol (NaN fails), naming the largest difference.
inline void check_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                        double tol) {
  REQUIRE(got.size() == want.size());
  const double err = scalelab_test::relative_norm_error(got.data(), want.data(), want.size());
  INFO(what << ": relative norm error " << err << " (tolerance " << tol << "); "
            << scalelab_test::compare_close(what, got.data(), want.data(), want.size(), 0.0, 0.0).message());
  CHECK(err <= tol);
}

// CHECKs that two tensors hold the same bits.
template <typename F>
void check_bitwise(const std::string& what, const std::vector<F>& got, const std::vector<F>& want) {
  REQUIRE(got.size() == want.size());
  std::size_t first = got.size(), count = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(static_cast<const void*>(&got[i]), static_cast<const void*>(&want[i]), sizeof(F)) != 0) {
      if (count++ == 0) first = i;
    }
  INFO(what << ": " << count << " of " << got.size() << " elements differ in their bits, the first at " << first);
  CHECK(count == 0);
}

// CHECKs that every ldmatrix of a launch took the fewest shared-memory wavefronts its bytes allow.
inline void check_no_bank_conflicts(const std::string& what, const scalelab::simt::LaunchStats& stats) {
  INFO(what << ": ldmatrix took " << stats.shared_wavefronts << " shared-memory wavefronts where "
            << stats.shared_wavefronts_min << " would do without bank conflicts");
  CHECK(stats.shared_wavefronts == stats.shared_wavefronts_min);
}

}  // namespace scalelab_simt_test
