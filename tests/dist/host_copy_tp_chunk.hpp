// A CPU twin of the GPU tensor-parallel chunk (kernels/dist/gpu_tp_chunk.hpp) for the tests of the
// shard's device path on any machine: the CPU shard (TensorParallelModel, or
// MixedTensorParallelModel in bf16/fp16) computing on its own copy of the parameters and
// gradients, a second host buffer standing for device memory (counted in the shard's device
// tracker), loaded from and stored into the host shard's flat buffers through the same hooks as
// the GPU chunk (dist/device_tp_shard.hpp). Its collectives run over a copy of the group's host
// communicator, as the GPU chunk's run on a device communicator of its own beside the host's (whose
// sum of the replicated gradients the shard still makes): a strategy that counts the bytes of only
// one of the two fails the tests' byte checks. What it cannot check is the GPU's arithmetic:
// tests/gpu does that.
#pragma once

#include <memory>
#include <string>

#include "dist/device_tp_shard.hpp"
#include "dist/tp_mixed_model.hpp"
#include "dist/tp_model.hpp"
#include "host_device_copy.hpp"

namespace scalelab_test {

class HostCopyTpChunk final : public HostCopyTwin<scalelab::DeviceTpChunk, scalelab::TpShardModel> {
 public:
  HostCopyTpChunk(const scalelab::GPTConfig& config, const std::string& precision,
                  const scalelab::DeviceChunkStorage& host, scalelab::Communicator& tp, bool sequence_parallel,
                  scalelab::MemoryTracker* device)
      : HostCopyTwin(host, precision,
                     scalelab::TpLayout(config, host.slice, tp.size(), tp.rank()).layout().num_params(), device),
        own_tp_(tp.split(0, tp.rank())) {
    using namespace scalelab;
    if (!copy_.mixed()) {
      inner_ = std::make_unique<TensorParallelModel>(config, host.slice, *own_tp_, sequence_parallel, device,
                                                     copy_.params.data(), copy_.grads.data());
      return;
    }
    inner_ = std::make_unique<MixedTensorParallelModel>(config, *own_tp_, sequence_parallel, *copy_.half, device,
                                                        copy_.mixed_storage(host.slice));
  }
  ~HostCopyTpChunk() override { inner_.reset(); }  // the shard before the communicator it holds
  static scalelab::DeviceTpChunkFactory factory() {
    return [](const scalelab::GPTConfig& c, const std::string& precision, const scalelab::DeviceChunkStorage& s,
              scalelab::Communicator& tp, bool sp,
              scalelab::MemoryTracker* device) -> std::unique_ptr<scalelab::DeviceTpChunk> {
      return std::make_unique<HostCopyTpChunk>(c, precision, s, tp, sp, device);
    };
  }

  scalelab::TpGroup& group() override { return inner_->group(); }

 private:
  std::unique_ptr<scalelab::Communicator> own_tp_;  // the group's copy: the "device" communicator
};

}  // namespace scalelab_test
