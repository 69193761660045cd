// LayerNorm on the GPU against its CPU twin (model/layers/layernorm.hpp): rows of C not a
// multiple of the 32 lanes that share a row, row counts not a multiple of the 8 rows of a block,
// and tensors off the 16-byte alignment of the kernels' packed accesses. The fused residual add +
// LayerNorm against the two kernels it replaces (bitwise) and against the CPU's two steps.
#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/device.hpp"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/residual.hpp"
#include "model/layers/layernorm.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

TEMPLATE_TEST_CASE("layernorm forward and backward match the CPU twin", "[gpu][layernorm]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  // (N rows, C channels, offset): one row; a partial block of rows with C > 3 warps' widths; many
  // rows with C just over a warp; several rows a warp (the resident backward's running sums and
  // next-row prefetch); C = 512, the resident backward's largest fp32 row; GPT-2's C (the resident
  // backward in bf16/fp16, the streamed in fp32); GPT-2 medium's and XL's, whose backward needs
  // more than 48 KB of shared memory per block (the kernel asks for it) and, at 1600, fewer warps
  // a block. C = 33 (and 100 in bf16/fp16) is not a multiple of a 16-byte pack: scalar accesses.
  // The last shape has every tensor `offset` = 1 element past a 16-byte boundary: the scalar
  // kernels on a shape that aligned pointers run with 16-byte accesses. The backward runs twice:
  // the row kernel the launcher picks, and the streamed one, which must give the same bits.
  struct Shape {
    int N, C;
    std::size_t offset;
  };
  const std::vector<Shape> shapes = {{1, 33, 0},   {7, 100, 0},   {1000 + 3, 33, 0}, {8192 + 5, 256, 0}, {40, 512, 0},
                                     {65, 768, 0}, {65, 1024, 0}, {300, 1600, 0},    {65, 768, 1}};
  for (auto [N, C, offset] : shapes) {
    const std::string label = std::string("layernorm ") + dtype_name<F>() + " N=" + std::to_string(N) +
                              " C=" + std::to_string(C) + (offset ? " off 16-byte alignment" : "");
    Rng rng(seed_for(label));
    const std::size_t NC = static_cast<std::size_t>(N) * C;
    const std::vector<float> inp = random_inputs<F>(NC, rng, 0.05f, 3.0f);
    const std::vector<float> weight = random_inputs<F>(C, rng), bias = random_inputs<F>(C, rng);
    const std::vector<float> dout = random_inputs<F>(NC, rng);
    // Backward adds into these (+=), so they start non-zero.
    std::vector<float> dinp = random_inputs<F>(NC, rng), dweight = random_inputs<F>(C, rng);
    std::vector<float> dbias = random_inputs<F>(C, rng);

    DeviceBuffer<F> d_inp = upload<F>(inp, offset), d_weight = upload<F>(weight, offset);
    DeviceBuffer<F> d_bias = upload<F>(bias, offset), d_dout = upload<F>(dout, offset);
    DeviceBuffer<F> d_dinp = upload<F>(dinp, offset), d_dweight = upload<F>(dweight, offset);
    DeviceBuffer<F> d_dbias = upload<F>(dbias, offset);
    DeviceBuffer<F> s_dinp = upload<F>(dinp, offset), s_dweight = upload<F>(dweight, offset);
    DeviceBuffer<F> s_dbias = upload<F>(dbias, offset);
    DeviceBuffer<F> d_out(offset + NC, MemCategory::kActivations, nullptr);
    DeviceBuffer<float> d_mean(N, MemCategory::kActivations, nullptr), d_rstd(N, MemCategory::kActivations, nullptr);
    poison(d_out);
    poison(d_mean);
    poison(d_rstd);
    cuda::layernorm_forward(d_out.data() + offset, d_mean.data(), d_rstd.data(), d_inp.data() + offset,
                            d_weight.data() + offset, d_bias.data() + offset, N, C, stream.get());
    DeviceBuffer<float> d_scratch(cuda::layernorm_backward_scratch_elements(C), MemCategory::kWorkspace, nullptr);
    poison(d_scratch);  // scratch must be written before it is read
    cuda::layernorm_backward(d_dinp.data() + offset, d_dweight.data() + offset, d_dbias.data() + offset,
                             d_scratch.data(), d_dout.data() + offset, d_inp.data() + offset, d_weight.data() + offset,
                             d_mean.data(), d_rstd.data(), N, C, stream.get());
    cuda::layernorm_backward(s_dinp.data() + offset, s_dweight.data() + offset, s_dbias.data() + offset,
                             d_scratch.data(), d_dout.data() + offset, d_inp.data() + offset, d_weight.data() + offset,
                             d_mean.data(), d_rstd.data(), N, C, stream.get(),
                             cuda::LayerNormBackwardKernel::kStreamed);
    stream.synchronize();

    std::vector<float> out(NC), mean(N), rstd(N);
    scalelab::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);
    scalelab::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                                 mean.data(), rstd.data(), N, C);
    check_close(label + " out", download(d_out, offset), out, rel_tolerance<F>());
    // The statistics are fp32 whatever F is, computed from the same (rounded) inputs.
    check_close(label + " mean", download(d_mean), mean, rel_tolerance<float>());
    check_close(label + " rstd", download(d_rstd), rstd, rel_tolerance<float>());
    check_close(label + " dinp", download(d_dinp, offset), dinp, rel_tolerance<F>());
    check_close(label + " dweight", download(d_dweight, offset), dweight, rel_tolerance<F>());
    check_close(label + " dbias", download(d_dbias, offset), dbias, rel_tolerance<F>());
    check_bitwise(label + " dinp, streamed vs picked kernel", download(s_dinp, offset), download(d_dinp, offset));
    check_bitwise(label + " dweight, streamed vs picked kernel", download(s_dweight, offset),
                  download(d_dweight, offset));
    check_bitwise(label + " dbias, streamed vs picked kernel", download(s_dbias, offset), download(d_dbias, offset));
  }
}

TEMPLATE_TEST_CASE("residual + layernorm fused equals the residual add then the layernorm", "[gpu][layernorm]", float,
                   bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  struct Shape {
    int N, C;
    std::size_t offset;
    bool in_place;  // the sum written over a, as the ZeRO model's blocks may
  };
  const std::vector<Shape> shapes = {
      {1, 33, 0, false}, {7, 100, 0, false}, {65, 768, 0, false}, {65, 768, 1, false}, {130, 768, 0, true}};
  for (auto [N, C, offset, in_place] : shapes) {
    const std::string label = std::string("residual+layernorm ") + dtype_name<F>() + " N=" + std::to_string(N) +
                              " C=" + std::to_string(C) + (offset ? " off 16-byte alignment" : "") +
                              (in_place ? " in place" : "");
    Rng rng(seed_for(label));
    const std::size_t NC = static_cast<std::size_t>(N) * C;
    const std::vector<float> a = random_inputs<F>(NC, rng, -1.5f, 1.5f), b = random_inputs<F>(NC, rng, 0.05f, 1.5f);
    const std::vector<float> weight = random_inputs<F>(C, rng), bias = random_inputs<F>(C, rng);
    DeviceBuffer<F> d_a = upload<F>(a, offset), d_b = upload<F>(b, offset);
    DeviceBuffer<F> d_weight = upload<F>(weight, offset), d_bias = upload<F>(bias, offset);

    // The two kernels the fused one replaces.
    DeviceBuffer<F> d_res2(offset + NC, MemCategory::kActivations, nullptr),
        d_out2(offset + NC, MemCategory::kActivations, nullptr);
    DeviceBuffer<float> d_mean2(N, MemCategory::kActivations, nullptr), d_rstd2(N, MemCategory::kActivations, nullptr);
    cuda::residual_forward(d_res2.data() + offset, d_a.data() + offset, d_b.data() + offset, NC, stream.get());
    cuda::layernorm_forward(d_out2.data() + offset, d_mean2.data(), d_rstd2.data(), d_res2.data() + offset,
                            d_weight.data() + offset, d_bias.data() + offset, N, C, stream.get());
    // The fused one (in place: the sum over a copy of a).
    DeviceBuffer<F> d_a_copy = upload<F>(a, offset);
    DeviceBuffer<F> d_res(offset + NC, MemCategory::kActivations, nullptr),
        d_out(offset + NC, MemCategory::kActivations, nullptr);
    DeviceBuffer<float> d_mean(N, MemCategory::kActivations, nullptr), d_rstd(N, MemCategory::kActivations, nullptr);
    poison(d_res);
    poison(d_out);
    poison(d_mean);
    poison(d_rstd);
    F* const residual = in_place ? d_a_copy.data() + offset : d_res.data() + offset;
    cuda::residual_layernorm_forward(residual, d_out.data() + offset, d_mean.data(), d_rstd.data(),
                                     in_place ? residual : d_a.data() + offset, d_b.data() + offset,
                                     d_weight.data() + offset, d_bias.data() + offset, N, C, stream.get());
    stream.synchronize();
    const std::vector<float> got_res = download(in_place ? d_a_copy : d_res, offset);
    check_bitwise(label + " residual", got_res, download(d_res2, offset));
    check_bitwise(label + " out", download(d_out, offset), download(d_out2, offset));
    check_bitwise(label + " mean", download(d_mean), download(d_mean2));
    check_bitwise(label + " rstd", download(d_rstd), download(d_rstd2));

    // And the CPU's two steps: the sum rounded to F, then its LayerNorm.
    std::vector<float> res(NC), out(NC), mean(N), rstd(N);
    for (std::size_t i = 0; i < NC; ++i) res[i] = a[i] + b[i];
    round_to<F>(res);
    scalelab::layernorm_forward(out.data(), mean.data(), rstd.data(), res.data(), weight.data(), bias.data(), N, C);
    check_close(label + " residual vs CPU", got_res, res, rel_tolerance<F>());
    check_close(label + " out vs CPU", download(d_out, offset), out, rel_tolerance<F>());
  }
}

}  // namespace
