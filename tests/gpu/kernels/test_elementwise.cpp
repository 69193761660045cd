// GELU and the residual add on the GPU against their CPU twins (model/layers/gelu.hpp,
// residual.hpp), at sizes around and between the 256-thread blocks, in fp32, bf16 and fp16.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/device.hpp"
#include "kernels/layers/gelu.hpp"
#include "kernels/layers/residual.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/residual.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;

// One element, less than a warp, just over a warp, not a multiple of the 256-thread block, and
// over a million (4097 blocks, the last one holding 3 elements).
const std::vector<std::size_t> kSizes = {1, 7, 33, 1000 + 3, (1u << 20) + 3};

TEMPLATE_TEST_CASE("gelu forward and backward match the CPU twin", "[gpu][gelu]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  for (std::size_t N : kSizes) {
    const std::string label = std::string("gelu ") + dtype_name<F>() + " N=" + std::to_string(N);
    Rng rng(seed_for(label));
    const std::vector<float> inp = random_inputs<F>(N, rng, 0.05f, 4.0f);  // GELU bends within |x| < 4
    const std::vector<float> dout = random_inputs<F>(N, rng);

    std::vector<float> out_ref(N), dinp_ref(N);
    scalelab::gelu_forward(out_ref.data(), inp.data(), N);
    scalelab::gelu_backward(dinp_ref.data(), dout.data(), inp.data(), N);

    DeviceBuffer<F> d_inp = upload<F>(inp), d_dout = upload<F>(dout);
    DeviceBuffer<F> d_out(N, scalelab::MemCategory::kActivations, nullptr);
    DeviceBuffer<F> d_dinp(N, scalelab::MemCategory::kGrads, nullptr);
    poison(d_out);
    poison(d_dinp);
    cuda::gelu_forward(d_out.data(), d_inp.data(), N, stream.get());
    cuda::gelu_backward(d_dinp.data(), d_dout.data(), d_inp.data(), N, stream.get());
    // The header allows dinp to alias dout: the model's backward does it in place.
    cuda::gelu_backward(d_dout.data(), d_dout.data(), d_inp.data(), N, stream.get());
    stream.synchronize();
    check_close(label + " out", download(d_out), out_ref, rel_tolerance<F>());
    check_close(label + " dinp", download(d_dinp), dinp_ref, rel_tolerance<F>());
    check_close(label + " dinp in place of dout", download(d_dout), dinp_ref, rel_tolerance<F>());
  }
}

TEMPLATE_TEST_CASE("residual forward and backward match the CPU twin", "[gpu][residual]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  for (std::size_t N : kSizes) {
    const std::string label = std::string("residual ") + dtype_name<F>() + " N=" + std::to_string(N);
    Rng rng(seed_for(label));
    const std::vector<float> a = random_inputs<F>(N, rng), b = random_inputs<F>(N, rng);
    const std::vector<float> dout = random_inputs<F>(N, rng);
    std::vector<float> da = random_inputs<F>(N, rng), db = random_inputs<F>(N, rng);  // backward adds to these

    DeviceBuffer<F> d_a = upload<F>(a), d_b = upload<F>(b), d_dout = upload<F>(dout);
    DeviceBuffer<F> d_da = upload<F>(da), d_db = upload<F>(db);
    DeviceBuffer<F> d_out(N, scalelab::MemCategory::kActivations, nullptr);
    poison(d_out);
    cuda::residual_forward(d_out.data(), d_a.data(), d_b.data(), N, stream.get());
    cuda::residual_backward(d_da.data(), d_db.data(), d_dout.data(), N, stream.get());
    stream.synchronize();

    std::vector<float> out_ref(N);
    scalelab::residual_forward(out_ref.data(), a.data(), b.data(), N);
    scalelab::residual_backward(da.data(), db.data(), dout.data(), N);
    check_close(label + " out", download(d_out), out_ref, rel_tolerance<F>());
    check_close(label + " da", download(d_da), da, rel_tolerance<F>());
    check_close(label + " db", download(d_db), db, rel_tolerance<F>());
  }
}

}  // namespace
