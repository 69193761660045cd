// A tensor-parallel shard computing on a device, its buffers and optimizer on the host.
#include "dist/device_tp_shard.hpp"

#include "core/error.hpp"
#include "model/batch_check.hpp"

namespace scalelab {

DeviceTpShardModel::DeviceTpShardModel(std::unique_ptr<TpShardModel> host, const DeviceChunkStorage& storage,
                                       const DeviceTpChunkFactory& make_chunk, const std::string& precision,
                                       Communicator& tp)
    : host_(std::move(host)) {
  SCALELAB_CHECK(make_chunk != nullptr, "a device shard without a chunk factory");
  chunk_ = make_chunk(host_->config(), precision, storage, tp, &device_);
  SCALELAB_CHECK(chunk_->num_params() == host_->num_params(), "the device chunk holds ", chunk_->num_params(),
                 " parameters, the host shard ", host_->num_params());
}

double DeviceTpShardModel::forward(const int* tokens, const int* targets, int B, int T) {
  check_batch(config(), tokens, targets, B, T);
  return chunk_->forward_slice(tokens, nullptr, targets, B, T);
}

}  // namespace scalelab
