// This rank's shard of the GPT under tensor parallelism (stage 06).
#include "dist/tp_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/carve.hpp"
#include "core/error.hpp"
#include "dist/tp_linear.hpp"
#include "dist/vocab_parallel.hpp"
#include "model/batch_check.hpp"
#include "model/gpt.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/layernorm.hpp"
#include "train/fp32_model.hpp"

namespace scalelab {

namespace {

// Sizes a layout before allocating: take() only counts.
struct Counter {
  std::size_t used = 0;
  float* take(std::size_t n) {
    used += n;
    return nullptr;
  }
};

}  // namespace

TensorParallelModel::TensorParallelModel(const GPTConfig& config, Communicator& tp_comm, bool sequence_parallel,
                                         MemoryTracker* tracker)
    : shard_(config, tp_comm.size(), tp_comm.rank()), tracker_(tracker) {
  tp_.comm = &tp_comm;
  tp_.sequence_parallel = sequence_parallel;
  const std::size_t n = shard_.layout().num_params();
  params_ = Buffer<float>(n, MemCategory::kParams, tracker);
  grads_ = Buffer<float>(n, MemCategory::kGrads, tracker);
  w_ = tp_param_view(shard_, params_.data());
  g_ = tp_param_view(shard_, grads_.data());
}

template <typename Values>
void TensorParallelModel::carve_activations(Values& v) {
  using Kind = CheckpointPolicy::Kind;
  const TpDims& d = dims_;
  const int L = config().num_layers;
  const std::size_t region = region_elements(), N = d.N();
  encoded_ = v.take(region);
  boundaries_.assign(1, encoded_);
  // As GPTModel: a boundary per further segment and a separate output with segments; else L
  // slots, the last one's residual3 being the output; selective shares one att buffer.
  for (int seg = 1; seg < segment_count(acts_policy_, L); ++seg) boundaries_.push_back(v.take(region));
  if (has_segments(acts_policy_)) final_input_ = v.take(region);
  const bool own_att = acts_policy_.kind != Kind::kSelective;
  blocks_.assign(static_cast<std::size_t>(activation_slots(acts_policy_, L)), BlockActs<float>{});
  for (auto& b : blocks_) carve_tp_block_acts(b, v, d, own_att);
  if (!own_att) {
    float* shared_att = v.take(static_cast<std::size_t>(d.NHl()) * N * d.T);
    for (auto& b : blocks_) b.att = shared_att;
  }
  if (!has_segments(acts_policy_)) final_input_ = blocks_.back().residual3;
  head_.lnf = v.take(N * d.C);
  head_.lnf_mean = v.take(d.rows());
  head_.lnf_rstd = v.take(d.rows());
  head_.probs = v.take(N * shard_.vocab().local);
  head_.losses = v.take(N);
}

void TensorParallelModel::ensure_buffers(int B, int T) {
  const bool same_policy = acts_policy_.kind == policy_.kind && acts_policy_.every == policy_.every;
  if (act_buffer_.size() > 0 && dims_.B == B && dims_.T == T && same_policy) return;
  const int t = tp_.size();
  const std::size_t N = static_cast<std::size_t>(B) * T;
  require(!tp_.sequence_parallel || N % static_cast<std::size_t>(t) == 0, "sequence_parallel",
          "--sequence-parallel splits the " + std::to_string(N) +
              " token rows of a micro-batch (B x T = " + std::to_string(B) + " x " + std::to_string(T) +
              ") over --tp " + std::to_string(t) + " ranks, and they do not divide",
          "choose a batch and sequence length whose product divides by --tp, or drop --sequence-parallel");
  dims_ = TpDims{B, T, config().channels, config().num_heads, t, tp_.sequence_parallel};
  acts_policy_ = policy_;
  Counter count;
  carve_activations(count);
  act_buffer_ = Buffer<float>();  // free the old ones first, so the peak is not their sum
  act_buffer_ = Buffer<float>(count.used, MemCategory::kActivations, tracker_);
  Carver<float> acts(act_buffer_.data(), act_buffer_.size());
  carve_activations(acts);
  SCALELAB_CHECK(acts.used_all(), "tensor-parallel activation layout does not add up");

  const std::size_t Vl = static_cast<std::size_t>(shard_.vocab().local);
  Counter sized;
  carve_tp_block_scratch(scratch_, sized, dims_);
  scratch_buffer_ = Buffer<float>();
  scratch_buffer_ = Buffer<float>(sized.used + region_elements() + N * Vl, MemCategory::kWorkspace, tracker_);
  Carver<float> s(scratch_buffer_.data(), scratch_buffer_.size());
  carve_tp_block_scratch(scratch_, s, dims_);
  dres_ = s.take(region_elements());
  dlogits_ = s.take(N * Vl);
}

double TensorParallelModel::forward(const int* tokens, const int* targets, int B, int T) {
  check_batch(config(), tokens, targets, B, T);
  ensure_buffers(B, T);
  const int C = config().channels;
  const std::size_t N = dims_.N();
  tokens_.assign(tokens, tokens + N);
  targets_.assign(targets, targets + N);
  label("embedding");
  vocab_parallel_embedding_forward(tp_, encoded_, scratch_.full, tokens, w_.wte, w_.wpe, shard_.vocab(), B, T, C);
  walk_blocks_forward(*this, policy_);
  label("head");
  float* lnf = tp_.sequence_parallel ? scratch_.ln : head_.lnf;
  layernorm_forward(lnf, head_.lnf_mean, head_.lnf_rstd, final_input_, w_.lnf_w, w_.lnf_b,
                    static_cast<int>(dims_.rows()), C);
  // The LM head: column-parallel over the vocabulary, no bias; its logits land in probs.
  column_parallel_forward(tp_, head_.probs, head_.lnf, lnf, w_.wte, nullptr, static_cast<int>(N), C,
                          shard_.vocab().local);
  label("cross-entropy");
  return vocab_parallel_cross_entropy_forward(tp_, head_.probs, head_.losses, head_.probs, targets, shard_.vocab(),
                                              static_cast<int>(N));
}

void TensorParallelModel::backward(double loss_scale) {
  SCALELAB_CHECK(dims_.B > 0, "backward() called before forward()");
  const int C = config().channels, N = static_cast<int>(dims_.N());
  // mean loss over N positions: d loss / d loss[i] = 1/N
  vocab_parallel_cross_entropy_backward(dlogits_, head_.probs, targets_.data(), shard_.vocab(),
                                        static_cast<float>(loss_scale) / static_cast<float>(N), N);
  label("head");
  float* dlnf = scratch_.dln;
  column_parallel_backward(tp_, dlnf, tp_.sequence_parallel ? scratch_.full : dlnf, g_.wte, nullptr, dlogits_,
                           head_.lnf, w_.wte, N, C, shard_.vocab().local);
  std::fill(dres_, dres_ + region_elements(), 0.0f);
  layernorm_backward(dres_, g_.lnf_w, g_.lnf_b, dlnf, final_input_, w_.lnf_w, head_.lnf_mean, head_.lnf_rstd,
                     static_cast<int>(dims_.rows()), C);
  walk_blocks_backward(*this, policy_);
  label("embedding");
  vocab_parallel_embedding_backward(tp_, g_.wte, g_.wpe, dres_, scratch_.full, tokens_.data(), shard_.vocab(), dims_.B,
                                    dims_.T, C);
}

void TensorParallelModel::forward_block(int l, int slot, ActPlace x) {
  label("block " + std::to_string(l));
  tp_block_forward(tp_, blocks_[slot], w_.blocks[l], place(x), scratch_, dims_);
  ++block_forwards_;
}

void TensorParallelModel::backward_block(int l, int slot, ActPlace x) {
  label("block " + std::to_string(l));
  tp_block_backward(tp_, dres_, g_.blocks[l], blocks_[slot], w_.blocks[l], place(x), scratch_, dims_);
}

void TensorParallelModel::keep_boundary(int s, ActPlace x) {
  std::memcpy(boundaries_[s], place(x), region_elements() * sizeof(float));
}

void TensorParallelModel::store_output(ActPlace x) {
  if (place(x) != final_input_) std::memcpy(final_input_, place(x), region_elements() * sizeof(float));
}

void TensorParallelModel::recompute_attention(int /*block*/, int slot) {
  BlockActs<float>& a = blocks_[slot];
  attention_forward(scratch_.dnarrow, a.att, a.qkv, dims_.B, dims_.T, dims_.Cl(), dims_.NHl());  // output discarded
}

void TensorParallelModel::zero_grad() { std::fill(grads_.data(), grads_.data() + grads_.size(), 0.0f); }

void TensorParallelModel::init_weights(std::uint64_t seed) {
  // The whole model's values once (a transient host copy, not the model's memory), then ours.
  std::vector<float> whole(shard_.whole().num_params());
  init_gpt2_weights(shard_.whole(), config().num_layers, whole.data(), seed);
  shard_.shard(whole.data(), params_.data());
}

void TensorParallelModel::set_master_params(const float* values) {
  std::copy(values, values + params_.size(), params_.data());
}

double TensorParallelModel::sum_squares(const float* g, std::size_t begin, std::size_t end) const {
  double s = 0;
  const auto& tensors = shard_.layout().tensors();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (shard_.split(i) == TpSplit::kReplicated && tp_.rank() != 0) continue;
    const std::size_t first = std::max(begin, tensors[i].offset);
    const std::size_t last = std::min(end, tensors[i].offset + tensors[i].numel);
    for (std::size_t k = first; k < last; ++k) s += static_cast<double>(g[k]) * g[k];
  }
  return s;
}

TrainModel::StepOutcome TensorParallelModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale,
                                                            double clip) {
  const GradNormFn norm_of = [this](const float* g, std::size_t n) {
    double s = sum_squares(g, 0, n);
    tp_.comm->all_reduce(&s, 1);
    return std::sqrt(s);
  };
  return fp32_optimizer_step(optimizer, params_.data(), grads_.data(), params_.size(), lr, grad_scale, clip, norm_of);
}

void TensorParallelModel::set_attention(AttentionKind kind) {
  require(kind == AttentionKind::kNaive, "attention",
          std::string("--attention ") + attention_kind_name(kind) +
              " is not built for tensor parallelism (--tp) in this build: its blocks split the heads with naive "
              "attention",
          "use --attention naive, or --tp 1");
}

}  // namespace scalelab
