// The GPU GPT: buffers, the embeddings and the head, forward and backward. The structure is
// model/gpt.cpp's; the blocks under a checkpoint policy (stage 02) go through the walk of
// model/block_walk.cpp, which calls this model's BlockRunner functions at the end of this file.
#include "kernels/model/gpu_gpt.hpp"

#include <algorithm>

#include <string>

#include "core/carve.hpp"
#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/dtype.hpp"
#include "kernels/layers/attention.hpp"
#include "kernels/layers/crossentropy.hpp"
#include "kernels/layers/encoder.hpp"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/matmul.hpp"
#include "kernels/model/gpu_params.hpp"
#include "model/batch_check.hpp"
#include "model/gpt.hpp"

namespace scalelab::cuda {

std::size_t gpu_stat_elements(const GPTConfig& c, int B, int T, const CheckpointPolicy& policy, AttentionKind attention,
                              const ModelSlice& slice) {
  const ModelSlice s = slice.resolved(c);
  const std::size_t slots = activation_slots(policy, s.num_layers);
  const std::size_t lse = attention == AttentionKind::kFlash ? static_cast<std::size_t>(c.num_heads) * B * T
                                                             : 0;             // per slot
  const std::size_t head = s.head ? 3 * static_cast<std::size_t>(B) * T : 0;  // ln_f's mean and rstd, the losses
  return slots * (gpu_block_stat_elements(B, T) + lse) + head;
}

void require_gpu_attention(AttentionKind kind, const CheckpointPolicy& policy) {
  require(kind != AttentionKind::kChunked, "attention",
          "--attention chunked has no GPU kernel: it is the CPU's step between naive and flash",
          "use --attention flash (or naive) with --device cuda, or run chunked with --device cpu");
  check_attention_policy(kind, policy);
}

template <typename F>
void GpuGPT<F>::set_attention(AttentionKind kind) {
  require_gpu_attention(kind, policy_);
  attention_ = kind;
}

std::size_t gpu_logits_padding_elements(const GPTConfig& c, int B, int T) {
  return static_cast<std::size_t>(B) * T * (gpu_padded_vocab(c.vocab_size) - c.vocab_size);
}

template <typename F>
GpuGPT<F>::GpuGPT(const GPTConfig& config, MemoryTracker* tracker, const GpuOptions& options)
    : config_(config),
      slice_((config.validate(), options.slice.resolved(config))),
      layout_(config, slice_),
      tracker_(tracker),
      blas_(stream_.get(), tracker, options.allow_tf32),
      params_(options.own_params ? layout_.num_params() : 0, MemCategory::kParams, tracker),
      grads_(options.own_grads ? layout_.num_params() : 0, MemCategory::kGrads, tracker),
      w_(options.own_params
             ? device_param_view(layout_, slice_, params_.data())
             : ParamView<F>{nullptr, nullptr, std::vector<BlockView<F>>(slice_.num_layers), nullptr, nullptr}),
      g_(options.own_grads
             ? device_param_view(layout_, slice_, grads_.data())
             : ParamView<F>{nullptr, nullptr, std::vector<BlockView<F>>(slice_.num_layers), nullptr, nullptr}),
      loss_(1, MemCategory::kWorkspace, tracker),
      ln_scratch_(layernorm_backward_scratch_elements(config.channels), MemCategory::kWorkspace, tracker) {
  require(slice_.is_whole(config_) || (options.own_params && options.own_grads), "pp",
          "a GPU model slice with ZeRO-2 or -3's gradient or parameter hooks", "use --zero 1 with --pp");
  scratch_.ln_partials = ln_scratch_.data();
  for (int l = 0; l < slice_.num_layers; ++l)
    block_offsets_.push_back(
        layout_.find("transformer.h." + std::to_string(slice_.first_layer + l) + ".ln_1.weight").offset);
  if (slice_.head) lnf_offset_ = layout_.find("transformer.ln_f.weight").offset;
}

template <typename F>
void GpuGPT<F>::ensure_buffers(int B, int T) {
  ensure_scratch(B, T);
  const bool same_policy = acts_.policy.kind == policy_.kind && acts_.policy.every == policy_.every;
  // Reallocated when the shape, policy or attention kind changed, or after they were stashed or
  // released (stage 05).
  if (act_buffer_.size() > 0 && acts_.B == B && acts_.T == T && same_policy && acts_attention_ == attention_) return;
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  // Free the old buffers first, so the peak is not their sum.
  act_buffer_ = DeviceBuffer<F>();
  stat_buffer_ = DeviceBuffer<float>();
  tokens_ = DeviceBuffer<int>();
  targets_ = DeviceBuffer<int>();
  const std::size_t stats = gpu_stat_elements(config_, B, T, policy_, attention_, slice_);
  const std::size_t padding = slice_.head ? gpu_logits_padding_elements(config_, B, T) : 0;
  const std::size_t values = activation_elements(config_, B, T, policy_, slice_, attention_) - stats + padding;
  act_buffer_ = DeviceBuffer<F>(values, MemCategory::kActivations, tracker_);
  stat_buffer_ = DeviceBuffer<float>(stats, MemCategory::kActivations, tracker_);
  tokens_ = DeviceBuffer<int>(BT, MemCategory::kWorkspace, tracker_);
  targets_ = DeviceBuffer<int>(BT, MemCategory::kWorkspace, tracker_);
  assign_activations(B, T);
}

template <typename F>
void GpuGPT<F>::ensure_scratch(int B, int T) {
  if (scratch_B_ == B && scratch_T_ == T && scratch_attention_ == attention_) return;
  const bool flash = attention_ == AttentionKind::kFlash;
  const std::size_t BTC = static_cast<std::size_t>(B) * T * config_.channels;
  const std::size_t datt = flash ? 0
                                 : config_.num_heads * static_cast<std::size_t>(T) * T;  // attention_scratch_elements
  scratch_buffer_ = DeviceBuffer<F>();
  scratch_buffer_ = DeviceBuffer<F>(8 * BTC + datt, MemCategory::kWorkspace, tracker_);
  scratch_B_ = B;
  scratch_T_ = T;
  scratch_attention_ = attention_;
  Carver<F> s(scratch_buffer_.data(), scratch_buffer_.size());
  scratch_.proj = s.take(BTC);
  scratch_.dbtc = s.take(BTC);
  scratch_.dwide = s.take(4 * BTC);
  scratch_.datt = flash ? nullptr : s.take(datt);
  dres_ = s.take(BTC);
  dlnf_ = s.take(BTC);
}

template <typename F>
void GpuGPT<F>::assign_activations(int B, int T) {
  using Kind = CheckpointPolicy::Kind;
  const int C = config_.channels, L = slice_.num_layers, NH = config_.num_heads;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  Carver<F> p(act_buffer_.data(), act_buffer_.size());
  Carver<float> q(stat_buffer_.data(), stat_buffer_.size());
  acts_.B = B;
  acts_.T = T;
  acts_.policy = policy_;
  acts_attention_ = attention_;
  acts_.encoded = p.take(BTC);
  acts_.boundaries.assign(1, acts_.encoded);
  // As the CPU model lays them out (model/gpt.cpp): boundaries and the output with segments,
  // then the slots; selective shares one att buffer.
  for (int seg = 1; seg < segment_count(policy_, L); ++seg) acts_.boundaries.push_back(p.take(BTC));
  if (has_segments(policy_)) acts_.final_input = p.take(BTC);
  const bool flash = attention_ == AttentionKind::kFlash;
  const bool own_att = policy_.kind != Kind::kSelective && !flash;
  acts_.blocks.resize(activation_slots(policy_, L));
  for (auto& b : acts_.blocks) {
    carve_block_acts(b, p, q, B, T, C, NH, own_att);
    // Flash: the log-sum-exp in fp32 where the CPU block keeps lse (after its values).
    b.lse = flash ? q.take(static_cast<std::size_t>(NH) * BT) : nullptr;
  }
  if (policy_.kind == Kind::kSelective) {
    F* shared_att = p.take(static_cast<std::size_t>(NH) * BT * T);
    for (auto& b : acts_.blocks) b.att = shared_att;
  }
  if (!has_segments(policy_)) acts_.final_input = acts_.blocks.back().residual3;
  if (slice_.head) carve_head_acts(acts_, p, q, B, T, C, padded_vocab());  // probs (B,T,V), rows Vp apart: B T Vp
  SCALELAB_CHECK(p.used_all(), "activation layout does not add up");
  SCALELAB_CHECK(q.used_all(), "statistics layout does not add up");
}

template <typename F>
double GpuGPT<F>::forward(const int* tokens, const int* targets, int B, int T) {
  SCALELAB_CHECK(slice_.embeddings && slice_.head, "forward() of slice ", slice_.describe(config_),
                 ": use forward_slice()");
  return forward_slice(tokens, nullptr, targets, B, T);
}

template <typename F>
double GpuGPT<F>::forward_slice(const int* tokens, const F* input, const int* targets, int B, int T) {
  SCALELAB_CHECK(slice_.embeddings ? tokens != nullptr : input != nullptr, "slice ", slice_.describe(config_),
                 slice_.embeddings ? " starts from tokens" : " starts from input activations");
  SCALELAB_CHECK(!slice_.head || targets != nullptr, "slice ", slice_.describe(config_), " needs targets");
  const int C = config_.channels, V = config_.vocab_size, Vp = padded_vocab();
  // A kernel cannot throw: ids are checked on the host.
  check_batch(config_, slice_.embeddings ? tokens : nullptr, slice_.head ? targets : nullptr, B, T);
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  ensure_buffers(B, T);
  if (slice_.embeddings) tokens_.copy_from_host(tokens, BT);
  if (slice_.head) targets_.copy_from_host(targets, BT);
  probs_hold_dlogits_ = false;

  cudaStream_t st = stream();
  const int N = static_cast<int>(BT);
  source_root(false);
  if (slice_.embeddings) {
    SCALELAB_CHECK(w_.wte != nullptr, "forward without parameters: set_param_source() first");
    encoder_forward(acts_.encoded, tokens_.data(), w_.wte, w_.wpe, B, T, C, st);
  } else {
    copy_activation(acts_.encoded, input);  // kept: block 0's backward reads its input
  }
  walk_blocks_forward(*this, policy_);
  if (!slice_.head) return 0;
  layernorm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, acts_.final_input, w_.lnf_w, w_.lnf_b, N, C, st);
  // logits (B,T,V), rows Vp apart: the V rows of wte (V,C), written with an aligned leading dimension
  matmul_forward<F>(acts_.probs, acts_.lnf, w_.wte, nullptr, N, C, V, Vp, blas_);
  // The losses alone: backward recomputes the softmax from the logits and the losses, which saves
  // writing the (B,T,V) probabilities and reading them back.
  crossentropy_loss(acts_.losses, acts_.probs, targets_.data(), N, V, Vp, st);
  mean_loss(loss_.data(), acts_.losses, N, st);
  float loss = 0;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(&loss, loss_.data(), sizeof(float), cudaMemcpyDeviceToHost, st));
  stream_.synchronize();
  return loss;
}

template <typename F>
void GpuGPT<F>::backward(float loss_scale) {
  SCALELAB_CHECK(acts_.B > 0, "backward() called before forward()");
  SCALELAB_CHECK(slice_.head, "backward(loss_scale) of slice ", slice_.describe(config_),
                 ", which has no head: use backward_slice(doutput)");
  SCALELAB_CHECK(!probs_hold_dlogits_, "backward() called twice after one forward()");
  const int B = acts_.B, T = acts_.T, C = config_.channels, V = config_.vocab_size, Vp = padded_vocab(), N = B * T;
  cudaStream_t st = stream();
  // Mean loss over N positions: d loss / d loss[i] = 1/N (in float, as the CPU computes it).
  // dlogits overwrite the logits they are computed from (with the forward's losses), which saves
  // a (B,T,V) buffer: with GPT-2's V = 50257 the largest tensor of the model.
  F* dlogits = acts_.probs;
  crossentropy_backward_logits(dlogits, acts_.probs, acts_.losses, targets_.data(), loss_scale / static_cast<float>(N),
                               N, V, Vp, st);
  probs_hold_dlogits_ = true;
  source_root(true);  // ZeRO-3: the head reads wte, ln_f's backward its weight
  if (grad_place_) {  // ZeRO-2: the head writes wte's gradient, ln_f's backward its own
    point_unit(g_, 0, grad_place_(0));
    point_unit(g_, lnf_offset_, grad_place_(lnf_offset_));
  }
  SCALELAB_CHECK(g_.wte != nullptr, "backward without a gradient buffer: set_grad_storage() first");
  matmul_backward<F>(dlnf_, g_.wte, nullptr, dlogits, acts_.lnf, w_.wte, N, C, V, Vp, blas_);  // dlogits rows Vp apart
  SCALELAB_CUDA_CHECK(cudaMemsetAsync(dres_, 0, static_cast<std::size_t>(N) * C * sizeof(F), st));
  layernorm_backward(dres_, g_.lnf_w, g_.lnf_b, scratch_.ln_partials, dlnf_, acts_.final_input, w_.lnf_w,
                     acts_.lnf_mean, acts_.lnf_rstd, N, C, st);
  notify_grads_ready(lnf_offset_);  // ln_f's gradient kernels are enqueued
  walk_blocks_backward(*this, policy_);
  if (slice_.embeddings) encoder_backward(g_.wte, g_.wpe, dres_, tokens_.data(), B, T, C, st);
  notify_grads_ready(0);  // the embeddings (wte also got the LM head's gradient) are enqueued
}

template <typename F>
void GpuGPT<F>::backward_slice(const F* doutput, float loss_scale) {
  if (slice_.head) {
    backward(loss_scale);
    return;
  }
  SCALELAB_CHECK(acts_.B > 0, "backward_slice() called before forward_slice()");
  SCALELAB_CHECK(doutput != nullptr, "slice ", slice_.describe(config_), " needs d loss / d output");
  copy_activation(dres_, doutput);  // the blocks' backward updates it in place
  walk_blocks_backward(*this, policy_);
  if (slice_.embeddings)
    encoder_backward(g_.wte, g_.wpe, dres_, tokens_.data(), acts_.B, acts_.T, config_.channels, stream());
  notify_grads_ready(0);
}

template <typename F>
void GpuGPT<F>::stash_activations(int key) {
  SCALELAB_CHECK(acts_.B > 0, "stash_activations(", key, ") with no forward to stash");
  SCALELAB_CHECK(!stash_.count(key), "activations of key ", key, " are already stashed");
  SavedForward& saved = stash_[key];
  // Moving a DeviceBuffer keeps its memory where it is, so the pointers in acts_ stay valid.
  saved.act_buffer = std::move(act_buffer_);
  saved.stat_buffer = std::move(stat_buffer_);
  saved.tokens = std::move(tokens_);
  saved.targets = std::move(targets_);
  saved.acts = acts_;
  saved.attention = acts_attention_;
  saved.probs_hold_dlogits = probs_hold_dlogits_;
  acts_.B = 0;  // the next forward allocates its own
}

template <typename F>
void GpuGPT<F>::restore_activations(int key) {
  const auto it = stash_.find(key);
  SCALELAB_CHECK(it != stash_.end(), "no activations stashed under key ", key);
  release_activations();
  SavedForward& saved = it->second;
  act_buffer_ = std::move(saved.act_buffer);
  stat_buffer_ = std::move(saved.stat_buffer);
  tokens_ = std::move(saved.tokens);
  targets_ = std::move(saved.targets);
  acts_ = saved.acts;
  acts_attention_ = saved.attention;
  probs_hold_dlogits_ = saved.probs_hold_dlogits;
  stash_.erase(it);
}

template <typename F>
void GpuGPT<F>::release_activations() {
  act_buffer_ = DeviceBuffer<F>();
  stat_buffer_ = DeviceBuffer<float>();
  tokens_ = DeviceBuffer<int>();
  targets_ = DeviceBuffer<int>();
  acts_.B = 0;
}

template <typename F>
void GpuGPT<F>::zero_grad() {
  if (grads_.size() > 0) SCALELAB_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream()));
}

template <typename F>
void GpuGPT<F>::point_unit(ParamView<F>& view, std::size_t unit_offset, F* place) {
  const auto& t = layout_.tensors();
  auto at = [&](std::size_t i) { return place + (t[i].offset - unit_offset); };
  if (unit_offset == 0) {
    view.wte = at(0);
    view.wpe = at(1);
  } else if (unit_offset == lnf_offset_) {
    view.lnf_w = at(t.size() - 2);
    view.lnf_b = at(t.size() - 1);
  } else {
    const auto it = std::find(block_offsets_.begin(), block_offsets_.end(), unit_offset);
    SCALELAB_CHECK(it != block_offsets_.end(), "no unit of the model starts at ", unit_offset);
    const std::size_t l = static_cast<std::size_t>(it - block_offsets_.begin());
    for (int j = 0; j < kTensorsPerBlock; ++j)
      view.blocks[l].*(kBlockFields<F>[j].field) = at(2 + static_cast<std::size_t>(kTensorsPerBlock) * l +
                                                      static_cast<std::size_t>(j));
  }
}

template <typename F>
void GpuGPT<F>::source_root(bool backward) {
  if (!param_source_) return;
  point_unit(w_, 0, param_source_(0, backward));
  point_unit(w_, lnf_offset_, param_source_(lnf_offset_, backward));
}

template <typename F>
void GpuGPT<F>::source_block(int l, bool backward) {
  if (param_source_) point_unit(w_, block_offsets_[l], param_source_(block_offsets_[l], backward));
}

template <typename F>
void GpuGPT<F>::forward_block(int l, int slot, ActPlace x) {
  source_block(l, false);
  gpu_block_forward(acts_.blocks[slot], w_.blocks[l], place(x), scratch_, acts_.B, acts_.T, config_.channels,
                    config_.num_heads, attention_, blas_);
  ++block_forwards_;
}

template <typename F>
void GpuGPT<F>::backward_block(int l, int slot, ActPlace x) {
  source_block(l, true);
  if (grad_place_) point_unit(g_, block_offsets_[l], grad_place_(block_offsets_[l]));
  gpu_block_backward(dres_, g_.blocks[l], acts_.blocks[slot], w_.blocks[l], place(x), scratch_, acts_.B, acts_.T,
                     config_.channels, config_.num_heads, attention_, blas_);
  notify_grads_ready(block_offsets_[l]);  // after this block's kernels are enqueued
}

template <typename F>
void GpuGPT<F>::keep_boundary(int s, ActPlace x) {
  copy_activation(acts_.boundaries[s], place(x));
}

template <typename F>
void GpuGPT<F>::store_output(ActPlace x) {
  if (place(x) != acts_.final_input) copy_activation(acts_.final_input, place(x));
}

template <typename F>
void GpuGPT<F>::recompute_attention(int /*l*/, int slot) {
  GpuBlockActs<F>& a = acts_.blocks[slot];
  attention_forward(scratch_.proj, a.att, a.qkv, acts_.B, acts_.T, config_.channels, config_.num_heads,
                    blas_);  // the output is discarded
  ++attention_recomputes_;
}

template <typename F>
void GpuGPT<F>::copy_activation(F* dst, const F* src) {
  const std::size_t n = static_cast<std::size_t>(acts_.B) * acts_.T * config_.channels;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(F), cudaMemcpyDeviceToDevice, stream()));
}

template class GpuGPT<float>;
template class GpuGPT<bf16>;
template class GpuGPT<fp16>;

}  // namespace scalelab::cuda
