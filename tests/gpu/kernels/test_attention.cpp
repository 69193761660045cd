// Causal attention on the GPU (cuBLAS strided-batched products over the heads, softmax kernels
// of one warp per row) against its CPU twin (model/layers/attention.hpp), at sequence lengths
// that are a multiple of nothing: of neither the 32 lanes of a softmax row, nor the 8 rows of a
// block, nor the CPU's 64-query blocks.
#include <catch2/catch.hpp>

#include <array>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/blas.hpp"
#include "kernels/core/device.hpp"
#include "kernels/layers/attention.hpp"
#include "model/layers/attention.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

TEMPLATE_TEST_CASE("attention forward and backward match the CPU twin", "[gpu][attention]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  cuda::Blas blas(stream.get(), nullptr);  // TF32 off
  // (B, T, C, NH): a single position; T = 7 with head size 16; T = 33 with an odd head size 9;
  // T = 65, one past the CPU's query block; GPT-2's 12 heads of 64 at T = 129.
  const std::vector<std::array<int, 4>> shapes = {
      {1, 1, 8, 2}, {2, 7, 48, 3}, {2, 33, 36, 4}, {3, 65, 96, 4}, {1, 129, 768, 12}};
  for (const auto& [B, T, C, NH] : shapes) {
    const std::string label = std::string("attention ") + dtype_name<F>() + " B=" + std::to_string(B) +
                              " T=" + std::to_string(T) + " C=" + std::to_string(C) + " NH=" + std::to_string(NH);
    Rng rng(seed_for(label));
    const std::size_t BT = static_cast<std::size_t>(B) * T;
    const std::size_t n_qkv = BT * 3 * C, n_out = BT * C, n_att = BT * NH * T;
    const std::vector<float> qkv = random_inputs<F>(n_qkv, rng), dout = random_inputs<F>(n_out, rng);

    // Forward.
    std::vector<float> out(n_out), att(n_att);
    scalelab::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    DeviceBuffer<F> d_qkv = upload<F>(qkv), d_dout = upload<F>(dout);
    DeviceBuffer<F> d_out(n_out, MemCategory::kActivations, nullptr), d_att(n_att, MemCategory::kActivations, nullptr);
    poison(d_out);
    poison(d_att);  // the zeros above the diagonal must be written too
    cuda::attention_forward(d_out.data(), d_att.data(), d_qkv.data(), B, T, C, NH, blas);
    stream.synchronize();
    check_close(label + " out", download(d_out), out, rel_tolerance<F>());
    check_close(label + " att", download(d_att), att, rel_tolerance<F>());

    // Backward, from the CPU's probabilities rounded to F on both sides, so that it is checked
    // on its own inputs rather than on the forward's rounding.
    round_to<F>(att);
    DeviceBuffer<F> d_att_in = upload<F>(att);
    DeviceBuffer<F> d_dqkv(n_qkv, MemCategory::kGrads, nullptr);
    DeviceBuffer<F> d_scratch(cuda::attention_scratch_elements(T, NH), MemCategory::kWorkspace, nullptr);
    poison(d_dqkv);
    poison(d_scratch);  // scratch must be written before it is read
    cuda::attention_backward(d_dqkv.data(), d_scratch.data(), d_dout.data(), d_qkv.data(), d_att_in.data(), B, T, C, NH,
                             blas);
    stream.synchronize();
    std::vector<float> dqkv(n_qkv), scratch(static_cast<std::size_t>(T) * T);
    scalelab::attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
    check_close(label + " dqkv", download(d_dqkv), dqkv, rel_tolerance<F>());
  }
}

}  // namespace
