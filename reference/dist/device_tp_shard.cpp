// A tensor-parallel shard computing on a device, its buffers and optimizer on the host.
#include "dist/device_tp_shard.hpp"

#include "core/error.hpp"
#include "model/batch_check.hpp"

namespace scalelab {

void check_tp_on_device(const TrainOptions& o, bool device_chunks) {
  if (o.device == "cpu") return;
  require(device_chunks, "device",
          "--tp " + std::to_string(o.parallel.tp) + " with --device " + o.device +
              ": this program gave it no GPU shards",
          "run scalelab train (built with CUDA), or use --device cpu");
  require(!o.parallel.sequence_parallel, "sequence-parallel",
          "--sequence-parallel on --device " + o.device +
              ": the GPU's tensor-parallel blocks keep all N rows in this build (no all-gather/reduce-scatter "
              "kernels yet)",
          "drop --sequence-parallel on the GPU, or use --device cpu for it");
}

DeviceTpShardModel::DeviceTpShardModel(std::unique_ptr<TpShardModel> host, const DeviceChunkStorage& storage,
                                       const DeviceTpChunkFactory& make_chunk, const std::string& precision,
                                       Communicator& tp, MemoryTracker* device)
    : device_(device), host_(std::move(host)) {
  SCALELAB_CHECK(make_chunk != nullptr, "a device shard without a chunk factory");
  chunk_ = make_chunk(host_->config(), precision, storage, tp, device_);
  SCALELAB_CHECK(chunk_->num_params() == host_->num_params(), "the device chunk holds ", chunk_->num_params(),
                 " parameters, the host shard ", host_->num_params());
}

double DeviceTpShardModel::forward(const int* tokens, const int* targets, int B, int T) {
  check_batch(config(), tokens, targets, B, T);
  return chunk_->forward_slice(tokens, nullptr, targets, B, T);
}

}  // namespace scalelab
