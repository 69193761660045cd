// A CPU twin of the GPU pipeline chunk (kernels/dist/gpu_pipeline_chunk.hpp) for the tests of the
// stage's device path on any machine: a GPT slice (GptChunk, or MixedChunk in bf16/fp16) that
// computes on its own copy of its parameters and gradients, a second host buffer standing for
// device memory (counted in the stage's device tracker), loaded from and stored into the stage's
// flat buffers through the same hooks and the same host-side code as the GPU chunk
// (dist/device_chunk.hpp). What it cannot check is the GPU's arithmetic: tests/gpu does that.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "dist/device_chunk.hpp"
#include "host_device_copy.hpp"
#include "model/gpt.hpp"
#include "precision/mixed_model.hpp"

namespace scalelab_test {

class HostCopyChunk final : public HostCopyTwin<scalelab::PipelineChunk, scalelab::PipelineChunk> {
 public:
  HostCopyChunk(const scalelab::GPTConfig& config, const std::string& precision,
                const scalelab::DeviceChunkStorage& host, scalelab::MemoryTracker* device)
      : HostCopyTwin(host, precision, scalelab::ParamLayout(config, host.slice).num_params(), device),
        config_(config),
        host_(host) {
    using namespace scalelab;
    if (!copy_.mixed()) {
      inner_ = std::make_unique<GptChunk>(
          std::make_unique<GPT>(config, device, host.slice, copy_.params.data(), copy_.grads.data()));
      return;
    }
    inner_ = std::make_unique<MixedChunk>(
        std::make_unique<MixedPrecisionModel>(config, *copy_.half, device, copy_.mixed_storage(host.slice)));
  }
  static scalelab::DeviceChunkFactory factory() {
    return [](const scalelab::GPTConfig& c, const std::string& precision, const scalelab::DeviceChunkStorage& s,
              scalelab::MemoryTracker* device) -> std::unique_ptr<scalelab::PipelineChunk> {
      return std::make_unique<HostCopyChunk>(c, precision, s, device);
    };
  }

  void init_weights(std::uint64_t seed) override {
    scalelab::init_device_chunk_weights(config_, inner_->layout(), host_, copy_.half, seed);
  }

 private:
  scalelab::GPTConfig config_;
  scalelab::DeviceChunkStorage host_;
};

}  // namespace scalelab_test
