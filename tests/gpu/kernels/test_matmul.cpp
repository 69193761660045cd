// The linear layer on the GPU (cuBLAS, TF32 off) against its CPU twin (model/layers/matmul.hpp,
// OpenBLAS), with and without a bias, at shapes that fit no tile size, with contiguous output rows
// and with rows further apart (the LM head's padded vocabulary); and the MLP's layers with their
// GELU (matmul_gelu_forward/backward: one cuBLASLt product with an epilogue in bf16/fp16) against
// the CPU's matmul then gelu.
#include <catch2/catch.hpp>

#include <array>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/blas.hpp"
#include "kernels/core/device.hpp"
#include "kernels/layers/matmul.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/matmul.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

TEMPLATE_TEST_CASE("matmul forward and backward match the CPU twin", "[gpu][matmul]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  cuda::Blas blas(stream.get(), nullptr);  // allow_tf32 = false: fp32 stays fp32
  REQUIRE_FALSE(blas.allow_tf32());
  // (N, C, OC): one row; odd everything; many rows and OC = 257 (bias columns past a 32-wide
  // strip of the bias gradient's scalar path); GPT-2's qkv layer; many rows in a last partial
  // chunk of the bias gradient's first pass, with 16-byte loads (OC = 768, N = 4099).
  const std::vector<std::array<int, 3>> shapes = {
      {1, 33, 65}, {7, 100, 33}, {1000 + 3, 100, 257}, {64, 768, 2304}, {4096 + 3, 64, 768}};
  for (const auto& [N, C, OC] : shapes) {
    for (bool with_bias : {true, false}) {
      // Contiguous rows of out and dout (ld = OC), then rows further apart (the LM head's padded
      // logits, kernels/model/gpu_gpt.hpp) with NaN in dout's padding and out's: the padding is
      // neither read (NaN would reach dinp, dweight and dbias) nor written (out's stays NaN).
      // With OC not a multiple of 8 (65, 33, 257) the aligned rows also make matmul split the
      // products at OC rounded down to 8 (matmul.cu). Not compared bitwise with the contiguous
      // call: the stride and the split change cuBLAS's kernels and so the order of the sums.
      for (bool padded : {false, true}) {
        const int ld = padded ? padded_stride(OC) : OC;
        const std::string label = std::string("matmul ") + dtype_name<F>() + " N=" + std::to_string(N) +
                                  " C=" + std::to_string(C) + " OC=" + std::to_string(OC) +
                                  (with_bias ? " with bias" : " without bias") +
                                  (padded ? " ld=" + std::to_string(ld) : std::string());
        Rng rng(seed_for(label));
        const std::size_t NC = static_cast<std::size_t>(N) * C, NOC = static_cast<std::size_t>(N) * OC;
        const std::size_t OCC = static_cast<std::size_t>(OC) * C;
        const std::vector<float> inp = random_inputs<F>(NC, rng), weight = random_inputs<F>(OCC, rng);
        const std::vector<float> bias = random_inputs<F>(OC, rng), dout = random_inputs<F>(NOC, rng);
        std::vector<float> dweight = random_inputs<F>(OCC, rng), dbias = random_inputs<F>(OC, rng);  // +=

        DeviceBuffer<F> d_inp = upload<F>(inp), d_weight = upload<F>(weight), d_bias = upload<F>(bias);
        DeviceBuffer<F> d_dout = upload<F>(padded ? pad_rows(dout, N, OC, ld) : dout);
        DeviceBuffer<F> d_dweight = upload<F>(dweight), d_dbias = upload<F>(dbias);
        DeviceBuffer<F> d_out(static_cast<std::size_t>(N) * ld, MemCategory::kActivations, nullptr);
        DeviceBuffer<F> d_dinp(NC, MemCategory::kGrads, nullptr);
        // NaN in out also proves that without a bias the product does not read out (beta = 0).
        poison(d_out);
        poison(d_dinp);
        F* const gpu_bias = with_bias ? d_bias.data() : nullptr;
        F* const gpu_dbias = with_bias ? d_dbias.data() : nullptr;
        if (padded) {
          cuda::matmul_forward(d_out.data(), d_inp.data(), d_weight.data(), gpu_bias, N, C, OC, ld, blas);
          cuda::matmul_backward(d_dinp.data(), d_dweight.data(), gpu_dbias, d_dout.data(), d_inp.data(),
                                d_weight.data(), N, C, OC, ld, blas);
        } else {  // the call every layer but the head makes
          cuda::matmul_forward(d_out.data(), d_inp.data(), d_weight.data(), gpu_bias, N, C, OC, blas);
          cuda::matmul_backward(d_dinp.data(), d_dweight.data(), gpu_dbias, d_dout.data(), d_inp.data(),
                                d_weight.data(), N, C, OC, blas);
        }
        stream.synchronize();

        std::vector<float> out(NOC), dinp(NC);
        scalelab::matmul_forward(out.data(), inp.data(), weight.data(), with_bias ? bias.data() : nullptr, N, C, OC);
        scalelab::matmul_backward(dinp.data(), dweight.data(), with_bias ? dbias.data() : nullptr, dout.data(),
                                  inp.data(), weight.data(), N, C, OC);
        const std::vector<float> got_out = download(d_out);
        check_close(label + " out", unpad_rows(got_out, N, OC, ld), out, rel_tolerance<F>());
        if (padded) check_padding_unwritten(label + " out", got_out, N, OC, ld);
        check_close(label + " dinp", download(d_dinp), dinp, rel_tolerance<F>());
        check_close(label + " dweight", download(d_dweight), dweight, rel_tolerance<F>());
        // Without a bias, dbias must be left exactly as it was.
        check_close(label + " dbias", download(d_dbias), dbias, with_bias ? rel_tolerance<F>() : 0.0);
      }
    }
  }
}

TEMPLATE_TEST_CASE("matmul with its GELU matches the CPU's matmul then gelu", "[gpu][matmul][gelu]", float, bf16,
                   fp16) {
  using F = TestType;
  cuda::Stream stream;
  cuda::Blas blas(stream.get(), nullptr);
  // (N, C, OC): OC a multiple of 8 (fused in bf16/fp16), OC = 36 (not: cuBLASLt's aux rows must
  // be 8-aligned, so the unfused kernels run), GPT-2's fc (C -> 4C). Inputs in [-0.5, 0.5], so
  // the pre-activations spread over GELU's curved part, negative and positive.
  const std::vector<std::array<int, 3>> shapes = {{7, 100, 40}, {5, 33, 36}, {64, 768, 3072}};
  for (const auto& [N, C, OC] : shapes) {
    const std::string label = std::string("matmul+gelu ") + dtype_name<F>() + " N=" + std::to_string(N) +
                              " C=" + std::to_string(C) + " OC=" + std::to_string(OC);
    Rng rng(seed_for(label));
    const std::size_t NC = static_cast<std::size_t>(N) * C, NOC = static_cast<std::size_t>(N) * OC;
    const std::size_t OCC = static_cast<std::size_t>(OC) * C;
    const std::vector<float> inp = random_inputs<F>(NC, rng, -0.5f, 0.5f);
    const std::vector<float> weight = random_inputs<F>(OCC, rng, -0.5f, 0.5f);
    const std::vector<float> bias = random_inputs<F>(OC, rng, -0.5f, 0.5f);

    // Forward, the fc layer: pre = inp weight^T + bias, out = gelu(pre).
    std::vector<float> pre(NOC), out(NOC);
    scalelab::matmul_forward(pre.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
    scalelab::gelu_forward(out.data(), pre.data(), NOC);
    DeviceBuffer<F> d_inp = upload<F>(inp), d_weight = upload<F>(weight), d_bias = upload<F>(bias);
    DeviceBuffer<F> d_out(NOC, MemCategory::kActivations, nullptr), d_pre(NOC, MemCategory::kActivations, nullptr);
    poison(d_out);
    poison(d_pre);
    cuda::matmul_gelu_forward(d_out.data(), d_pre.data(), d_inp.data(), d_weight.data(), d_bias.data(), N, C, OC, blas);
    stream.synchronize();
    check_close(label + " pre", download(d_pre), pre, rel_tolerance<F>());
    check_close(label + " out", download(d_out), out, rel_tolerance<F>());

    // Backward, the projection after it, read the other way: a layer OC -> C whose input is
    // gelu(pre) (N,OC). dpre = gelu'(pre) * (dout @ weight2), dweight2 += dout^T gelu(pre),
    // dbias2 += column sums of dout. Both sides start from the same rounded pre and gelu(pre).
    round_to<F>(pre);
    std::vector<float> act(NOC);
    scalelab::gelu_forward(act.data(), pre.data(), NOC);
    round_to<F>(act);
    const std::vector<float> weight2 = random_inputs<F>(OCC, rng, -0.5f, 0.5f);                   // (C, OC)
    const std::vector<float> dout = random_inputs<F>(NC, rng, -0.5f, 0.5f);                       // (N, C)
    std::vector<float> dweight2 = random_inputs<F>(OCC, rng), dbias2 = random_inputs<F>(C, rng);  // +=
    DeviceBuffer<F> d_pre_in = upload<F>(pre), d_act = upload<F>(act), d_weight2 = upload<F>(weight2);
    DeviceBuffer<F> d_dout = upload<F>(dout), d_dweight2 = upload<F>(dweight2), d_dbias2 = upload<F>(dbias2);
    DeviceBuffer<F> d_dpre(NOC, MemCategory::kGrads, nullptr);
    poison(d_dpre);
    cuda::matmul_gelu_backward(d_dpre.data(), d_dweight2.data(), d_dbias2.data(), d_dout.data(), d_act.data(),
                               d_weight2.data(), d_pre_in.data(), N, OC, C, blas);
    stream.synchronize();
    std::vector<float> dact(NOC), dpre(NOC);
    scalelab::matmul_backward(dact.data(), dweight2.data(), dbias2.data(), dout.data(), act.data(), weight2.data(), N,
                              OC, C);
    scalelab::gelu_backward(dpre.data(), dact.data(), pre.data(), NOC);
    check_close(label + " dpre", download(d_dpre), dpre, rel_tolerance<F>());
    check_close(label + " dweight", download(d_dweight2), dweight2, rel_tolerance<F>());
    check_close(label + " dbias", download(d_dbias2), dbias2, rel_tolerance<F>());
  }
}

// The fused forms only pay where cuBLASLt takes them; gemm_epilogue falls back silently (false)
// where it does not, which would leave the step as slow as before with every test above passing.
// At GPT-2's shapes in bf16 (contiguous buffers, as the model's are) it must take all three.
TEST_CASE("cuBLASLt fuses the bias and the GELU at GPT-2's shapes", "[gpu][matmul][gelu]") {
  using F = bf16;
  cuda::Stream stream;
  cuda::Blas blas(stream.get(), nullptr);
  const int N = 1024, C = 768;
  const std::size_t wide = static_cast<std::size_t>(N) * 4 * C;
  DeviceBuffer<F> inp(static_cast<std::size_t>(N) * C, MemCategory::kActivations, nullptr);
  DeviceBuffer<F> weight(static_cast<std::size_t>(4) * C * C, MemCategory::kParams, nullptr);
  DeviceBuffer<F> bias(4 * C, MemCategory::kParams, nullptr);
  DeviceBuffer<F> out(wide, MemCategory::kActivations, nullptr), pre(wide, MemCategory::kActivations, nullptr);
  const cuda::EpilogueArgs<F> add_bias{.kind = cuda::Epilogue::kBias, .bias = bias.data()};
  const cuda::EpilogueArgs<F> gelu{
      .kind = cuda::Epilogue::kGeluBias, .bias = bias.data(), .aux_out = pre.data(), .ld_aux = 4 * C};
  const cuda::EpilogueArgs<F> dgelu{.kind = cuda::Epilogue::kDGelu, .aux_in = pre.data(), .ld_aux = 4 * C};
  // qkv's forward (C -> 3C), fc's forward (C -> 4C) with GELU, fc projection's dinp through GELU.
  CHECK(cuda::gemm_epilogue<F>(blas, false, true, N, 3 * C, C, inp.data(), C, weight.data(), C, out.data(), 3 * C,
                               add_bias));
  CHECK(
      cuda::gemm_epilogue<F>(blas, false, true, N, 4 * C, C, inp.data(), C, weight.data(), C, out.data(), 4 * C, gelu));
  CHECK(cuda::gemm_epilogue<F>(blas, false, false, N, 4 * C, C, inp.data(), C, weight.data(), 4 * C, out.data(), 4 * C,
                               dgelu));
  stream.synchronize();
}

}  // namespace
