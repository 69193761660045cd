// A tensor-parallel shard computing on a device, its buffers and optimizer on the host.
#include "dist/device_tp_shard.hpp"

#include "core/error.hpp"

namespace scalelab {

void check_tp_on_device(const TrainOptions& o, bool device_chunks) {
  if (o.device == "cpu") return;
  require(device_chunks, "device",
          "--tp " + std::to_string(o.parallel.tp) + " with --device " + o.device +
              ": this program gave it no GPU shards",
          "run scalelab train (built with CUDA), or use --device cpu");
}

DeviceTpShardModel::DeviceTpShardModel(std::unique_ptr<TpShardModel> host, const DeviceChunkStorage& storage,
                                       const DeviceTpChunkFactory& make_chunk, const std::string& precision,
                                       Communicator& tp, MemoryTracker* device)
    : own_device_(device ? nullptr : std::make_unique<MemoryTracker>()),
      device_(device ? device : own_device_.get()),
      host_(std::move(host)) {
  SCALELAB_CHECK(make_chunk != nullptr, "a device shard without a chunk factory");
  chunk_ = make_chunk(host_->config(), precision, storage, tp, host_->group().sequence_parallel, device_);
  SCALELAB_CHECK(chunk_->num_params() == host_->num_params(), "the device chunk holds ", chunk_->num_params(),
                 " parameters, the host shard ", host_->num_params());
}

void DeviceTpShardModel::finish_gradients() {
  std::vector<TpCollective>& host_ledger = host_->group().ledger;
  host_ledger.clear();
  host_->finish_gradients();
  std::vector<TpCollective>& ledger = chunk_->group().ledger;
  ledger.insert(ledger.end(), host_ledger.begin(), host_ledger.end());
  host_ledger.clear();
}

}  // namespace scalelab
