// A pipeline rank's model chunks over one flat buffer (stage 05).
#include "dist/pipeline_stage_model.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "dist/tp_mixed_model.hpp"
#include "dist/tp_model.hpp"
#include "io/checkpoint.hpp"
#include "precision/half_type.hpp"
#include "train/fp32_model.hpp"

namespace scalelab {

ModelSlice pipeline_stage_slice(const GPTConfig& config, int stage, int stages) {
  const int L = config.num_layers;
  require(stages <= L, "pp",
          std::to_string(stages) +
              " model stages (--pp x model chunks) need at least as many layers, and the model "
              "has " +
              std::to_string(L),
          "use at most " + std::to_string(L) + " model stages, or a deeper config");
  SCALELAB_CHECK(stage >= 0 && stage < stages, "model stage ", stage, " of ", stages);
  const int base = L / stages, extra = L % stages;
  const int first = stage * base + std::min(stage, extra);
  const int count = base + (stage < extra ? 1 : 0);
  return ModelSlice::layers(config, first, count);
}

namespace {

std::vector<ModelSlice> chunk_slices(const GPTConfig& config, const PipelineShape& shape, int rank) {
  std::vector<ModelSlice> slices;
  for (int c = 0; c < shape.chunks; ++c)
    slices.push_back(pipeline_stage_slice(config, model_stage(shape, rank, c), shape.model_stages()));
  return slices;
}

// A chunk's tensors as this rank holds them: the slice's, or its tensor-parallel split.
ParamLayout chunk_layout(const GPTConfig& config, const ModelSlice& slice, StageTensorParallel tp) {
  return tp.comm ? TpLayout(config, slice, tp.comm->size(), tp.comm->rank()).layout() : ParamLayout(config, slice);
}

ParamLayout stage_layout(const GPTConfig& config, const std::vector<ModelSlice>& slices, StageTensorParallel tp) {
  std::vector<ParamLayout> layouts;
  for (const ModelSlice& s : slices) layouts.push_back(chunk_layout(config, s, tp));
  return ParamLayout::concatenate(layouts);
}

std::optional<HalfFormat> half_format_or_none(const std::string& precision) {
  if (precision == "fp32") return std::nullopt;
  return parse_half_format(precision);
}

constexpr std::size_t kStepChunk = 1 << 16;  // the mixed step's gradients unscaled per chunk

}  // namespace

PipelineStageModel::PipelineStageModel(const GPTConfig& config, const PipelineShape& shape, int rank,
                                       MemoryTracker* tracker, StageTensorParallel tp, const std::string& precision,
                                       MasterShard master, const DeviceChunkFactory& device)
    : config_(config),
      tp_(tp),
      slices_(chunk_slices(config, shape, rank)),
      layout_(stage_layout(config, slices_, tp)),
      half_(half_format_or_none(precision)) {
  const std::size_t n = layout_.num_params();
  const BlockPartition shard{n, master.parts};
  const std::size_t master_begin = shard.offset(master.rank), master_end = master_begin + shard.size(master.rank);
  master_sharded_ = master.parts > 1;
  if (mixed()) {
    half_params_ = Buffer<std::uint16_t>(n, MemCategory::kParams, tracker);
    half_grads_ = Buffer<std::uint16_t>(n, MemCategory::kGrads, tracker);
    master_ = Buffer<float>(master_end - master_begin, MemCategory::kOptimizer, tracker);
    // The step's workspace, where this stage steps itself (with a MasterShard the distributed
    // optimizer steps it, with its own).
    if (!master_sharded_) step_chunk_ = Buffer<float>(std::min(n, kStepChunk), MemCategory::kWorkspace, tracker);
  } else {
    params_ = Buffer<float>(n, MemCategory::kParams, tracker);
    grads_ = Buffer<float>(n, MemCategory::kGrads, tracker);
  }
  if (device) {
    require(!tp.comm || tp.device, "tp",
            "--tp with --pp on --device cuda: this program gave the stages no GPU tensor-parallel shards",
            "run scalelab train (built with CUDA), or use --device cpu");
    device_memory_ = std::make_unique<MemoryTracker>();
  }
  std::size_t offset = 0;
  for (const ModelSlice& slice : slices_) {
    // Mixed precision: the chunk's tensors [offset, chunk_end) in the stage's flat buffers; its
    // master weights: the part of the stage's held range [master_begin, master_end) on the chunk.
    MixedStorage storage;
    if (mixed()) {
      const std::size_t chunk_end = offset + chunk_layout(config, slice, tp).num_params();
      const std::size_t held_begin = std::clamp(master_begin, offset, chunk_end);
      const std::size_t held_end = std::clamp(master_end, held_begin, chunk_end);
      storage.slice = slice;
      storage.param_data = half_params_.data() + offset;
      storage.grad_data = half_grads_.data() + offset;
      storage.master_begin = held_begin - offset;
      storage.master_end = held_end - offset;
      storage.master_data = master_.data() + (held_begin - master_begin);
    }
    // On a device: the same range of the flat buffers, as the device chunk's host copy.
    DeviceChunkStorage host;
    host.slice = slice;
    if (mixed()) {
      host.mixed = storage;
    } else {
      host.params = params_.data() + offset;
      host.grads = grads_.data() + offset;
    }
    std::unique_ptr<TpShardModel> tp_shard;  // tp x pp: the CPU's split of the slice
    if (tp.comm && mixed())
      tp_shard = std::make_unique<MixedTensorParallelModel>(config, *tp.comm, tp.sequence_parallel, *half_, tracker,
                                                            storage);
    else if (tp.comm)
      tp_shard = std::make_unique<TensorParallelModel>(config, slice, *tp.comm, tp.sequence_parallel, tracker,
                                                       params_.data() + offset, grads_.data() + offset);
    if (tp_shard && device) {  // computing on the GPU, the CPU tp_shard keeping the host side
      chunks_.push_back(std::make_unique<DeviceTpShardModel>(std::move(tp_shard), host, tp.device, precision, *tp.comm,
                                                             device_memory_.get()));
    } else if (tp_shard) {
      chunks_.push_back(std::move(tp_shard));
    } else if (device) {
      chunks_.push_back(device(config, precision, host, device_memory_.get()));
    } else if (mixed()) {
      chunks_.push_back(
          std::make_unique<MixedChunk>(std::make_unique<MixedPrecisionModel>(config, *half_, tracker, storage)));
    } else {
      chunks_.push_back(std::make_unique<GptChunk>(
          std::make_unique<GPT>(config, tracker, slice, params_.data() + offset, grads_.data() + offset)));
    }
    offsets_.push_back(offset);
    offset += chunks_.back()->num_params();
  }
}

namespace {

template <typename Chunk>
Chunk& as_gpt_chunk(Chunk* c) {
  require(c != nullptr, "pp",
          "this pipeline stage's chunks are tensor-parallel splits or mixed-precision slices, not fp32 GPT slices",
          "use chunk_at(c) (dist/pipeline_chunk.hpp), which serves every kind");
  return *c;
}

}  // namespace

GPT& PipelineStageModel::chunk(int c) { return as_gpt_chunk(dynamic_cast<GptChunk*>(chunks_.at(c).get())).gpt(); }

const GPT& PipelineStageModel::chunk(int c) const {
  return as_gpt_chunk(dynamic_cast<const GptChunk*>(chunks_.at(c).get())).gpt();
}

std::vector<const Communicator*> PipelineStageModel::tp_communicators() {
  std::vector<const Communicator*> comms;
  for (auto& c : chunks_)
    if (auto* t = dynamic_cast<TpShardModel*>(c.get())) comms.push_back(t->group().comm);
  return comms;
}

void PipelineStageModel::finish_gradients() {
  for (auto& c : chunks_)
    if (auto* t = dynamic_cast<TpShardModel*>(c.get())) t->finish_gradients();
}

IndexRanges PipelineStageModel::counted_elsewhere() const {
  IndexRanges out;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const std::size_t at = offsets_[c];
    const ModelSlice& s = slices_[c];
    if (s.head && !s.embeddings) {  // the head's copy of the tied wte: model stage 0 counts it
      const ParamTensor& wte = chunks_[c]->layout().find("transformer.wte.weight");
      out.emplace_back(at + wte.offset, at + wte.offset + wte.numel);
    }
    if (const auto* t = dynamic_cast<const TpShardModel*>(chunks_[c].get()))
      for (const auto& [begin, end] : t->counted_elsewhere()) out.emplace_back(at + begin, at + end);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<float> PipelineStageModel::held_values(const std::vector<float>& whole) const {
  std::vector<float> mine(num_params());
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const std::vector<float> slice = held_by_name(config_, ParamLayout(config_, slices_[c]), whole);
    if (tp_.comm)
      TpLayout(config_, slices_[c], tp_.comm->size(), tp_.comm->rank()).shard(slice.data(), mine.data() + offsets_[c]);
    else
      std::copy(slice.begin(), slice.end(), mine.begin() + static_cast<std::ptrdiff_t>(offsets_[c]));
  }
  return mine;
}

std::vector<HeldTensor> PipelineStageModel::held(const float* values) const {
  std::vector<HeldTensor> out;
  for (std::size_t c = 0; c < chunks_.size(); ++c) {
    const float* v = values + offsets_[c];
    const std::vector<HeldTensor> h = tp_.comm ? dynamic_cast<const TpShardModel&>(*chunks_[c]).shard().held(v)
                                               : held_tensors(chunks_[c]->layout(), v);
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

std::size_t PipelineStageModel::wte_numel() const {
  const int rows = tp_.comm ? vocab_range(config_.vocab_size, tp_.comm->size(), tp_.comm->rank()).local
                            : config_.vocab_size;
  return static_cast<std::size_t>(rows) * config_.channels;
}

std::size_t PipelineStageModel::stashed_count() const {
  std::size_t n = 0;
  for (const auto& c : chunks_) n += c->stashed_count();
  return n;
}

namespace {
[[noreturn]] void refuse_alone() {
  throw ConfigError(
      "pipeline: a pipeline stage holds only some blocks and runs through the pipeline executor; "
      "train it with scalelab train --pp P under mpirun");
}
}  // namespace

double PipelineStageModel::forward(const int*, const int*, int, int) { refuse_alone(); }

void PipelineStageModel::backward(double) { refuse_alone(); }

void PipelineStageModel::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  std::fill(half_grads_.begin(), half_grads_.end(), std::uint16_t{0});
  for (auto& c : chunks_) c->zero_grads();
}

void PipelineStageModel::load_params() {
  for (auto& c : chunks_) c->load_params();
}

void PipelineStageModel::store_grads() {
  for (auto& c : chunks_) c->store_grads();
}

float* PipelineStageModel::params() {
  require(!mixed(), "precision", "the stage's fp32 parameters were asked for, and it keeps them in " + precision_name(),
          "use master_params() (the fp32 master weights) in mixed precision");
  return params_.data();
}

TrainModel::GradBuffer PipelineStageModel::typed_grads() {
  if (!mixed()) return {grads_.data(), DataType::kFloat32};
  return {half_grads_.data(), half_data_type(*half_)};
}

void PipelineStageModel::broadcast_params(Communicator& group, int root) {
  if (!mixed()) {
    group.broadcast(params_.data(), num_params(), root);
    return;
  }
  if (master_sharded_) {
    group.broadcast(half_params_.data(), num_params(), half_data_type(*half_), root);
    return;
  }
  group.broadcast(master_.data(), num_params(), root);
  float_to_half(half_params_.data(), master_.data(), num_params(), *half_);
}

void PipelineStageModel::set_checkpoint_policy(const CheckpointPolicy& policy) {
  for (auto& c : chunks_) c->set_checkpoint_policy(policy);
}

void PipelineStageModel::set_attention(AttentionKind kind) {
  for (auto& c : chunks_) c->set_attention(kind);
}

void PipelineStageModel::init_weights(std::uint64_t seed) {
  for (auto& c : chunks_) c->init_weights(seed);  // each tensor as the whole model's initialisation gives it
}

void PipelineStageModel::set_master_params(const float* values) {
  if (!mixed()) {
    std::copy(values, values + num_params(), params_.data());
    return;
  }
  require_all_master("set_master_params");
  std::copy(values, values + num_params(), master_.data());
  float_to_half(half_params_.data(), master_.data(), num_params(), *half_);
}

void PipelineStageModel::require_all_master(const char* what) const {
  SCALELAB_CHECK(!master_sharded_, what,
                 ": this stage holds a shard of its master weights; the distributed optimizer "
                 "(dist/distributed_optimizer.hpp) sets them and steps");
}

TrainModel::StepOutcome PipelineStageModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale,
                                                           double clip) {
  return step_with_norm(optimizer, lr, grad_scale, clip, {}, [](double s) { return s; });
}

TrainModel::StepOutcome PipelineStageModel::step_with_norm(AdamW& optimizer, double lr, double grad_scale, double clip,
                                                           const IndexRanges& skip,
                                                           const std::function<double(double)>& total) {
  const std::size_t n = num_params();
  if (!mixed()) {
    const GradNormFn norm_of = [&](const float* g, std::size_t count) {
      return std::sqrt(total(sum_squares_skipping(g, 0, count, skip)));
    };
    return fp32_optimizer_step(optimizer, params_.data(), grads_.data(), n, lr, grad_scale, clip, norm_of);
  }
  // Stage 03's step over the stage's flat buffers, chunk by chunk, with the same norm.
  require_all_master("step_with_norm");
  MixedNorm norm;
  norm.share = [&](const float* g, std::size_t offset, std::size_t count) {
    return sum_squares_skipping_at(g, offset, offset + count, skip);
  };
  norm.total = total;
  const MixedStepBuffers buffers{master_.data(), half_params_.data(), half_grads_.data(), n,
                                 *half_,         step_chunk_.data(),  step_chunk_.size()};
  return mixed_optimizer_step(optimizer, buffers, lr, grad_scale, clip, norm);
}

std::size_t PipelineStageModel::block_forward_count() const {
  std::size_t n = 0;
  for (const auto& c : chunks_) n += c->block_forward_count();
  return n;
}

}  // namespace scalelab
