// The register-resident flash attention's kernels (kernels/layers/attention_flash_mma_kernels.cuh)
// run on the CPU by tests/simt's emulation of CUDA, against the CPU twin
// (model/layers/attention_flash.hpp): the same kernel source as the GPU build, with ldmatrix,
// mma.sync and cp.async emulated from the PTX ISA (tests/simt/include/kernels/core/ptx.cuh), so
// that the fragment choreography, the causal masks, the two-stage copy pipeline and the rows past
// T are checked on every machine with the CUDA toolkit, GPU or not. The GPU test
// (tests/gpu/kernels/test_attention_flash.cpp) runs the same comparisons on the hardware.
//
// Shapes: each compiled head size (16, 32, 64, 128), sequence lengths off the 64-row tile (1, 65,
// 150, 70) and on it (128), several heads and batch rows, and GPT-2's 12 heads of 64. Tolerances
// as the GPU test's (relative norm error: bf16 1e-2, fp16 2e-3, for the rounding of P, dS and the
// outputs to F; the log-sum-exp 2e-5, fp32 on both sides). The emulation adds its own rounding of each 16-term
// product sum, far below these. And one property of their speed: no ldmatrix has a bank conflict.
#include "simt.hpp"  // first: it defines CUDA's keywords for the host compiler

#include <catch2/catch.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/rng.hpp"
#include "emulated_util.hpp"
#include "kernels/layers/attention_flash_mma_kernels.cuh"
#include "model/layers/attention_flash.hpp"

namespace {

namespace cuda = scalelab::cuda;
namespace fm = scalelab::cuda::flash_mma;
using namespace scalelab_simt_test;

static_assert(cuda::ptx::kEmulated, "the include path must put tests/simt/include before the project's kernels/");

constexpr double kLseTolerance = 2e-5;

template <int HS, typename F>
void check_shape(int B, int T, int NH, scalelab::simt::Schedule schedule) {
  const int C = HS * NH;
  const std::string label = std::string(std::is_same_v<F, bf16> ? "bf16" : "fp16") + " B=" + std::to_string(B) +
                            " T=" + std::to_string(T) + " hs=" + std::to_string(HS) + " NH=" + std::to_string(NH) +
                            " (" + scalelab::simt::schedule_name(schedule) + ")";
  scalelab::Rng rng(static_cast<std::uint64_t>(1000 * HS + T));
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  const std::vector<float> qkv = random_inputs<F>(BT * 3 * C, rng), dout = random_inputs<F>(BT * C, rng);
  std::vector<float> scratch(scalelab::attention_flash_scratch_elems(T));
  const dim3 grid = fm::grid(B, T, NH), block(fm::kThreadsPerBlock);
  const fm::Scales s = fm::scales<HS>();

  // Forward.
  std::vector<float> out(BT * C), lse(BT * NH);
  scalelab::attention_flash_forward(out.data(), lse.data(), scratch.data(), qkv.data(), B, T, C, NH);
  const std::vector<F> q_f = to_tensor<F>(qkv), dout_f = to_tensor<F>(dout);
  std::vector<F> out_f(out.size());
  std::vector<float> lse_got(lse.size());
  poison(out_f);
  poison(lse_got);
  const auto forward = scalelab::simt::launch(
      grid, block, fm::forward_bytes<HS, F>(),
      [&] { fm::forward_kernel<HS, F>(out_f.data(), lse_got.data(), q_f.data(), T, C, NH, s.scale_log2); }, schedule);
  check_no_bank_conflicts(label + " forward", forward);
  check_close(label + " out", widen(out_f), out, rel_tolerance<F>());
  check_close(label + " lse", lse_got, lse, kLseTolerance);

  // Backward, from the CPU's out rounded to F and its lse on both sides (as the GPU test does).
  round_to<F>(out);
  const std::vector<F> out_in = to_tensor<F>(out);
  std::vector<float> dqkv(BT * 3 * C);
  scalelab::attention_flash_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T,
                                     C, NH);
  std::vector<F> dqkv_f(dqkv.size());
  poison(dqkv_f);  // dk/dv and dq together must write every column
  // dk/dv and dq take the same arguments.
  const auto backward = [&](auto kernel, std::size_t shared_bytes) {
    return scalelab::simt::launch(
        grid, block, shared_bytes,
        [&] {
          kernel(dqkv_f.data(), dout_f.data(), q_f.data(), out_in.data(), lse.data(), T, C, NH, s.scale, s.scale_log2);
        },
        schedule);
  };
  const auto dkdv = backward(fm::dkdv_kernel<HS, F>, fm::dkdv_bytes<HS, F>());
  const auto dq = backward(fm::dq_kernel<HS, F>, fm::dq_bytes<HS, F>());
  check_no_bank_conflicts(label + " dk/dv", dkdv);
  check_no_bank_conflicts(label + " dq", dq);
  check_close(label + " dqkv", widen(dqkv_f), dqkv, rel_tolerance<F>());
}

TEMPLATE_TEST_CASE("register-resident flash attention kernels, emulated on the CPU, match the CPU twin",
                   "[simt][attention][flash]", bf16, fp16) {
  // Every shape under every order of the warps (simt::Schedule): a missing barrier between a
  // tile's use and its refill, or between the row statistics and their readers, turns into NaN
  // under an order where one warp gets ahead.
  for (const scalelab::simt::Schedule schedule : scalelab::simt::kAllSchedules) {
    check_shape<16, TestType>(1, 1, 2, schedule);
    check_shape<32, TestType>(2, 65, 2, schedule);
    check_shape<64, TestType>(1, 150, 2, schedule);
    check_shape<64, TestType>(1, 128, 3, schedule);
    check_shape<128, TestType>(1, 70, 1, schedule);
  }
  // GPT-2's layout: 12 heads of 64 in C = 768, so each head's q, k, v sit hs columns apart in
  // rows 3C apart, and two batch rows (the offsets a block computes from blockIdx.y).
  check_shape<64, TestType>(2, 70, 12, scalelab::simt::Schedule::kRoundRobin);
}

}  // namespace
