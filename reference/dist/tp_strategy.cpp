// Tensor parallelism behind the trainer's seam (stage 06).
#include "dist/tp_strategy.hpp"

#include <cstdio>

#include "core/error.hpp"
#include "dist/ddp.hpp"
#include "dist/device_tp_shard.hpp"
#include "dist/gather_weights.hpp"
#include "dist/tp_mixed_model.hpp"
#include "train/accumulate.hpp"

namespace scalelab {

namespace {

// What this build's tensor parallelism cannot do yet: one clear refusal each, on every rank.
void refuse_unsupported(const TrainOptions& o, bool device_chunks) {
  require(o.parallel.pp == 1, "pp",
          "--tp " + std::to_string(o.parallel.tp) + " with --pp " + std::to_string(o.parallel.pp) +
              ": a pipeline's stages are PipelineStrategy's to split (the strategy factory picks it)",
          "build the strategy with make_strategy_factory");
  check_tp_on_device(o, device_chunks);
}

std::uint64_t bytes_of(const CommStats& now, const CommStats& before) {
  std::uint64_t b = 0;
  for (int op = 0; op < kCommOpCount; ++op)
    b += now[static_cast<CommOp>(op)].bytes_sent - before[static_cast<CommOp>(op)].bytes_sent;
  return b;
}

double collective_seconds(const CommStats& s) {
  return s[CommOp::kAllReduce].seconds + s[CommOp::kAllGather].seconds + s[CommOp::kReduceScatter].seconds;
}

}  // namespace

TensorParallelStrategy::TensorParallelStrategy(Communicator& world, const TrainOptions& o,
                                               DeviceTpChunkFactory device_chunks)
    : world_(world),
      sequence_parallel_(o.parallel.sequence_parallel),
      zero_stage_(o.parallel.zero),
      device_chunks_(o.device == "cpu" ? DeviceTpChunkFactory{} : std::move(device_chunks)) {
  refuse_unsupported(o, static_cast<bool>(device_chunks_));
  grid_ = std::make_unique<ProcessGrid>(world, GridShape{1, o.data_parallel_size(world.size()), o.parallel.tp});
}

TensorParallelStrategy::~TensorParallelStrategy() = default;

std::string TensorParallelStrategy::describe() const {
  std::string s = "tensor parallel over " + std::to_string(grid_->shape().tp) + " ranks";
  if (device_chunks_) s += " on the GPU (buffers and optimizer on the host)";
  if (sequence_parallel_) s += " with sequence parallelism";
  s += "; this rank: tp rank " + std::to_string(grid_->coord().tp);
  if (model_) {
    const VocabRange& v = model_->shard().vocab();
    s += " (heads " + std::to_string(grid_->coord().tp * model_->config().num_heads / grid_->shape().tp) + ".." +
         std::to_string((grid_->coord().tp + 1) * model_->config().num_heads / grid_->shape().tp - 1) +
         ", vocabulary rows " + std::to_string(v.begin) + ".." + std::to_string(v.begin + v.local - 1) +
         (v.padded > v.vocab ? " of " + std::to_string(v.padded) + " padded" : "") + ")";
  }
  if (grid_->shape().dp > 1) s += "; data parallel over " + std::to_string(grid_->shape().dp) + " replicas";
  if (zero_)
    s += "; ZeRO-1 (distributed optimizer): AdamW state of " + std::to_string(zero_->shard_size()) +
         " of the shard's " + std::to_string(model_->num_params()) + " parameters";
  return s;
}

std::unique_ptr<TpShardModel> TensorParallelStrategy::on_device(std::unique_ptr<TpShardModel> shard,
                                                                const DeviceChunkStorage& storage,
                                                                const std::string& precision) {
  if (!device_chunks_) return shard;
  return std::make_unique<DeviceTpShardModel>(std::move(shard), storage, device_chunks_, precision, grid_->tp());
}

std::unique_ptr<TrainModel> TensorParallelStrategy::make_model(const GPTConfig& config, const std::string& precision,
                                                               MemoryTracker* tracker,
                                                               const TrainModelFactory& /*whole*/) {
  Communicator &tp = grid_->tp(), &dp = grid_->dp();
  if (precision == "fp32") {
    auto built = std::make_unique<TensorParallelModel>(config, tp, sequence_parallel_, tracker);
    float *params = built->params(), *grads = built->grads();
    DeviceChunkStorage on_host;
    on_host.params = params;
    on_host.grads = grads;
    std::unique_ptr<TpShardModel> shard = on_device(std::move(built), on_host, precision);
    model_ = shard.get();
    if (zero_stage_ == 0) return shard;
    auto wrapped = std::make_unique<DistributedOptimizer>(std::move(shard), params, grads, dp, tracker);
    zero_ = wrapped.get();
    return wrapped;
  }
  // Mixed precision (stage 03): a half shard; under ZeRO-1 with the fp32 master weights of this
  // replica's part of it only (the distributed optimizer's cut of the flat buffer).
  const HalfFormat format = parse_half_format(precision);
  MixedStorage storage;
  if (zero_stage_ > 0) {
    const BlockPartition part{TpLayout(config, tp.size(), tp.rank()).layout().num_params(), dp.size()};
    storage.master_begin = part.offset(dp.rank());
    storage.master_end = storage.master_begin + part.size(dp.rank());
  }
  auto built = std::make_unique<MixedTensorParallelModel>(config, tp, sequence_parallel_, format, tracker, storage);
  const DistributedOptimizer::HalfBuffers half{built->half_params(), built->half_grads(), built->held_master(), format};
  DeviceChunkStorage on_host;
  on_host.mixed.param_data = half.params;
  on_host.mixed.grad_data = half.grads;
  std::unique_ptr<TpShardModel> shard = on_device(std::move(built), on_host, precision);
  model_ = shard.get();
  if (zero_stage_ == 0) return shard;
  auto wrapped = std::make_unique<DistributedOptimizer>(std::move(shard), half, dp, tracker);
  zero_ = wrapped.get();
  return wrapped;
}

void TensorParallelStrategy::attach(const StrategyContext& ctx) {
  SCALELAB_CHECK(zero_ ? zero_ == &ctx.model : model_ == &ctx.model,
                 "the tensor-parallel strategy attaches to the model it built");
  check_batch_split(ctx.options.batch, grid_->shape().dp, ctx.options.micro_batches());
  check_replicas_agree(world_, ctx.run_description);
  // The replicas of one shard start from dp rank 0's parameters (as DDP's do).
  if (grid_->shape().dp > 1) model_->broadcast_params(grid_->dp(), 0);
}

void TensorParallelStrategy::begin_step(const GlobalBatch& /*batch*/) {
  model_->load_params();  // on a GPU: the step's parameters into the device (a CPU shard: nothing)
  model_->group().ledger.clear();
  tp_before_ = model_->group().comm->stats();
  dp_before_ = grid_->dp().stats();
}

double TensorParallelStrategy::run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) {
  const int d = grid_->shape().dp, rows = batch.rows / d;
  const std::size_t offset = static_cast<std::size_t>(grid_->coord().dp) * rows * batch.T;
  // As in DDP, each replica's loss is scaled by 1/d, so the sum over replicas is the batch mean's gradient.
  return accumulate_gradients(model, batch.inputs + offset, batch.targets + offset, rows, batch.T, batch.micro_batches,
                              loss_scale / d);
}

double TensorParallelStrategy::evaluate(TrainModel& model, const int* inputs, const int* targets, int rows, int T) {
  model_->load_params();  // after the last update
  return model.forward(inputs, targets, rows, T);
}

void TensorParallelStrategy::sync_gradients(TrainModel& /*model*/) {
  model_->store_grads();  // on a GPU: the step's gradients into the host buffer
  // Under sequence parallelism the replicated tensors' gradients are summed on the host's tp
  // communicator, also when the shard computes on a GPU, whose collectives run on the device's.
  const CommStats host_before = grid_->tp().stats();
  model_->finish_gradients();
  step_ledger_ = model_->group().ledger;
  reduce_over_replicas(zero_, grid_->dp(), model_->typed_grads(), model_->num_params());
  report_ = {};
  // The tensor-parallel group's collectives are counted by the communicator they ran on: the
  // host's, or on a GPU the device's (NCCL, or host staging, which counts them as NCCL would),
  // plus, on a GPU, the host's sum of the replicated gradients.
  const CommStats& tp_now = model_->group().comm->stats();
  report_.bytes_sent = bytes_of(tp_now, tp_before_) + bytes_of(grid_->dp().stats(), dp_before_);
  report_.comm_seconds = collective_seconds(tp_now) - collective_seconds(tp_before_) +
                         collective_seconds(grid_->dp().stats()) - collective_seconds(dp_before_);
  if (model_->group().comm != &grid_->tp()) {
    report_.bytes_sent += bytes_of(grid_->tp().stats(), host_before);
    report_.comm_seconds += collective_seconds(grid_->tp().stats()) - collective_seconds(host_before);
  }
}

double TensorParallelStrategy::mean_loss(double local_loss) {
  // Every tp rank has the whole rows' loss; the replicas' differ and are averaged.
  double loss = local_loss;
  if (grid_->shape().dp > 1) {
    grid_->dp().all_reduce(&loss, 1);
    loss /= grid_->shape().dp;
  }
  return loss;
}

TrainModel::StepOutcome TensorParallelStrategy::optimizer_step(TrainModel& model, AdamW& optimizer, double lr,
                                                               double grad_scale, double clip) {
  if (!zero_) return model.optimizer_step(optimizer, lr, grad_scale, clip);
  const TrainModel::StepOutcome out = zero_->step(optimizer, lr, grad_scale, clip, model_->counted_elsewhere(),
                                                  &grid_->tp());
  report_.bytes_sent += zero_->gathered_bytes();  // read after the update, so the all-gather counts
  return out;
}

std::string TensorParallelStrategy::report() const {
  // The last step's tensor-parallel collectives by kind, from the ledger.
  std::size_t calls[kCommOpCount] = {}, elements[kCommOpCount] = {};
  for (const TpCollective& c : step_ledger_) {
    calls[static_cast<int>(c.op)] += 1;
    elements[static_cast<int>(c.op)] += c.elements;
  }
  std::string out = "tensor-parallel collectives of the last step (per rank):";
  for (CommOp op : {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter}) {
    const int i = static_cast<int>(op);
    if (calls[i] == 0) continue;
    char line[128];
    std::snprintf(line, sizeof line, " %zu %s of %.2f M elements in all;", calls[i], comm_op_name(op),
                  static_cast<double>(elements[i]) / 1e6);
    out += line;
  }
  if (const MemoryTracker* device = model_ ? model_->device_memory() : nullptr)
    out += "\nGPU memory of this rank's shard (the optimizer and the flat buffers are on the host):\n" +
           device->report();
  return out;
}

std::vector<float> TensorParallelStrategy::held_values(const TrainModel& /*model*/,
                                                       const std::vector<float>& whole) const {
  const TpLayout& shard = model_->shard();
  require(whole.size() == shard.whole().num_params(), "resume",
          "the values hold " + std::to_string(whole.size()) + " parameters, config " + shard.config().name + " has " +
              std::to_string(shard.whole().num_params()),
          "resume from a checkpoint written by scalelab train --save-state for this config");
  std::vector<float> mine(shard.layout().num_params());
  shard.shard(whole.data(), mine.data());
  return zero_ ? zero_->shard_of(mine) : mine;
}

void TensorParallelStrategy::save_weights(const TrainModel& model, const std::string& path) const {
  // Replica 0's tp group assembles the whole model from every rank's pieces; its rank 0 writes.
  // The shard's fp32 parameters, or master weights; under ZeRO-1 put together over the replicas
  // (collectively), since in mixed precision each holds its part of the master weights only.
  const float* mine = model_->master_params();
  const std::vector<float> values = zero_ ? zero_->gathered_params()
                                          : std::vector<float>(mine, mine + model_->num_params());
  if (grid_->coord().dp == 0)
    gather_and_save_weights(grid_->tp(), path, model.config(), model_->shard().held(values.data()));
  world_.barrier();  // the file is complete when any rank returns
}

void TensorParallelStrategy::save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const {
  // Under ZeRO-1 each shard's replicas first put their parts of m and v together.
  const TrainCheckpoint mine = zero_ ? zero_->gather(checkpoint) : checkpoint;
  if (grid_->coord().dp == 0) {
    const TpLayout& shard = model_->shard();
    gather_and_save_checkpoint(grid_->tp(), mine, path, [&](const float* values) { return shard.held(values); });
  }
  world_.barrier();
}

}  // namespace scalelab
