// Shared pieces of the emulated kernel tests (tests/simt/test_*_emulated.cpp), the counterpart of
// tests/gpu/kernels/gpu_test_util.hpp for kernels run by the CPU emulation: "device" tensors are
// host vectors of the kernel's storage type F, so a kernel reads and writes them directly. The
// host side (tolerances, random inputs rounded to F, comparisons with the CPU twin) is the GPU
// tests' own: tests/support/kernel_checks.hpp.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kernel_checks.hpp"
#include "kernels/core/dtype.hpp"
#include "precision/half.hpp"
#include "simt.hpp"

namespace scalelab_simt_test {

using namespace scalelab_kernel_test;

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

// CHECKs that every ldmatrix of a launch took the fewest shared-memory wavefronts its bytes allow.
inline void check_no_bank_conflicts(const std::string& what, const scalelab::simt::LaunchStats& stats) {
  INFO(what << ": ldmatrix took " << stats.shared_wavefronts << " shared-memory wavefronts where "
            << stats.shared_wavefronts_min << " would do without bank conflicts");
  CHECK(stats.shared_wavefronts == stats.shared_wavefronts_min);
}

}  // namespace scalelab_simt_test
