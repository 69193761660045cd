// Shared pieces of test_gpu_kernels: the tolerances (one place), seeds, random inputs, moving
// fp32 values to and from device buffers of float, bf16 or fp16, poisoning outputs, and the
// comparisons whose failure messages say what differed, where and by how much.
//
// How a kernel is checked: random inputs are rounded to the kernel's storage type F on the host
// (with reference/precision's round-to-nearest-even, the CPU side of stage 03), the CPU twin
// runs in fp32 on exactly those rounded values, and the GPU output (widened exactly to fp32) is
// compared with it by the relative error ||gpu - cpu|| / ||cpu||. So the only differences are
// the kernel's own: a different summation order, and in bf16/fp16 the rounding of its outputs
// (and of intermediates it stores in F).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/rng.hpp"
#include "kernel_tolerances.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/core/dtype.hpp"
#include "precision/half.hpp"

namespace scalelab_gpu_test {

using scalelab::Rng;
using scalelab::cuda::bf16;
using scalelab::cuda::DeviceBuffer;
using scalelab::cuda::fp16;

// Allowed relative error ||gpu - cpu|| / ||cpu|| of a kernel's output, by storage type (one place
// for the GPU tests and the emulated ones of tests/simt/).
using scalelab_test::rel_tolerance;

template <typename F>
const char* dtype_name() {
  return scalelab::cuda::DType<F>::name;
}

// A seed of its own for every section: FNV-1a of the section's label (e.g. "gelu fp16 N=33").
std::uint64_t seed_for(const std::string& label);

// n values with a random sign and a magnitude in [lo, hi): never zero, so a kernel that leaves
// an output at 0, or multiplies by a forgotten 0, cannot pass by accident.
std::vector<float> random_values(std::size_t n, Rng& rng, float lo = 0.05f, float hi = 1.05f);
// n integers uniform in [0, bound).
std::vector<int> random_ints(std::size_t n, Rng& rng, int bound);

// The 16-bit format of bf16/fp16 (reference/precision's name for it).
template <typename F>
constexpr scalelab::HalfFormat half_format() {
  return std::is_same_v<F, bf16> ? scalelab::HalfFormat::kBF16 : scalelab::HalfFormat::kFP16;
}

// Rounds x in place to the nearest value of F (nothing to do for float).
template <typename F>
void round_to(std::vector<float>& x) {
  if constexpr (!std::is_same_v<F, float>) scalelab::round_to_half(x.data(), x.size(), half_format<F>());
}

// Random values already rounded to F: the inputs of every kernel test.
template <typename F>
std::vector<float> random_inputs(std::size_t n, Rng& rng, float lo = 0.05f, float hi = 1.05f) {
  std::vector<float> x = random_values(n, rng, lo, hi);
  round_to<F>(x);
  return x;
}

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

// Row strides (the LM head's padded logits, kernels/model/gpu_gpt.hpp): a (rows, cols) matrix
// stored with its rows ld >= cols elements apart.
// The first multiple of 128 above cols: a stride with a padding that is never empty.
int padded_stride(int cols);
// x (rows, cols) laid out with rows ld apart, every padding element NaN: a kernel that reads the
// padding turns its output NaN.
std::vector<float> pad_rows(const std::vector<float>& x, int rows, int cols, int ld);
// The first cols columns of each of the rows of x (rows ld apart): the (rows, cols) matrix.
std::vector<float> unpad_rows(const std::vector<float>& x, int rows, int cols, int ld);
// CHECKs that every padding element of x (rows ld apart) is NaN: a poisoned padding that the
// kernel did not write.
void check_padding_unwritten(const std::string& what, const std::vector<float>& x, int rows, int cols, int ld);

// ||got - want|| / ||want||, with a report of the largest difference and the first non-finite
// element; NaN when got has a non-finite element.
struct Closeness {
  double rel_err = 0;
  std::string report;
};
Closeness closeness(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                    double tolerance);
// CHECKs closeness(...).rel_err <= tolerance, with the report as the failure message.
void check_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                 double tolerance);
// CHECKs that got and want hold the same bit patterns (32- or 16-bit words), naming the first
// differing index, both patterns and how many differ.
void check_bitwise(const std::string& what, const std::vector<float>& got, const std::vector<float>& want);
void check_bitwise16(const std::string& what, const std::vector<std::uint16_t>& got,
                     const std::vector<std::uint16_t>& want, const std::vector<float>& inputs);

}  // namespace scalelab_gpu_test
