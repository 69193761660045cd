// A CPU twin of the GPU pipeline chunk (kernels/dist/gpu_pipeline_chunk.hpp) for the tests of the
// stage's device path on any machine: a GPT slice (GptChunk, or MixedChunk in bf16/fp16) that
// computes on its own copy of its parameters and gradients, a second host buffer standing for
// device memory (counted in the stage's device tracker), loaded from and stored into the stage's
// flat buffers through the same hooks and the same host-side code as the GPU chunk
// (dist/device_chunk.hpp). What it cannot check is the GPU's arithmetic: tests/gpu does that.
#pragma once

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "dist/device_chunk.hpp"
#include "model/gpt.hpp"
#include "precision/mixed_model.hpp"

namespace scalelab_test {

class HostCopyChunk final : public scalelab::PipelineChunk {
 public:
  HostCopyChunk(const scalelab::GPTConfig& config, const std::string& precision,
                const scalelab::DeviceChunkStorage& host, scalelab::MemoryTracker* device)
      : config_(config), host_(host) {
    using namespace scalelab;
    const std::size_t n = ParamLayout(config, host.slice).num_params();
    if (precision == "fp32") {
      params_ = Buffer<float>(n, MemCategory::kParams, device);
      grads_ = Buffer<float>(n, MemCategory::kGrads, device);
      inner_ = std::make_unique<GptChunk>(
          std::make_unique<GPT>(config, device, host.slice, params_.data(), grads_.data()));
      return;
    }
    half_ = parse_half_format(precision);
    half_params_ = Buffer<std::uint16_t>(n, MemCategory::kParams, device);
    half_grads_ = Buffer<std::uint16_t>(n, MemCategory::kGrads, device);
    MixedStorage s;  // no master weights here: the stage's host buffers keep them
    s.slice = host.slice;
    s.param_data = half_params_.data();
    s.grad_data = half_grads_.data();
    s.master_begin = s.master_end = 0;
    inner_ = std::make_unique<MixedChunk>(std::make_unique<MixedPrecisionModel>(config, *half_, device, s));
  }
  static scalelab::DeviceChunkFactory factory() {
    return [](const scalelab::GPTConfig& c, const std::string& precision, const scalelab::DeviceChunkStorage& s,
              scalelab::MemoryTracker* device) -> std::unique_ptr<scalelab::PipelineChunk> {
      return std::make_unique<HostCopyChunk>(c, precision, s, device);
    };
  }

  const scalelab::ModelSlice& slice() const override { return inner_->slice(); }
  const scalelab::ParamLayout& layout() const override { return inner_->layout(); }
  std::size_t num_params() const override { return inner_->num_params(); }
  std::size_t boundary_elements(int B, int T) const override { return inner_->boundary_elements(B, T); }
  scalelab::DataType boundary_type() const override { return inner_->boundary_type(); }
  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override {
    return inner_->forward_slice(tokens, input, targets, B, T);
  }
  const float* output() const override { return inner_->output(); }
  void backward_slice(const float* doutput, float loss_scale) override { inner_->backward_slice(doutput, loss_scale); }
  void backward_input(const float* doutput, float loss_scale) override { inner_->backward_input(doutput, loss_scale); }
  void backward_weight() override { inner_->backward_weight(); }
  const float* input_grad() const override { return inner_->input_grad(); }
  void stash_activations(int key) override { inner_->stash_activations(key); }
  void restore_activations(int key) override { inner_->restore_activations(key); }
  void release_activations() override { inner_->release_activations(); }
  std::size_t stashed_count() const override { return inner_->stashed_count(); }
  void set_checkpoint_policy(const scalelab::CheckpointPolicy& policy) override {
    inner_->set_checkpoint_policy(policy);
  }
  void set_attention(scalelab::AttentionKind kind) override { inner_->set_attention(kind); }
  void init_weights(std::uint64_t seed) override {
    scalelab::init_device_chunk_weights(config_, inner_->layout(), host_, half_, seed);
  }
  std::size_t block_forward_count() const override { return inner_->block_forward_count(); }

  void load_params() override {
    std::memcpy(own_params(), scalelab::device_chunk_host_params(host_, mixed()), own_bytes());
    ++loads;
  }
  void store_grads() override {
    std::memcpy(scalelab::device_chunk_host_grads(host_, mixed()), own_grads(), own_bytes());
    ++stores;
  }
  void zero_grads() override { std::memset(own_grads(), 0, own_bytes()); }

  int loads = 0, stores = 0;  // how often the stage called the hooks

 private:
  bool mixed() const { return half_.has_value(); }
  void* own_params() { return mixed() ? static_cast<void*>(half_params_.data()) : params_.data(); }
  void* own_grads() { return mixed() ? static_cast<void*>(half_grads_.data()) : grads_.data(); }
  std::size_t own_bytes() const { return mixed() ? half_params_.bytes() : params_.bytes(); }
  scalelab::GPTConfig config_;
  scalelab::DeviceChunkStorage host_;
  std::optional<scalelab::HalfFormat> half_;
  scalelab::Buffer<float> params_, grads_;                    // fp32: the "device" copy
  scalelab::Buffer<std::uint16_t> half_params_, half_grads_;  // mixed precision: the "device" copy
  std::unique_ptr<scalelab::PipelineChunk> inner_;
};

}  // namespace scalelab_test
