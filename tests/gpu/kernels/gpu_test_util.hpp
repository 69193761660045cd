// Shared pieces of test_gpu_kernels: moving fp32 values to and from device buffers of float,
// bf16 or fp16 and poisoning outputs, on top of the host side that the emulated kernel tests
// share (tests/support/kernel_checks.hpp: tolerances, seeds, random inputs, comparisons; how a
// kernel is checked).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/rng.hpp"
#include "kernel_checks.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/core/dtype.hpp"
#include "precision/half.hpp"

namespace scalelab_gpu_test {

using namespace scalelab_kernel_test;  // the host side: tolerances, inputs, comparisons
using scalelab::cuda::DeviceBuffer;

// A device buffer of F holding x (rounded to nearest even for bf16/fp16) from element `offset`
// on, the elements before it 0. An offset that is not a multiple of 16 / sizeof(F) puts
// d.data() + offset off the 16-byte alignment that the kernels' 16-byte accesses need.
template <typename F>
DeviceBuffer<F> upload(const std::vector<float>& x, std::size_t offset = 0) {
  if (offset > 0) {
    std::vector<float> padded(offset, 0.0f);
    padded.insert(padded.end(), x.begin(), x.end());
    return upload<F>(padded);
  }
  DeviceBuffer<F> d(x.size(), scalelab::MemCategory::kWorkspace, nullptr);
  if constexpr (std::is_same_v<F, float>) {
    d.copy_from_host(x);
  } else {
    std::vector<std::uint16_t> bits(x.size());
    scalelab::float_to_half(bits.data(), x.data(), x.size(), half_format<F>());
    if (!bits.empty()) SCALELAB_CUDA_CHECK(cudaMemcpy(d.data(), bits.data(), bits.size() * 2, cudaMemcpyHostToDevice));
  }
  return d;
}

// The buffer's values widened to fp32 (exact), from element `offset` on. Synchronous: waits for
// the work before it.
template <typename F>
std::vector<float> download(const DeviceBuffer<F>& d, std::size_t offset = 0) {
  std::vector<float> x(d.size());
  if constexpr (std::is_same_v<F, float>) {
    d.copy_to_host(x.data(), x.size());
  } else {
    std::vector<std::uint16_t> bits(d.size());
    if (!bits.empty()) SCALELAB_CUDA_CHECK(cudaMemcpy(bits.data(), d.data(), bits.size() * 2, cudaMemcpyDeviceToHost));
    scalelab::half_to_float(x.data(), bits.data(), bits.size(), half_format<F>());
  }
  x.erase(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(offset));
  return x;
}

// The raw 16-bit patterns of a bf16/fp16 buffer (for bitwise comparisons).
template <typename F>
std::vector<std::uint16_t> download_bits(const DeviceBuffer<F>& d) {
  static_assert(sizeof(F) == 2, "16-bit formats only");
  std::vector<std::uint16_t> bits(d.size());
  if (!bits.empty()) SCALELAB_CUDA_CHECK(cudaMemcpy(bits.data(), d.data(), bits.size() * 2, cudaMemcpyDeviceToHost));
  return bits;
}

// Fills a buffer with 0xFF bytes, a NaN in fp32, bf16 and fp16 alike: an output element that a
// kernel forgets to write stays NaN and fails every comparison.
template <typename T>
void poison(DeviceBuffer<T>& d) {
  if (d.bytes()) SCALELAB_CUDA_CHECK(cudaMemset(d.data(), 0xFF, d.bytes()));
}

}  // namespace scalelab_gpu_test
