// The token + position embedding on the GPU against its CPU twin (model/layers/encoder.hpp).
// Small vocabularies make every token appear at several positions, so backward's atomicAdds
// into one row of dwte really collide; maxT > T checks that rows of dwpe past T stay untouched.
#include <catch2/catch.hpp>

#include <array>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/device.hpp"
#include "kernels/layers/encoder.hpp"
#include "model/layers/encoder.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

TEMPLATE_TEST_CASE("encoder forward and backward match the CPU twin", "[gpu][encoder]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  // (B, T, C, V, maxT): 14 positions over 5 tokens; T = 33 over 7 tokens; 258 positions over
  // 257 tokens (few repeats, most rows of dwte untouched); GPT-2's C.
  const std::vector<std::array<int, 5>> shapes = {
      {2, 7, 33, 5, 9}, {3, 33, 100, 7, 40}, {2, 129, 36, 257, 129}, {4, 65, 768, 11, 1024}};
  for (const auto& [B, T, C, V, maxT] : shapes) {
    const std::string label = std::string("encoder ") + dtype_name<F>() + " B=" + std::to_string(B) +
                              " T=" + std::to_string(T) + " C=" + std::to_string(C) + " V=" + std::to_string(V);
    Rng rng(seed_for(label));
    const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
    const std::vector<int> tokens = random_ints(BT, rng, V);
    const std::vector<float> wte = random_inputs<F>(static_cast<std::size_t>(V) * C, rng);
    const std::vector<float> wpe = random_inputs<F>(static_cast<std::size_t>(maxT) * C, rng);
    const std::vector<float> dout = random_inputs<F>(BTC, rng);
    std::vector<float> dwte = random_inputs<F>(wte.size(), rng), dwpe = random_inputs<F>(wpe.size(), rng);  // +=

    DeviceBuffer<int> d_tokens = cuda::to_device(tokens, MemCategory::kActivations, nullptr);
    DeviceBuffer<F> d_wte = upload<F>(wte), d_wpe = upload<F>(wpe), d_dout = upload<F>(dout);
    DeviceBuffer<F> d_dwte = upload<F>(dwte), d_dwpe = upload<F>(dwpe);
    DeviceBuffer<F> d_out(BTC, MemCategory::kActivations, nullptr);
    poison(d_out);
    cuda::encoder_forward(d_out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), B, T, C, stream.get());
    cuda::encoder_backward(d_dwte.data(), d_dwpe.data(), d_dout.data(), d_tokens.data(), B, T, C, stream.get());
    stream.synchronize();

    std::vector<float> out(BTC);
    scalelab::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    scalelab::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
    check_close(label + " out", download(d_out), out, rel_tolerance<F>());
    check_close(label + " dwte", download(d_dwte), dwte, rel_tolerance<F>());
    check_close(label + " dwpe", download(d_dwpe), dwpe, rel_tolerance<F>());
    // Rows of dwpe at positions T.. get no gradient: they must still hold their old values.
    const std::vector<float> gpu_dwpe = download(d_dwpe);
    const std::size_t tail = static_cast<std::size_t>(T) * C;
    check_close(label + " dwpe rows past T", std::vector<float>(gpu_dwpe.begin() + tail, gpu_dwpe.end()),
                std::vector<float>(dwpe.begin() + tail, dwpe.end()), 0.0);
  }
}

}  // namespace
