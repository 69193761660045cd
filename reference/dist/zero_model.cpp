// Stage 07: ZeRO's model. The GPT's own forward and backward (model/gpt.cpp) run unchanged; the
// block hook and the grad-ready hook move the bytes: gather a block's parameters before it runs
// (stage 3), give its gradients a working buffer (stages 2, 3), reduce-scatter a unit as soon as
// backward has finished it. The optimizer step updates this rank's shard only.
#include "dist/zero_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "comm/ring.hpp"
#include "core/error.hpp"
#include "train/fp32_model.hpp"

namespace scalelab {

namespace {

// Block l's view over a buffer holding just that block, laid out as in the flat buffer.
BlockView<float> block_view(const GPTConfig& config, int l, float* base) {
  return make_param_view(config, ModelSlice{l, 1, false, false}, base).blocks.front();
}

}  // namespace

ZeroModel::ZeroModel(const GPTConfig& config, int stage, Communicator& dp, DdpOptions::Algorithm algorithm,
                     MemoryTracker* tracker, bool offload)
    : stage_(stage),
      offload_(offload),
      comm_(dp),
      algorithm_(algorithm),
      tracker_(tracker),
      shards_((config.validate(), config), dp.rank(), dp.size()),
      params_(stage <= 2 ? shards_.num_params() : shards_.size(), MemCategory::kParams, tracker),
      grads_(stage == 1 ? shards_.num_params()
             : offload  ? 0
                        : shards_.size(),
             MemCategory::kGrads, tracker),
      host_master_(offload ? shards_.size() : 0, MemCategory::kParams, &host_tracker_),
      host_grads_(offload ? shards_.size() : 0, MemCategory::kGrads, &host_tracker_),
      gpt_(config, tracker, ModelSlice{}, stage <= 2 ? params_.data() : nullptr, stage == 1 ? grads_.data() : nullptr),
      w_(gpt_.weight_views()),
      g_(gpt_.grad_views()) {
  require(stage >= 1 && stage <= 3, "zero", "ZeRO stage " + std::to_string(stage) + " does not exist",
          "use --zero 1 (optimizer state), 2 (+ gradients) or 3 (+ parameters)");
  SCALELAB_CHECK(!offload || stage <= 2, "offload with ZeRO stage ", stage, " (the strategy refuses it)");
  gpt_.set_block_hook([this](int l, bool backward) { on_block(l, backward); });
  gpt_.set_grad_ready_hook([this](std::size_t offset) { on_grads_ready(offset); });
}

void ZeroModel::init_weights(std::uint64_t seed) {
  if (stage_ <= 2) {
    init_gpt2_weights(layout(), config().num_layers, params_.data(), seed);
    std::copy(own_params(), own_params() + host_master_.size(), host_master_.data());  // offload's master
    return;
  }
  // Every rank draws the whole model (the same values: the same seed) and keeps its shard.
  Buffer<float> whole(shards_.num_params(), MemCategory::kWorkspace, tracker_);
  init_gpt2_weights(layout(), config().num_layers, whole.data(), seed);
  std::copy(whole.data() + shards_.begin(), whole.data() + shards_.end(), params_.data());
}

void ZeroModel::set_master_params(const float* values) {
  std::copy(values, values + shards_.size(), own_params());
  std::copy(values, values + host_master_.size(), host_master_.data());
  if (stage_ <= 2) all_gather_params();
}

void ZeroModel::copy_master_in() {
  if (offload_) std::copy(host_master_.begin(), host_master_.end(), own_params());
}

void ZeroModel::all_gather_params() {
  // LAB 07 BEGIN ZeroModel::all_gather_params: section 3
  // The shards are the collectives' own even cut (BlockPartition), so one all-gather of the
  // whole buffer hands every rank everyone else's shard, in place.
  if (ring())
    ring_all_gather(comm_, params_.data(), shards_.num_params());
  else
    comm_.all_gather(own_params(), params_.data(), shards_.num_params(), DataType::kFloat32);
  // LAB 07 END
}

void ZeroModel::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  std::fill(host_grads_.begin(), host_grads_.end(), 0.0f);
  first_contribution_ = true;
}

void ZeroModel::begin_step(int micro_batches) {
  SCALELAB_CHECK(micro_batches >= 1, "begin_step: ", micro_batches, " micro-batches");
  backwards_left_ = stage_ == 1 ? micro_batches - 1 : 0;
  communicating_ = backwards_left_ == 0;
  timeline_.clear();
}

double ZeroModel::forward(const int* tokens, const int* targets, int B, int T) {
  if (stage_ == 3) gather_root();
  resume_compute();
  const double loss = gpt_.forward(tokens, targets, B, T);
  pause_compute("forward");
  if (stage_ == 3) {
    release_blocks();
    release_root();
  }
  return loss;
}

void ZeroModel::backward(double loss_scale) {
  in_backward_ = true;
  if (stage_ == 3) gather_root();  // the head needs wte, ln_f's backward its weight
  if (stage_ >= 2) {
    root_g_emb_ = grad_buffer(shards_.embeddings());
    root_g_lnf_ = grad_buffer(shards_.head());
    point_root(g_, root_g_emb_.data(), root_g_lnf_.data());
  }
  resume_compute();
  gpt_.backward(static_cast<float>(loss_scale));
  pause_compute("backward");
  finish_reductions(0);
  if (stage_ == 3) {
    release_blocks();
    release_root();
  }
  in_backward_ = false;
  if (communicating_) {
    first_contribution_ = false;
  } else if (--backwards_left_ == 0) {
    communicating_ = true;  // stage 1: the next backward is the step's last
  }
}

// ---- the hooks -----------------------------------------------------------------------------

void ZeroModel::pause_compute(const char* what) {
  timeline_.add(what, "compute", 0, compute_from_us_, timeline_.now_us());
}

void ZeroModel::resume_compute() { compute_from_us_ = timeline_.now_us(); }

void ZeroModel::on_block(int l, bool backward) {
  // The time spent here waiting for collectives is not compute: the timeline leaves it out.
  pause_compute(in_backward_ ? "backward" : "forward");
  if (stage_ == 3) gather_around_block(l, backward);
  if (backward && stage_ >= 2) {
    // At most one block's gradients still travel while this block's are computed.
    finish_reductions(1);
    block_grads_ = grad_buffer(shards_.block(l));
    g_.blocks[static_cast<std::size_t>(l)] = block_view(config(), l, block_grads_.data());
  }
  gpt_.set_views(w_, g_);
  resume_compute();
}

void ZeroModel::on_grads_ready(std::size_t offset) {
  const ZeroUnit* unit = shards_.unit_starting_at(offset);
  if (unit == nullptr || !communicating_) return;
  pause_compute("backward");
  reductions_.emplace_back();
  Reduction& r = reductions_.back();
  r.unit = unit;
  if (stage_ >= 2)
    r.grads = std::move(unit->block >= 0 ? block_grads_ : unit == &shards_.head() ? root_g_lnf_ : root_g_emb_);
  start_reduction(r);
  resume_compute();
}

// ---- stage 3: parameters gathered on demand ------------------------------------------------

void ZeroModel::start_gather(Gathered& g, const ZeroUnit& unit) {
  // LAB 07 BEGIN ZeroModel::start_gather: section 4
  g.block = unit.block;
  g.weights = Buffer<float>(unit.size(), MemCategory::kParams, tracker_);
  const std::size_t own = shards_.piece_size(unit), at = unit.pieces.offset(shards_.rank());
  if (own > 0) {
    const float* mine = params_.data() + (shards_.piece_begin(unit) - shards_.begin());
    std::copy(mine, mine + own, g.weights.data() + at);
  }
  g.start_us = timeline_.now_us();
  if (ring()) {
    ring_all_gather_v(comm_, g.weights.data(), unit.pieces);  // blocking: nothing to overlap
    timeline_.add("gather " + unit.name, "comm", 1, g.start_us, timeline_.now_us());
    return;
  }
  g.request = comm_.iall_gather_v(g.weights.data() + at, g.weights.data(), unit.pieces, DataType::kFloat32);
  g.pending = true;
  // LAB 07 END
}

void ZeroModel::finish_gather(Gathered& g) {
  if (!g.pending) return;
  comm_.wait(g.request);
  g.pending = false;
  timeline_.add("gather block " + std::to_string(g.block), "comm", 1, g.start_us, timeline_.now_us());
}

void ZeroModel::gather_around_block(int l, bool backward) {
  // LAB 07 BEGIN ZeroModel::gather_around_block: section 4
  // Free every gathered block but l, waiting for a gather still in flight first (the
  // collective still writes into its buffer). blocks_ holds at most l and a prefetch.
  while (!blocks_.empty() && blocks_.front().block != l) {
    finish_gather(blocks_.front());
    blocks_.pop_front();
  }
  if (blocks_.empty()) {  // not prefetched (the first block of a pass, or a recompute)
    blocks_.emplace_back();
    start_gather(blocks_.back(), shards_.block(l));
  }
  while (blocks_.size() > 1) {  // a prefetch of a block other than l's successor
    finish_gather(blocks_.back());
    blocks_.pop_back();
  }
  Gathered& g = blocks_.front();
  finish_gather(g);
  w_.blocks[static_cast<std::size_t>(l)] = block_view(config(), l, g.weights.data());
  // The next block in this pass's order starts gathering now, so that it travels while block l
  // computes. A recompute (checkpointing, during backward) prefetches nothing.
  const int next = backward ? l - 1 : (in_backward_ ? -1 : l + 1);
  if (next >= 0 && next < config().num_layers) {
    blocks_.emplace_back();
    start_gather(blocks_.back(), shards_.block(next));
  }
  // LAB 07 END
}

void ZeroModel::release_blocks() {
  for (Gathered& g : blocks_) finish_gather(g);
  blocks_.clear();
}

Buffer<float> ZeroModel::gather_unit(const ZeroUnit& unit) {
  Gathered g;
  start_gather(g, unit);
  finish_gather(g);
  return std::move(g.weights);
}

void ZeroModel::gather_root() {
  root_w_emb_ = gather_unit(shards_.embeddings());
  root_w_lnf_ = gather_unit(shards_.head());
  point_root(w_, root_w_emb_.data(), root_w_lnf_.data());
}

void ZeroModel::release_root() {
  root_w_emb_ = Buffer<float>();
  root_w_lnf_ = Buffer<float>();
}

void ZeroModel::point_root(ParamView<float>& view, float* embeddings, float* lnf) {
  view.wte = embeddings;
  view.wpe = embeddings + static_cast<std::size_t>(config().vocab_size) * config().channels;
  view.lnf_w = lnf;
  view.lnf_b = lnf + config().channels;
  gpt_.set_views(w_, g_);
}

// ---- gradients reduce-scattered as backward finishes them ---------------------------------

Buffer<float> ZeroModel::grad_buffer(const ZeroUnit& unit) {
  return Buffer<float>(unit.size(), MemCategory::kGrads, tracker_);  // zeroed: gradients accumulate (+=)
}

void ZeroModel::start_reduction(Reduction& r) {
  // LAB 07 BEGIN ZeroModel::start_reduction: section 3
  const ZeroUnit& u = *r.unit;
  // Stage 1 reduces in the full gradient buffer, stages 2 and 3 from the unit's working buffer.
  float* send = stage_ == 1 ? grads_.data() + u.begin : r.grads.data();
  r.start_us = timeline_.now_us();
  if (ring()) {
    // In place: afterwards this rank's piece of `send` holds the sum (comm/ring.hpp).
    ring_reduce_scatter_v(comm_, send, u.pieces);
    r.recv = Buffer<float>();
  } else {
    r.recv = Buffer<float>(shards_.piece_size(u), MemCategory::kComm, tracker_);
    r.request = comm_.ireduce_scatter_v(send, r.recv.data(), u.pieces, DataType::kFloat32, ReduceOp::kSum);
  }
  // LAB 07 END
}

void ZeroModel::finish_reduction(Reduction& r) {
  // LAB 07 BEGIN ZeroModel::finish_reduction: section 3
  const ZeroUnit& u = *r.unit;
  comm_.wait(r.request);
  timeline_.add("reduce-scatter " + u.name, "comm", 1, r.start_us, timeline_.now_us());
  const std::size_t n = shards_.piece_size(u);
  if (n == 0) return;
  const float* sum = ring() ? (stage_ == 1 ? grads_.data() + u.begin : r.grads.data()) + u.pieces.offset(shards_.rank())
                            : r.recv.data();
  float* mine = own_grads() + (shards_.piece_begin(u) - shards_.begin());
  if (stage_ == 1 || first_contribution_) {
    if (sum != mine) std::memcpy(mine, sum, n * sizeof(float));
  } else {
    for (std::size_t i = 0; i < n; ++i) mine[i] += sum[i];  // stages 2, 3: micro-batches add up in the shard
  }
  // LAB 07 END
}

void ZeroModel::finish_reductions(std::size_t keep) {
  while (reductions_.size() > keep) {
    finish_reduction(reductions_.front());
    reductions_.pop_front();
  }
}

// ---- the optimizer step --------------------------------------------------------------------

TrainModel::StepOutcome ZeroModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) {
  // LAB 07 BEGIN ZeroModel::optimizer_step: section 3
  // The norm over the whole model: each rank sums the squares of its shard, the group adds them.
  const GradNormFn global_norm = [this](const float* g, std::size_t n) {
    double squares = 0;
    for (std::size_t i = 0; i < n; ++i) squares += static_cast<double>(g[i]) * g[i];
    comm_.all_reduce(&squares, 1);
    return std::sqrt(squares);
  };
  const StepOutcome out = fp32_optimizer_step(optimizer, master_shard(), own_grads(), shards_.size(), lr, grad_scale,
                                              clip, global_norm);
  if (out.skipped || stage_ == 3) return out;  // stage 3 gathers parameters when a block needs them
  // Every rank updated its shard; the all-gather hands each rank everyone else's.
  const double t0 = timeline_.now_us();
  copy_master_in();
  all_gather_params();
  timeline_.add("all-gather parameters", "comm", 1, t0, timeline_.now_us());
  return out;
  // LAB 07 END
}

}  // namespace scalelab
