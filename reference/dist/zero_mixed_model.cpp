// Stage 07 in mixed precision: ZeRO-1, -2 and -3 around the mixed-precision GPT. The GPT's own
// forward and backward (precision/mixed_model.cpp) run unchanged; its grad-ready hook starts a
// unit's reduce-scatter in half as soon as backward has finished the unit, under stages 2 and 3
// its gradient storage is this model's working buffers, and under stage 3 its parameter source
// is this model's gathers.
#include "dist/zero_mixed_model.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.hpp"
#include "optim/adamw.hpp"

namespace scalelab {

namespace {

constexpr std::size_t kChunk = 1 << 16;  // gradients widened per chunk (the optimizer step, stage 2's sums)

// What the mixed-precision model keeps itself: the master weights of this rank's shard; the
// gradient buffer only under stage 1, the half parameters only under stages 1 and 2.
MixedStorage mixed_storage(const ZeroShards& shards, int stage) {
  MixedStorage m;
  m.master_begin = shards.begin();
  m.master_end = shards.end();
  m.grads = stage == 1;
  m.params = stage <= 2;
  return m;
}

}  // namespace

ZeroMixedModel::ZeroMixedModel(const GPTConfig& config, int stage, HalfFormat format, Communicator& dp,
                               MemoryTracker* tracker)
    : stage_(stage),
      comm_(dp),
      tracker_(tracker),
      shards_((config.validate(), config), dp.rank(), dp.size()),
      mixed_(config, format, tracker, mixed_storage(shards_, stage)),
      param_shard_(stage == 3 ? shards_.size() : 0, MemCategory::kParams, tracker),
      grad_shard_(stage >= 2 ? shards_.size() : 0, MemCategory::kGrads, tracker),
      chunk_(2 * std::max<std::size_t>(1, std::min(shards_.size(), kChunk)), MemCategory::kWorkspace, tracker),
      working_(shards_.units().size()) {
  require(stage >= 1 && stage <= 3, "zero", "ZeRO stage " + std::to_string(stage) + " does not exist",
          "use --zero 1 (optimizer state), 2 (+ gradients) or 3 (+ parameters)");
  mixed_.set_grad_ready_hook([this](std::size_t offset) { on_grads_ready(offset); });
  if (stage >= 2) mixed_.set_grad_storage([this](std::size_t offset) { return grad_place(offset); });
  if (stage == 3)
    mixed_.set_param_source(
        [this](std::size_t offset, bool block_backward) { return param_place(offset, block_backward); });
}

void ZeroMixedModel::init_weights(std::uint64_t seed) {
  mixed_.init_weights(seed);  // every rank draws the whole model (the same seed) and keeps its shard
  if (stage_ == 3) float_to_half(param_shard_.data(), mixed_.master_params(), shards_.size(), mixed_.format());
}

void ZeroMixedModel::set_master_params(const float* values) {
  mixed_.set_master_params(values);
  if (stage_ <= 2)
    all_gather_params();
  else
    float_to_half(param_shard_.data(), mixed_.master_params(), shards_.size(), mixed_.format());
}

void ZeroMixedModel::all_gather_params() {
  // In place: this rank's shard sits at its offset of the whole buffer (BlockPartition's cut).
  std::uint16_t* params = mixed_.half_params();
  comm_.all_gather(params + shards_.begin(), params, shards_.num_params(), mixed_.half_type());
}

void ZeroMixedModel::zero_grad() {
  mixed_.zero_grad();
  std::fill(grad_shard_.begin(), grad_shard_.end(), std::uint16_t{0});
  first_contribution_ = true;
}

void ZeroMixedModel::begin_step(int micro_batches) {
  SCALELAB_CHECK(micro_batches >= 1, "begin_step: ", micro_batches, " micro-batches");
  backwards_left_ = stage_ == 1 ? micro_batches - 1 : 0;
  communicating_ = backwards_left_ == 0;
  timeline_.clear();
}

double ZeroMixedModel::forward(const int* tokens, const int* targets, int B, int T) {
  if (stage_ == 3) gather_root();
  resume_compute();
  const double loss = mixed_.forward(tokens, targets, B, T);
  pause_compute("forward");
  release_all();
  return loss;
}

void ZeroMixedModel::backward(double loss_scale) {
  in_backward_ = true;
  if (stage_ == 3) gather_root();  // the head needs wte, ln_f's backward its weight
  resume_compute();
  mixed_.backward(loss_scale);
  pause_compute("backward");
  finish_reductions(0);
  release_all();
  in_backward_ = false;
  for (const auto& w : working_) SCALELAB_CHECK(w.size() == 0, "a unit's gradients were not reduce-scattered");
  if (communicating_) {
    first_contribution_ = false;
  } else if (--backwards_left_ == 0) {
    communicating_ = true;  // stage 1: the next backward is the step's last
  }
}

// ---- gradients: where they live, and their reduce-scatter ----------------------------------

std::size_t ZeroMixedModel::unit_index(std::size_t offset) const {
  const auto& units = shards_.units();  // in layout order, covering the buffer
  const auto after = std::upper_bound(units.begin(), units.end(), offset,
                                      [](std::size_t o, const ZeroUnit& u) { return o < u.begin; });
  SCALELAB_CHECK(after != units.begin() && offset < (after - 1)->end, "offset ", offset, " is in no ZeRO unit");
  return static_cast<std::size_t>(after - units.begin()) - 1;
}

std::uint16_t* ZeroMixedModel::grad_place(std::size_t offset) {
  const std::size_t u = unit_index(offset);
  const ZeroUnit& unit = shards_.units()[u];
  Buffer<std::uint16_t>& w = working_[u];
  if (w.size() == 0) {  // the unit's backward starts: a zeroed buffer, as the gradients accumulate
    if (unit.block >= 0) {
      // At most one block's gradients still travel while this block's are computed.
      pause_compute("backward");
      finish_reductions(1);
      resume_compute();
    }
    w = Buffer<std::uint16_t>(unit.size(), MemCategory::kGrads, tracker_);
  }
  return w.data() + (offset - unit.begin);
}

void ZeroMixedModel::on_grads_ready(std::size_t offset) {
  const ZeroUnit* unit = shards_.unit_starting_at(offset);
  if (unit == nullptr || !communicating_) return;  // stage 1: earlier micro-batches add up locally
  pause_compute("backward");
  Reduction& r = reductions_.emplace_back();
  r.unit = unit;
  const std::uint16_t* send = nullptr;
  if (stage_ == 1) {
    send = mixed_.half_grads() + unit->begin;  // in the whole gradient buffer
  } else {
    r.grads = std::move(working_[unit_index(offset)]);
    send = r.grads.data();
  }
  r.recv = Buffer<std::uint16_t>(shards_.piece_size(*unit), MemCategory::kComm, tracker_);
  r.start_us = timeline_.now_us();
  r.request = comm_.ireduce_scatter_v(send, r.recv.data(), unit->pieces, mixed_.half_type(), ReduceOp::kSum);
  resume_compute();
}

void ZeroMixedModel::finish_reduction(Reduction& r) {
  const ZeroUnit& u = *r.unit;
  comm_.wait(r.request);
  timeline_.add("reduce-scatter " + u.name, "comm", 1, r.start_us, timeline_.now_us());
  const std::size_t n = shards_.piece_size(u);
  std::uint16_t* mine = grad_shard() + (shards_.piece_begin(u) - shards_.begin());
  if (stage_ == 1 || first_contribution_) {
    std::copy_n(r.recv.data(), n, mine);
    return;
  }
  // Stage 2, a later micro-batch: the sums add up in the shard, in fp32, rounded to half once.
  const HalfFormat format = mixed_.format();
  const std::size_t half_chunk = chunk_.size() / 2;
  float* acc = chunk_.data();
  float* add = chunk_.data() + half_chunk;
  for (std::size_t at = 0; at < n; at += half_chunk) {
    const std::size_t count = std::min(half_chunk, n - at);
    half_to_float(acc, mine + at, count, format);
    half_to_float(add, r.recv.data() + at, count, format);
    for (std::size_t i = 0; i < count; ++i) acc[i] += add[i];
    float_to_half(mine + at, acc, count, format);
  }
}

void ZeroMixedModel::finish_reductions(std::size_t keep) {
  while (reductions_.size() > keep) {
    finish_reduction(reductions_.front());
    reductions_.pop_front();
  }
}

// ---- stage 3: parameters gathered when the model reads them -------------------------------

const std::uint16_t* ZeroMixedModel::param_place(std::size_t offset, bool block_backward) {
  const ZeroUnit& unit = shards_.units()[unit_index(offset)];
  if (unit.block < 0) {  // the embeddings or ln_f, gathered for the whole pass
    const Gathered& root = &unit == &shards_.embeddings() ? root_emb_ : root_lnf_;
    SCALELAB_CHECK(root.weights.size() == unit.size(), unit.name, " read outside forward and backward");
    return root.weights.data() + (offset - unit.begin);
  }
  // Waiting for a gather is not compute: the timeline leaves it out, so that each block's
  // compute is an interval of its own (and the prefetch shows as overlapping it).
  pause_compute(in_backward_ ? "backward" : "forward");
  gather_around_block(unit.block, block_backward);
  resume_compute();
  return blocks_.front().weights.data() + (offset - unit.begin);
}

void ZeroMixedModel::start_gather(Gathered& g, const ZeroUnit& unit) {
  g.block = unit.block;
  g.weights = Buffer<std::uint16_t>(unit.size(), MemCategory::kParams, tracker_);
  const std::size_t own = shards_.piece_size(unit), at = unit.pieces.offset(shards_.rank());
  if (own > 0)
    std::copy_n(param_shard_.data() + (shards_.piece_begin(unit) - shards_.begin()), own, g.weights.data() + at);
  g.start_us = timeline_.now_us();
  g.request = comm_.iall_gather_v(g.weights.data() + at, g.weights.data(), unit.pieces, mixed_.half_type());
  g.pending = true;
}

void ZeroMixedModel::finish_gather(Gathered& g) {
  if (!g.pending) return;
  comm_.wait(g.request);
  g.pending = false;
  timeline_.add(g.block >= 0 ? "gather block " + std::to_string(g.block) : std::string("gather root"), "comm", 1,
                g.start_us, timeline_.now_us());
}

void ZeroMixedModel::gather_around_block(int l, bool backward) {
  // As the fp32 model's (dist/zero_model.cpp): free every gathered block but l, gather l if it
  // was not prefetched, then start the next block of this pass (none while a checkpointed
  // segment is recomputed during backward).
  while (!blocks_.empty() && blocks_.front().block != l) {
    finish_gather(blocks_.front());
    blocks_.pop_front();
  }
  if (blocks_.empty()) start_gather(blocks_.emplace_back(), shards_.block(l));
  while (blocks_.size() > 1) {
    finish_gather(blocks_.back());
    blocks_.pop_back();
  }
  finish_gather(blocks_.front());
  const int next = backward ? l - 1 : (in_backward_ ? -1 : l + 1);
  if (next >= 0 && next < config().num_layers) start_gather(blocks_.emplace_back(), shards_.block(next));
}

void ZeroMixedModel::gather_root() {
  start_gather(root_emb_, shards_.embeddings());
  start_gather(root_lnf_, shards_.head());
  finish_gather(root_emb_);
  finish_gather(root_lnf_);
}

void ZeroMixedModel::release_all() {
  for (Gathered& g : blocks_) finish_gather(g);
  blocks_.clear();
  root_emb_.weights = Buffer<std::uint16_t>();
  root_lnf_.weights = Buffer<std::uint16_t>();
}

// ---- the optimizer step on this rank's shard -----------------------------------------------

TrainModel::StepOutcome ZeroMixedModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) {
  // Stage 03's step (precision/mixed_step.cpp) on the shard, with the norm over the whole model.
  StepOutcome out;
  const HalfFormat format = mixed_.format();
  const std::size_t n = shards_.size(), chunk = chunk_.size();
  const std::uint16_t* half_grads = grad_shard();
  std::uint16_t* half_params = own_params();
  float* master = mixed_.held_master();
  float* g = chunk_.data();
  const float scale = static_cast<float>(grad_scale);
  auto unscale = [&](std::size_t offset, std::size_t count) {
    half_to_float(g, half_grads + offset, count, format);
    if (scale != 1.0f)
      for (std::size_t i = 0; i < count; ++i) g[i] *= scale;
  };
  double squares = 0;
  for (std::size_t offset = 0; offset < n; offset += chunk) {
    const std::size_t count = std::min(chunk, n - offset);
    unscale(offset, count);
    for (std::size_t i = 0; i < count; ++i) squares += static_cast<double>(g[i]) * g[i];
  }
  comm_.all_reduce(&squares, 1);  // every rank the same norm: an inf or NaN anywhere skips everywhere
  out.grad_norm = std::sqrt(squares);
  if (!std::isfinite(out.grad_norm)) {
    out.skipped = true;
    return out;
  }
  const double coef = clip > 0 ? clip / (out.grad_norm + 1e-6) : 1.0;
  optimizer.begin_step();
  for (std::size_t offset = 0; offset < n; offset += chunk) {
    const std::size_t count = std::min(chunk, n - offset);
    unscale(offset, count);
    if (coef < 1.0) {
      const float c = static_cast<float>(coef);
      for (std::size_t i = 0; i < count; ++i) g[i] *= c;
    }
    optimizer.update_range(master + offset, g, offset, count, lr);
    float_to_half(half_params + offset, master + offset, count, format);
  }
  if (stage_ == 3) return out;  // stage 3 gathers parameters when a unit needs them
  const double t0 = timeline_.now_us();
  all_gather_params();
  timeline_.add("all-gather parameters", "comm", 1, t0, timeline_.now_us());
  return out;
}

}  // namespace scalelab
