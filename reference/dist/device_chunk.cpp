// The host side of a pipeline chunk on a device: its initialisation and its copy's bytes.
#include "dist/device_chunk.hpp"

#include <algorithm>
#include <vector>

#include "core/error.hpp"
#include "model/gpt.hpp"

namespace scalelab {

void init_device_chunk_weights(const GPTConfig& config, const ParamLayout& layout, const DeviceChunkStorage& storage,
                               std::optional<HalfFormat> half, std::uint64_t seed) {
  if (!half) {
    SCALELAB_CHECK(storage.params != nullptr, "an fp32 device chunk without its host parameters");
    init_gpt2_weights(config, layout, storage.params, seed);
    return;
  }
  const MixedStorage& m = storage.mixed;
  SCALELAB_CHECK(m.param_data != nullptr, "a mixed-precision device chunk without its host half parameters");
  const std::size_t n = layout.num_params();
  std::vector<float> values(n);
  init_gpt2_weights(config, layout, values.data(), seed);
  float_to_half(m.param_data, values.data(), n, *half);
  const std::size_t begin = std::min(m.master_begin, n), end = std::min(m.master_end, n);
  if (m.master_data && begin < end)
    std::copy(values.begin() + static_cast<std::ptrdiff_t>(begin), values.begin() + static_cast<std::ptrdiff_t>(end),
              m.master_data);
}

const void* device_chunk_host_params(const DeviceChunkStorage& storage, bool mixed) {
  const void* p = mixed ? static_cast<const void*>(storage.mixed.param_data) : storage.params;
  SCALELAB_CHECK(p != nullptr, "a device chunk without its host parameters");
  return p;
}

void* device_chunk_host_grads(const DeviceChunkStorage& storage, bool mixed) {
  void* g = mixed ? static_cast<void*>(storage.mixed.grad_data) : storage.grads;
  SCALELAB_CHECK(g != nullptr, "a device chunk without its host gradients");
  return g;
}

}  // namespace scalelab
