// Event timing and random device buffers for the kernel benchmark (see bench_util.hpp).
#include "kernels/bench/bench_util.hpp"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/stats.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/dtype.hpp"
#include "precision/half.hpp"

namespace scalelab::cuda {

void BenchOptions::validate() const {
  auto require = [](bool ok, const char* option, const char* fix) {
    if (!ok) throw ConfigError(std::string(option) + ": " + fix);
  };
  require(batch > 0, "--batch", "must be positive (8 or 16 for the GPT-2 shape)");
  require(warmup >= 0, "--warmup", "must be zero or more");
  require(repeats > 0, "--repeats", "must be positive (20 gives a stable median)");
}

Timing time_launch(cudaStream_t stream, int warmup, int repeats, const std::function<void()>& launch) {
  for (int i = 0; i < warmup; ++i) launch();
  Event start, stop;
  std::vector<double> ms;
  for (int i = 0; i < repeats; ++i) {
    start.record(stream);
    launch();
    stop.record(stream);
    stop.synchronize();
    ms.push_back(elapsed_ms(start, stop));
  }
  return {median(ms), *std::min_element(ms.begin(), ms.end())};
}

template <typename F>
void fill_random(DeviceBuffer<F>& d, std::uint64_t seed, float lo, float hi) {
  const std::size_t block = std::min<std::size_t>(d.size(), std::size_t{1} << 20);
  if (block == 0) return;
  Rng rng(seed);
  std::vector<float> x(block);
  for (float& v : x) {
    const float magnitude = lo + (hi - lo) * static_cast<float>(rng.uniform());
    v = rng.below(2) ? magnitude : -magnitude;
  }
  if constexpr (std::is_same_v<F, float>) {
    d.copy_from_host(x.data(), block);
  } else {
    std::vector<std::uint16_t> bits(block);
    float_to_half(bits.data(), x.data(), block, *half_format_of<F>());
    SCALELAB_CUDA_CHECK(cudaMemcpy(d.data(), bits.data(), block * 2, cudaMemcpyHostToDevice));
  }
  // Double the filled prefix until the buffer is full.
  for (std::size_t filled = block; filled < d.size(); filled *= 2) {
    const std::size_t count = std::min(filled, d.size() - filled);
    SCALELAB_CUDA_CHECK(cudaMemcpy(d.data() + filled, d.data(), count * sizeof(F), cudaMemcpyDeviceToDevice));
  }
}

template void fill_random<float>(DeviceBuffer<float>&, std::uint64_t, float, float);
template void fill_random<bf16>(DeviceBuffer<bf16>&, std::uint64_t, float, float);
template void fill_random<fp16>(DeviceBuffer<fp16>&, std::uint64_t, float, float);

}  // namespace scalelab::cuda
