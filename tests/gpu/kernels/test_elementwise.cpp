// GELU and the residual add on the GPU against their CPU twins (model/layers/gelu.hpp,
// residual.hpp), at sizes around and between the 256-thread blocks and the 16-byte packs, in
// fp32, bf16 and fp16, with the tensors on 16-byte boundaries and off them.
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

// One element, less than a bf16 pack, just over a warp, not a multiple of the 256-thread block
// nor of a pack, and a million and 3: 245 (fp32) or 123 (bf16/fp16) blocks whose threads each
// take 4 packs, some of them fewer (the last round of the unrolled loop not full), and a tail.
const std::vector<std::size_t> kSizes = {1, 7, 33, 1000 + 3, 1000000 + 3};

// Where the tensors start, in elements past a 16-byte boundary: inputs at `in`, outputs at
// `out`. At the same offset the kernel runs a scalar head up to the next boundary, then 16-byte
// packs; at different offsets no pack is aligned in both, and every value is scalar.
struct Layout {
  std::size_t in, out;
  const char* name;
};
const std::vector<Layout> kLayouts = {{0, 0, "aligned"},
                                      {1, 1, "one element off alignment"},
                                      {1, 0, "inputs and outputs at different offsets"}};

std::string label_for(const char* what, const char* dtype, std::size_t N, const Layout& at) {
  return std::string(what) + " " + dtype + " N=" + std::to_string(N) + " " + at.name;
}

TEMPLATE_TEST_CASE("gelu forward and backward match the CPU twin", "[gpu][gelu]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  for (std::size_t N : kSizes) {
    for (const Layout& at : kLayouts) {
      const std::string label = label_for("gelu", dtype_name<F>(), N, at);
      Rng rng(seed_for(label));
      const std::vector<float> inp = random_inputs<F>(N, rng, 0.05f, 4.0f);  // GELU bends within |x| < 4
      const std::vector<float> dout = random_inputs<F>(N, rng);

      std::vector<float> out_ref(N), dinp_ref(N);
      scalelab::gelu_forward(out_ref.data(), inp.data(), N);
      scalelab::gelu_backward(dinp_ref.data(), dout.data(), inp.data(), N);

      DeviceBuffer<F> d_inp = upload<F>(inp, at.in), d_dout = upload<F>(dout, at.in);
      DeviceBuffer<F> d_out(at.out + N, scalelab::MemCategory::kActivations, nullptr);
      DeviceBuffer<F> d_dinp(at.out + N, scalelab::MemCategory::kGrads, nullptr);
      poison(d_out);
      poison(d_dinp);
      const F* inp_at = d_inp.data() + at.in;
      F* dout_at = d_dout.data() + at.in;
      cuda::gelu_forward(d_out.data() + at.out, inp_at, N, stream.get());
      cuda::gelu_backward(d_dinp.data() + at.out, dout_at, inp_at, N, stream.get());
      // The header allows dinp to alias dout: the model's backward does it in place.
      cuda::gelu_backward(dout_at, dout_at, inp_at, N, stream.get());
      stream.synchronize();
      check_close(label + " out", download(d_out, at.out), out_ref, rel_tolerance<F>());
      check_close(label + " dinp", download(d_dinp, at.out), dinp_ref, rel_tolerance<F>());
      check_close(label + " dinp in place of dout", download(d_dout, at.in), dinp_ref, rel_tolerance<F>());
    }
  }
}

TEMPLATE_TEST_CASE("residual forward and backward match the CPU twin", "[gpu][residual]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  for (std::size_t N : kSizes) {
    for (const Layout& at : kLayouts) {
      const std::string label = label_for("residual", dtype_name<F>(), N, at);
      Rng rng(seed_for(label));
      const std::vector<float> a = random_inputs<F>(N, rng), b = random_inputs<F>(N, rng);
      const std::vector<float> dout = random_inputs<F>(N, rng);
      std::vector<float> da = random_inputs<F>(N, rng), db = random_inputs<F>(N, rng);  // backward adds to these

      // The outputs out, da and db at `out`; a, b and dout at `in`.
      DeviceBuffer<F> d_a = upload<F>(a, at.in), d_b = upload<F>(b, at.in), d_dout = upload<F>(dout, at.in);
      DeviceBuffer<F> d_da = upload<F>(da, at.out), d_db = upload<F>(db, at.out);
      DeviceBuffer<F> d_out(at.out + N, scalelab::MemCategory::kActivations, nullptr);
      poison(d_out);
      cuda::residual_forward(d_out.data() + at.out, d_a.data() + at.in, d_b.data() + at.in, N, stream.get());
      cuda::residual_backward(d_da.data() + at.out, d_db.data() + at.out, d_dout.data() + at.in, N, stream.get());
      stream.synchronize();

      std::vector<float> out_ref(N);
      scalelab::residual_forward(out_ref.data(), a.data(), b.data(), N);
      scalelab::residual_backward(da.data(), db.data(), dout.data(), N);
      check_close(label + " out", download(d_out, at.out), out_ref, rel_tolerance<F>());
      check_close(label + " da", download(d_da, at.out), da, rel_tolerance<F>());
      check_close(label + " db", download(d_db, at.out), db, rel_tolerance<F>());
    }
  }
}

}  // namespace
