// AdamW on the GPU against AdamW::update_range (optim/adamw.hpp): the header of
// kernels/optim/adamw.hpp promises the same bits, so these comparisons are bitwise, over three
// steps (bias corrections change every step) with a learning rate that changes too.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/device.hpp"
#include "kernels/optim/adamw.hpp"
#include "optim/adamw.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

const std::vector<std::size_t> kSizes = {1, 7, 1000 + 3, (1u << 20) + 3};
const double kLearningRates[] = {1e-3, 6e-4, 3e-4};  // one per step

scalelab::AdamWConfig test_config() {
  scalelab::AdamWConfig config;
  config.weight_decay = 0.1;  // GPT-2's, larger than the default so that decay matters
  return config;
}

TEST_CASE("adamw_update (fp32) is bitwise equal to the CPU's update_range", "[gpu][adamw]") {
  cuda::Stream stream;
  for (std::size_t n : kSizes) {
    const std::string label = "adamw fp32 n=" + std::to_string(n);
    Rng rng(seed_for(label));
    scalelab::MemoryTracker tracker;
    scalelab::AdamW cpu(n, test_config(), &tracker);
    std::vector<float> params = random_values(n, rng);
    DeviceBuffer<float> d_params = upload<float>(params);
    DeviceBuffer<float> d_m(n, MemCategory::kOptimizer, nullptr),
        d_v(n, MemCategory::kOptimizer, nullptr);  // 0, as the CPU's
    for (double lr : kLearningRates) {
      const std::vector<float> grads = random_values(n, rng, 1e-4f, 2.0f);
      DeviceBuffer<float> d_grads = upload<float>(grads);
      cpu.begin_step();
      cpu.update_range(params.data(), grads.data(), 0, n, lr);
      const cuda::AdamWScalars k = cuda::adamw_scalars(cpu.config(), cpu.step_count(), lr);
      cuda::adamw_update(d_params.data(), d_grads.data(), d_m.data(), d_v.data(), n, k, stream.get());
      stream.synchronize();
      const std::string at = label + " step " + std::to_string(cpu.step_count());
      check_bitwise(at + " params", download(d_params), params);
      check_bitwise(at + " m", download(d_m), std::vector<float>(cpu.m(), cpu.m() + n));
      check_bitwise(at + " v", download(d_v), std::vector<float>(cpu.v(), cpu.v() + n));
    }
  }
}

// Mixed precision: the CPU side does what the kernel's header says, in the CPU's own pieces:
// widen the half gradient (exact), multiply by grad_scale in fp32, update_range on the fp32
// master weights, round the new master weights to the half format.
TEMPLATE_TEST_CASE("adamw_update_mixed is bitwise equal to widen, scale, update_range, round", "[gpu][adamw]", bf16,
                   fp16) {
  using H = TestType;
  cuda::Stream stream;
  const float grad_scale = 1.0f / 1024.0f;  // 1 / loss scale
  for (std::size_t n : kSizes) {
    const std::string label = std::string("adamw mixed ") + dtype_name<H>() + " n=" + std::to_string(n);
    Rng rng(seed_for(label));
    scalelab::MemoryTracker tracker;
    scalelab::AdamW cpu(n, test_config(), &tracker);
    std::vector<float> master = random_values(n, rng);
    DeviceBuffer<float> d_master = upload<float>(master);
    DeviceBuffer<H> d_params(n, MemCategory::kParams, nullptr);
    DeviceBuffer<float> d_m(n, MemCategory::kOptimizer, nullptr), d_v(n, MemCategory::kOptimizer, nullptr);
    poison(d_params);  // written from the master weights by every update
    for (double lr : kLearningRates) {
      // Scaled gradients as backward leaves them (|g| * 1024 within fp16's range).
      const std::vector<float> grads = random_inputs<H>(n, rng, 0.1f, 2000.0f);
      DeviceBuffer<H> d_grads = upload<H>(grads);
      std::vector<float> unscaled(n);
      for (std::size_t i = 0; i < n; ++i) unscaled[i] = grads[i] * grad_scale;
      cpu.begin_step();
      cpu.update_range(master.data(), unscaled.data(), 0, n, lr);
      std::vector<std::uint16_t> params(n);
      scalelab::float_to_half(params.data(), master.data(), n, half_format<H>());

      const cuda::AdamWScalars k = cuda::adamw_scalars(cpu.config(), cpu.step_count(), lr);
      cuda::adamw_update_mixed(d_params.data(), d_master.data(), d_grads.data(), d_m.data(), d_v.data(), n, grad_scale,
                               k, stream.get());
      stream.synchronize();
      const std::string at = label + " step " + std::to_string(cpu.step_count());
      check_bitwise(at + " master", download(d_master), master);
      check_bitwise(at + " m", download(d_m), std::vector<float>(cpu.m(), cpu.m() + n));
      check_bitwise(at + " v", download(d_v), std::vector<float>(cpu.v(), cpu.v() + n));
      check_bitwise16(at + " params", download_bits(d_params), params, master);
    }
  }
}

}  // namespace
