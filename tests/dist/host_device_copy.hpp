// What the CPU twins of the GPU chunks share (host_copy_chunk.hpp for the pipeline,
// host_copy_tp_chunk.hpp for tensor parallelism): the "device" copy of a chunk's parameters and
// gradients, a second host buffer counted in the device tracker (fp32, or the half bits in
// bf16/fp16), and the hooks' copies to and from the host buffers (dist/device_chunk.hpp), counted;
// and the chunk calls handed to the CPU chunk that computes on that copy.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/device_chunk.hpp"
#include "dist/pipeline_chunk.hpp"
#include "dist/pipeline_strategy.hpp"
#include "precision/half.hpp"
#include "precision/half_type.hpp"

namespace scalelab_test {

struct HostDeviceCopy {
  // n parameters in `precision` (fp32, bf16, fp16), their host copy in `host`.
  HostDeviceCopy(const scalelab::DeviceChunkStorage& host, const std::string& precision, std::size_t n,
                 scalelab::MemoryTracker* device)
      : host_(host) {
    using namespace scalelab;
    if (precision == "fp32") {
      params = Buffer<float>(n, MemCategory::kParams, device);
      grads = Buffer<float>(n, MemCategory::kGrads, device);
      return;
    }
    half = parse_half_format(precision);
    half_params = Buffer<std::uint16_t>(n, MemCategory::kParams, device);
    half_grads = Buffer<std::uint16_t>(n, MemCategory::kGrads, device);
  }
  // Storage for a mixed-precision model computing on the copy: no master weights (the host keeps them).
  scalelab::MixedStorage mixed_storage(const scalelab::ModelSlice& slice = {}) {
    scalelab::MixedStorage s;
    s.slice = slice;
    s.param_data = half_params.data();
    s.grad_data = half_grads.data();
    s.master_begin = s.master_end = 0;
    return s;
  }

  void load() {
    std::memcpy(own_params(), scalelab::device_chunk_host_params(host_, mixed()), own_bytes());
    ++loads;
  }
  void store() {
    std::memcpy(scalelab::device_chunk_host_grads(host_, mixed()), own_grads(), own_bytes());
    ++stores;
  }
  void zero() { std::memset(own_grads(), 0, own_bytes()); }
  bool mixed() const { return half.has_value(); }

  std::optional<scalelab::HalfFormat> half;
  scalelab::Buffer<float> params, grads;                    // fp32: the "device" copy
  scalelab::Buffer<std::uint16_t> half_params, half_grads;  // mixed precision: the "device" copy
  int loads = 0, stores = 0;                                // how often the hooks ran

 private:
  void* own_params() { return mixed() ? static_cast<void*>(half_params.data()) : params.data(); }
  void* own_grads() { return mixed() ? static_cast<void*>(half_grads.data()) : grads.data(); }
  std::size_t own_bytes() const { return mixed() ? half_params.bytes() : params.bytes(); }
  scalelab::DeviceChunkStorage host_;
};

// The twin of the GPU's message memory (kernels/dist/device_messages.hpp): host memory standing
// for device memory, counted as communication memory in the device tracker, so the pipeline's
// device-message path (dist/pipeline_message.hpp) runs on any machine.
class TwinMessageMemory final : public scalelab::DeviceMessageMemory {
 public:
  explicit TwinMessageMemory(scalelab::MemoryTracker* device) : device_(device) {}
  std::shared_ptr<void> allocate(std::size_t bytes) override {
    if (bytes == 0) return nullptr;
    auto* block = new scalelab::Buffer<unsigned char>(bytes, scalelab::MemCategory::kComm, device_);
    return std::shared_ptr<void>(block->data(), [block](void*) { delete block; });
  }

 private:
  scalelab::MemoryTracker* device_;
};

// The twin of scalelab train's device messages: a copy of the pipeline group (the GPU's
// communicator moves device memory; MPI moves this "device" memory as well) and the twin memory.
inline scalelab::PipelineMessagesFactory twin_messages() {
  return [](scalelab::Communicator& pp, scalelab::MemoryTracker* device) {
    return scalelab::PipelineMessages{pp.split(0, pp.rank()), std::make_unique<TwinMessageMemory>(device)};
  };
}

// A twin (Base: a PipelineChunk) whose chunk calls all go to inner_ (Inner: a CPU chunk or shard,
// which the twin builds on copy_'s buffers) and whose device hooks are copy_'s.
template <typename Base, typename Inner>
class HostCopyTwin : public Base {
 public:
  // n parameters in `precision`, their host copy in `host`.
  HostCopyTwin(const scalelab::DeviceChunkStorage& host, const std::string& precision, std::size_t n,
               scalelab::MemoryTracker* device)
      : copy_(host, precision, n, device) {}

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
  // The boundary as the GPU chunks take it: device messages in the boundary type (here host memory
  // standing for it), refused in host memory, as the GPU chunks refuse them.
  float forward_message(const int* tokens, scalelab::Message& input, const int* targets, int B, int T) override {
    return inner_->forward_slice(tokens, widened(input), targets, B, T);
  }
  void backward_message(scalelab::Message& doutput, float loss_scale) override {
    inner_->backward_slice(widened(doutput), loss_scale);
  }
  scalelab::Message output_message(std::size_t n, const scalelab::MessagePlace& place) const override {
    return narrowed(inner_->output(), n, place);
  }
  scalelab::Message input_grad_message(std::size_t n, const scalelab::MessagePlace& place) const override {
    return narrowed(inner_->input_grad(), n, place);
  }
  void stash_activations(int key) override { inner_->stash_activations(key); }
  void restore_activations(int key) override { inner_->restore_activations(key); }
  void release_activations() override { inner_->release_activations(); }
  std::size_t stashed_count() const override { return inner_->stashed_count(); }
  void set_checkpoint_policy(const scalelab::CheckpointPolicy& policy) override {
    inner_->set_checkpoint_policy(policy);
  }
  void set_attention(scalelab::AttentionKind kind) override { inner_->set_attention(kind); }
  void init_weights(std::uint64_t seed) override { inner_->init_weights(seed); }
  std::size_t block_forward_count() const override { return inner_->block_forward_count(); }

  void load_params() override { copy_.load(); }
  void store_grads() override { copy_.store(); }
  void zero_grads() override { copy_.zero(); }
  int loads() const { return copy_.loads; }  // how often the stage or strategy called the hooks
  int stores() const { return copy_.stores; }

 protected:
  HostDeviceCopy copy_;
  std::unique_ptr<Inner> inner_;

 private:
  // A device message's values as the fp32 the CPU chunk reads (null for none).
  const float* widened(scalelab::Message& m) {
    if (m.empty()) return nullptr;
    if (!m.on_device()) throw scalelab::Error("the twin of a GPU chunk got a host message");
    staging_.resize(m.size());
    if (const auto half = scalelab::half_format_of(m.type()))
      scalelab::half_to_float(staging_.data(), static_cast<const std::uint16_t*>(m.data()), m.size(), *half);
    else
      std::memcpy(staging_.data(), m.data(), m.bytes());
    return staging_.data();
  }
  scalelab::Message narrowed(const float* values, std::size_t n, const scalelab::MessagePlace& place) const {
    if (!place.on_device()) throw scalelab::Error("the twin of a GPU chunk was asked for a host message");
    scalelab::Message m(n, inner_->boundary_type(), place);
    if (const auto half = scalelab::half_format_of(m.type()))
      scalelab::float_to_half(static_cast<std::uint16_t*>(m.data()), values, n, *half);
    else
      std::memcpy(m.data(), values, m.bytes());
    return m;
  }
  std::vector<float> staging_;  // the last message widened
};

}  // namespace scalelab_test
