// Flash attention on the GPU (kernels/layers/attention_flash.hpp) against its CPU twin
// (model/layers/attention_flash.hpp, itself checked against the naive attention and fp64 finite
// differences on the CPU): out, the log-sum-exp and dq, dk, dv, at sequence lengths off the 64-row
// tiles (one position, less than a tile, one past a tile, several tiles with a partial last one)
// and head sizes off the 16 columns of a tensor-core fragment (4, 9, 24) as well as GPT-2's 64.
// In bf16/fp16 the head sizes 16, 32, 64 and 128 run the register-resident kernels
// (attention_flash_mma.hpp), the others the shared-memory ones: both against the same twin; a
// second case sends head sizes 64 and 128 to the shared-memory kernels too, by taking the
// pointers off the 16-byte alignment the register-resident kernels need.
//
// Tolerances: out and dqkv use the kernel tolerance of gpu_test_util.hpp (fp32 1e-5; bf16 1e-2
// and fp16 2e-3, for the rounding of P and dS to F before their products and of the outputs).
// The log-sum-exp is fp32 on both sides and its scores are exact products of F values summed in
// fp32 (a product of two bf16 or fp16 values fits fp32's 24-bit mantissa), so it gets 2e-5 in
// every type: only the order of the sums over the head size and over the keys differs.
#include <catch2/catch.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/device.hpp"
#include "kernels/layers/attention_flash.hpp"
#include "model/layers/attention_flash.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

constexpr double kLseTolerance = 2e-5;

// One shape against the CPU twin, every device tensor from element `offset` of its buffer
// (gpu_test_util's upload and download): an offset of 2 halves (4 bytes) takes every pointer off
// the 16-byte alignment the register-resident kernels need, so the launchers fall back to the
// shared-memory kernels on the same shape.
template <typename F>
void check_against_twin(int B, int T, int C, int NH, std::size_t offset) {
  cuda::Stream stream;
  const std::string label = std::string("flash ") + dtype_name<F>() + " B=" + std::to_string(B) +
                            " T=" + std::to_string(T) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH) +
                            (offset ? " (pointers off 16-byte alignment)" : "");
  Rng rng(seed_for(label));
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  const std::size_t n_qkv = BT * 3 * C, n_out = BT * C, n_lse = BT * NH;
  const std::vector<float> qkv = random_inputs<F>(n_qkv, rng), dout = random_inputs<F>(n_out, rng);
  std::vector<float> scratch(scalelab::attention_flash_scratch_elems(T));

  // Forward.
  std::vector<float> out(n_out), lse(n_lse);
  scalelab::attention_flash_forward(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH);
  DeviceBuffer<F> d_qkv = upload<F>(qkv, offset), d_dout = upload<F>(dout, offset);
  DeviceBuffer<F> d_out(offset + n_out, MemCategory::kActivations, nullptr);
  DeviceBuffer<float> d_lse(n_lse, MemCategory::kActivations, nullptr);
  poison(d_out);
  poison(d_lse);
  cuda::attention_flash_forward(d_out.data() + offset, d_lse.data(), d_qkv.data() + offset, B, T, C, NH, stream.get());
  stream.synchronize();
  check_close(label + " out", download(d_out, offset), out, rel_tolerance<F>());
  check_close(label + " lse", download(d_lse), lse, kLseTolerance);

  // Backward, from the CPU's out rounded to F and its lse, on both sides, so that it is
  // checked on its own inputs rather than on the forward's rounding.
  round_to<F>(out);
  DeviceBuffer<F> d_out_in = upload<F>(out, offset);
  DeviceBuffer<float> d_lse_in = upload<float>(lse);
  DeviceBuffer<F> d_dqkv(offset + n_qkv, MemCategory::kGrads, nullptr);
  const auto backward = [&] {
    poison(d_dqkv);  // every q, k and v column must be written
    cuda::attention_flash_backward(d_dqkv.data() + offset, d_dout.data() + offset, d_qkv.data() + offset,
                                   d_out_in.data() + offset, d_lse_in.data(), B, T, C, NH, stream.get());
    stream.synchronize();
    return download(d_dqkv, offset);
  };
  const std::vector<float> got = backward();
  std::vector<float> dqkv(n_qkv);
  scalelab::attention_flash_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T,
                                     C, NH);
  check_close(label + " dqkv", got, dqkv, rel_tolerance<F>());

  // No atomics: a second backward gives the same bits.
  check_bitwise(label + " dqkv, second run", backward(), got);
}

TEMPLATE_TEST_CASE("flash attention forward and backward match the CPU twin", "[gpu][attention][flash]", float, bf16,
                   fp16) {
  // (B, T, C, NH): head sizes 4, 16, 9, 24, 64, 64, 32, 128, 64 (the last: 5 full tiles).
  const std::vector<std::array<int, 4>> shapes = {{1, 1, 8, 2},    {2, 7, 48, 3},     {2, 33, 36, 4},
                                                  {3, 65, 96, 4},  {1, 129, 768, 12}, {2, 200, 128, 2},
                                                  {2, 150, 64, 2}, {1, 333, 256, 2},  {1, 320, 128, 2}};
  for (const auto& [B, T, C, NH] : shapes) check_against_twin<TestType>(B, T, C, NH, 0);
}

TEMPLATE_TEST_CASE("flash attention's shared-memory kernels, on pointers the register-resident ones refuse",
                   "[gpu][attention][flash]", bf16, fp16) {
  // Head sizes 64 and 128 (GPT-2's, and the largest), which aligned pointers send to the
  // register-resident kernels.
  for (const auto& [B, T, C, NH] : std::vector<std::array<int, 4>>{{1, 129, 768, 12}, {1, 200, 256, 2}})
    check_against_twin<TestType>(B, T, C, NH, 2);
}

}  // namespace
