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

TensorParallelModel::TensorParallelModel(const GPTConfig& config, const ModelSlice& slice, Communicator& tp_comm,
                                         bool sequence_parallel, MemoryTracker* tracker, float* params, float* grads)
    : shard_(config, slice, tp_comm.size(), tp_comm.rank()), tracker_(tracker), params_(params), grads_(grads) {
  tp_.comm = &tp_comm;
  tp_.sequence_parallel = sequence_parallel;
  tp_.tracker = tracker;
  const std::size_t n = shard_.layout().num_params();
  SCALELAB_CHECK((params == nullptr) == (grads == nullptr), "give both parameter and gradient buffers, or neither");
  if (!params_) {
    own_params_ = Buffer<float>(n, MemCategory::kParams, tracker);
    own_grads_ = Buffer<float>(n, MemCategory::kGrads, tracker);
    params_ = own_params_.data();
    grads_ = own_grads_.data();
  }
  w_ = tp_param_view(shard_, params_);
  g_ = tp_param_view(shard_, grads_);
  if (tp_comm.rank() != 0) counted_elsewhere_ = replicated_ranges(shard_);
}

template <typename Values>
void TensorParallelModel::carve_activations(Values& v, Saved& a) {
  using Kind = CheckpointPolicy::Kind;
  const TpDims& d = dims_;
  const int L = num_blocks();
  const std::size_t region = region_elements(), N = d.N();
  a.encoded = v.take(region);
  a.boundaries.assign(1, a.encoded);
  // As GPTModel: a boundary per further segment and a separate output with segments; else L
  // slots, the last one's residual3 being the output; selective shares one att buffer.
  for (int seg = 1; seg < segment_count(a.policy, L); ++seg) a.boundaries.push_back(v.take(region));
  if (has_segments(a.policy)) a.final_input = v.take(region);
  const bool own_att = a.policy.kind != Kind::kSelective;
  a.blocks.assign(static_cast<std::size_t>(activation_slots(a.policy, L)), BlockActs<float>{});
  for (auto& b : a.blocks) carve_tp_block_acts(b, v, d, own_att);
  if (!own_att) {
    float* shared_att = v.take(static_cast<std::size_t>(d.NHl()) * N * d.T);
    for (auto& b : a.blocks) b.att = shared_att;
  }
  if (!has_segments(a.policy)) a.final_input = a.blocks.back().residual3;
  a.head = {};
  if (!slice().head) return;
  a.head.lnf = v.take(N * d.C);
  a.head.lnf_mean = v.take(d.rows());
  a.head.lnf_rstd = v.take(d.rows());
  a.head.probs = v.take(N * shard_.vocab().local);
  a.head.losses = v.take(N);
}

void TensorParallelModel::ensure_buffers(int B, int T) {
  const std::size_t N = static_cast<std::size_t>(B) * T;
  const bool same_shape = dims_.B == B && dims_.T == T && dims_.attention == attention_;
  dims_ = tp_dims(tp_, config(), B, T, attention_);
  // The saved activations: reallocated when the shape or the policy changed, or after they were
  // stashed or released (stage 05: one set per micro-batch in flight).
  const bool same_policy = acts_.policy.kind == policy_.kind && acts_.policy.every == policy_.every;
  if (acts_.buffer.size() == 0 || !same_shape || !same_policy || acts_.dims.attention != attention_) {
    acts_.buffer = Buffer<float>();  // free the old ones first, so the peak is not their sum
    acts_.policy = policy_;
    acts_.dims = dims_;
    Counter<float> count;
    carve_activations(count, acts_);
    acts_.buffer = Buffer<float>(count.used, MemCategory::kActivations, tracker_);
    Carver<float> carver(acts_.buffer.data(), acts_.buffer.size());
    carve_activations(carver, acts_);
    SCALELAB_CHECK(carver.used_all(), "tensor-parallel activation layout does not add up");
  }
  if (scratch_buffer_.size() > 0 && same_shape) return;
  const std::size_t Vl = slice().head ? static_cast<std::size_t>(shard_.vocab().local) : 0;
  Counter<float> sized;
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
  return forward_slice(tokens, nullptr, targets, B, T);
}

std::size_t TensorParallelModel::boundary_elements(int B, int T) const {
  return tp_.local_rows(static_cast<std::size_t>(B) * T) * config().channels;
}

float TensorParallelModel::forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) {
  ensure_buffers(B, T);
  const int C = config().channels;
  const std::size_t N = dims_.N();
  if (slice().embeddings) {
    acts_.tokens.assign(tokens, tokens + N);
    label("embedding");
    vocab_parallel_embedding_forward(tp_, acts_.encoded, scratch_.full, tokens, w_.wte, w_.wpe, shard_.vocab(), B, T,
                                     C);
  } else {
    std::copy(input, input + region_elements(), acts_.encoded);  // the previous stage's rows
  }
  walk_blocks_forward(*this, policy_);
  if (!slice().head) return 0.0f;
  acts_.targets.assign(targets, targets + N);
  label("head");
  Saved::Head& h = acts_.head;
  float* lnf = tp_.sequence_parallel ? scratch_.ln : h.lnf;
  layernorm_forward(lnf, h.lnf_mean, h.lnf_rstd, acts_.final_input, w_.lnf_w, w_.lnf_b, static_cast<int>(dims_.rows()),
                    C);
  // The LM head: column-parallel over the vocabulary, no bias; its logits land in probs.
  column_parallel_forward(tp_, h.probs, h.lnf, lnf, w_.wte, nullptr, static_cast<int>(N), C, shard_.vocab().local);
  label("cross-entropy");
  return static_cast<float>(vocab_parallel_cross_entropy_forward(tp_, h.probs, h.losses, h.probs, targets,
                                                                 shard_.vocab(), static_cast<int>(N)));
}

void TensorParallelModel::backward(double loss_scale) {
  SCALELAB_CHECK(acts_.dims.B > 0, "backward() called before forward()");
  backward_slice(nullptr, static_cast<float>(loss_scale));
}

void TensorParallelModel::backward_slice(const float* doutput, float loss_scale) {
  backward_pass(doutput, loss_scale, false);
}

void TensorParallelModel::backward_input(const float* doutput, float loss_scale) {
  backward_pass(doutput, loss_scale, true);
}

void TensorParallelModel::backward_weight() {
  SCALELAB_CHECK(!acts_.tape.empty() || num_blocks() == 0, "backward_weight() without a backward_input() before it");
  acts_.tape.apply();
}

void TensorParallelModel::backward_pass(const float* doutput, float loss_scale, bool split) {
  SCALELAB_CHECK(acts_.buffer.size() > 0, "backward with no saved forward");
  const int C = config().channels, N = static_cast<int>(dims_.N());
  if (slice().head) {
    Saved::Head& h = acts_.head;
    // mean loss over N positions: d loss / d loss[i] = 1/N
    vocab_parallel_cross_entropy_backward(dlogits_, h.probs, acts_.targets.data(), shard_.vocab(),
                                          loss_scale / static_cast<float>(N), N);
    label("head");
    float* dlnf = scratch_.dln;
    column_parallel_backward(tp_, dlnf, tp_.sequence_parallel ? scratch_.full : dlnf, g_.wte, nullptr, dlogits_, h.lnf,
                             w_.wte, N, C, shard_.vocab().local);
    std::fill(dres_, dres_ + region_elements(), 0.0f);
    layernorm_backward(dres_, g_.lnf_w, g_.lnf_b, dlnf, acts_.final_input, w_.lnf_w, h.lnf_mean, h.lnf_rstd,
                       static_cast<int>(dims_.rows()), C);
  } else {
    std::copy(doutput, doutput + region_elements(), dres_);  // d loss / d output, from the next stage
  }
  if (split) {
    // Every block's input gradient now (no checkpointing: block l's activations in slot l), the
    // linear layers' weight gradients on the tape.
    SCALELAB_CHECK(policy_.kind == CheckpointPolicy::Kind::kNone,
                   "the split backward reads saved activations: it runs without checkpointing");
    acts_.tape.reserve(static_cast<std::size_t>(num_blocks()) * tp_block_tape_elements(dims_), tracker_);
    const DeferWeightGrad defer = [this](float* dweight, const float* dout, const float* inp, int n, int c, int oc) {
      acts_.tape.record(dweight, nullptr, dout, inp, n, c, oc);
    };
    for (int l = num_blocks() - 1; l >= 0; --l) {
      label("block " + std::to_string(slice().first_layer + l));
      const float* x = l == 0 ? acts_.encoded : acts_.blocks[static_cast<std::size_t>(l - 1)].residual3;
      tp_block_backward(tp_, dres_, g_.blocks[l], acts_.blocks[static_cast<std::size_t>(l)], w_.blocks[l], x, scratch_,
                        dims_, &defer);
    }
  } else {
    walk_blocks_backward(*this, policy_);
  }
  if (!slice().embeddings) return;  // dres_ is d loss / d input: input_grad()
  label("embedding");
  vocab_parallel_embedding_backward(tp_, g_.wte, g_.wpe, dres_, scratch_.full, acts_.tokens.data(), shard_.vocab(),
                                    dims_.B, dims_.T, C);
}

void TensorParallelModel::stash_activations(int key) { in_flight_.stash(acts_, key); }

void TensorParallelModel::restore_activations(int key) { in_flight_.restore(acts_, key, dims_); }

void TensorParallelModel::release_activations() { TpInFlight<Saved>::release(acts_); }

void TensorParallelModel::forward_block(int l, int slot, ActPlace x) {
  label("block " + std::to_string(slice().first_layer + l));
  tp_block_forward(tp_, acts_.blocks[slot], w_.blocks[l], place(x), scratch_, dims_);
  ++block_forwards_;
}

void TensorParallelModel::backward_block(int l, int slot, ActPlace x) {
  label("block " + std::to_string(slice().first_layer + l));
  tp_block_backward(tp_, dres_, g_.blocks[l], acts_.blocks[slot], w_.blocks[l], place(x), scratch_, dims_);
}

void TensorParallelModel::keep_boundary(int s, ActPlace x) {
  std::memcpy(acts_.boundaries[s], place(x), region_elements() * sizeof(float));
}

void TensorParallelModel::store_output(ActPlace x) {
  if (place(x) != acts_.final_input) std::memcpy(acts_.final_input, place(x), region_elements() * sizeof(float));
}

void TensorParallelModel::recompute_attention(int /*block*/, int slot) {
  BlockActs<float>& a = acts_.blocks[slot];
  attention_forward(scratch_.dnarrow, a.att, a.qkv, dims_.B, dims_.T, dims_.Cl(), dims_.NHl());  // output discarded
}

void TensorParallelModel::zero_grad() { std::fill(grads_, grads_ + num_params(), 0.0f); }

void TensorParallelModel::init_weights(std::uint64_t seed) {
  // The whole slice's values once (a transient host copy, not the model's memory), then ours.
  std::vector<float> whole(shard_.whole().num_params());
  init_gpt2_weights(config(), shard_.whole(), whole.data(), seed);
  shard_.shard(whole.data(), params_);
}

void TensorParallelModel::set_master_params(const float* values) { std::copy(values, values + num_params(), params_); }

TrainModel::StepOutcome TensorParallelModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale,
                                                            double clip) {
  const GradNormFn norm_of = [this](const float* g, std::size_t n) {
    double s = sum_squares_skipping(g, 0, n, counted_elsewhere_);
    tp_.comm->all_reduce(&s, 1);
    return std::sqrt(s);
  };
  return fp32_optimizer_step(optimizer, params_, grads_, num_params(), lr, grad_scale, clip, norm_of);
}

void TensorParallelModel::set_checkpoint_policy(const CheckpointPolicy& policy) {
  check_attention_policy(attention_, policy);
  policy_ = policy;
}

void TensorParallelModel::set_attention(AttentionKind kind) {
  check_attention_policy(kind, policy_);
  attention_ = kind;
}

}  // namespace scalelab
