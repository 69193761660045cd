// The host side of the kernel tests, shared by the GPU tests (tests/gpu/kernels/gpu_test_util.hpp
// adds device buffers to it) and the CPU emulation's (tests/simt/emulated_util.hpp): the
// tolerances (one place), seeds, random inputs rounded to the storage type, padded rows, and the
// comparisons whose failure messages say what differed, where and by how much.
//
// How a kernel is checked: random inputs are rounded to the kernel's storage type F on the host
// (with reference/precision's round-to-nearest-even, the CPU side of stage 03), the CPU twin
// runs in fp32 on exactly those rounded values, and the kernel's output (widened exactly to fp32)
// is compared with it by the relative error ||kernel - cpu|| / ||cpu||. So the only differences
// are the kernel's own: a different summation order, and in bf16/fp16 the rounding of its outputs
// (and of intermediates it stores in F).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "core/rng.hpp"
#include "kernels/core/dtype.hpp"
#include "precision/half.hpp"

namespace scalelab_kernel_test {

using scalelab::Rng;
using scalelab::cuda::bf16;
using scalelab::cuda::fp16;

// Allowed relative error ||kernel - cpu|| / ||cpu|| of a kernel's output, by storage type:
//  fp32  1e-5: both sides round every operation to fp32 (unit roundoff 6e-8); only the order of
//        sums differs (warp shuffles, cuBLAS's blocking vs OpenBLAS's), which over the few
//        hundred to thousand terms summed here costs well under 1e-5. Products run with TF32
//        off: TF32's 10-bit inputs alone would give about 5e-4.
//  bf16  1e-2: the kernel rounds its output (and stored intermediates such as attention's
//        probabilities) to 8 significant bits, 2^-9 = 2e-3 relative per rounding; a few
//        roundings in a row stay below 1e-2.
//  fp16  2e-3: the same with 11 significant bits, 2^-12 = 2.4e-4 per rounding.
template <typename F>
constexpr double rel_tolerance() {
  if constexpr (std::is_same_v<F, bf16>)
    return 1e-2;
  else if constexpr (std::is_same_v<F, fp16>)
    return 2e-3;
  else
    return 1e-5;
}

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

// A softmax + cross-entropy case: N rows of V logits already rounded to F (from 0.05 to 4), a
// target a row, the mean loss's gradient 1/N, and the CPU twin's (model/layers/crossentropy.hpp)
// probabilities, losses, their mean, and dlogits from the unrounded probabilities.
struct CrossEntropyCase {
  int N, V;
  std::vector<float> logits;
  std::vector<int> targets;
  float dloss;
  std::vector<float> probs, losses, dlogits;
  float mean_loss;
};
// The case for these logits (N V values), with targets drawn from rng.
CrossEntropyCase crossentropy_case(int N, int V, std::vector<float> logits, Rng& rng);
template <typename F>
CrossEntropyCase crossentropy_case(int N, int V, Rng& rng) {
  return crossentropy_case(N, V, random_inputs<F>(static_cast<std::size_t>(N) * V, rng, 0.05f, 4.0f), rng);
}

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

}  // namespace scalelab_kernel_test
