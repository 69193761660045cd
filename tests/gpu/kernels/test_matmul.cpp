// The linear layer on the GPU (cuBLAS, TF32 off) against its CPU twin (model/layers/matmul.hpp,
// OpenBLAS), with and without a bias, at shapes that fit no tile size, with contiguous output rows
// and with rows further apart (the LM head's padded vocabulary).
#include <catch2/catch.hpp>

#include <array>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/blas.hpp"
#include "kernels/core/device.hpp"
#include "kernels/layers/matmul.hpp"
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
  // block of bias_backward); GPT-2's attention projection.
  const std::vector<std::array<int, 3>> shapes = {{1, 33, 65}, {7, 100, 33}, {1000 + 3, 100, 257}, {64, 768, 2304}};
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

}  // namespace
