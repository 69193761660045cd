// "Device" tensors of the emulated tests: host vectors of a kernel's storage type F (float, bf16,
// fp16), which the emulated kernels (simt.hpp) and the emulated cuBLAS (blas_emulation.hpp) read
// and write directly, made from and read back as fp32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernel_checks.hpp"
#include "kernels/core/dtype.hpp"
#include "precision/half.hpp"

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

}  // namespace scalelab_simt_test
