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

std::size_t gpu_stat_elements(const GPTConfig& c, int B, int T, const CheckpointPolicy& policy,
                              AttentionKind attention) {
  const std::size_t slots = activation_slots(policy, c.num_layers);
  const std::size_t lse = attention == AttentionKind::kFlash ? static_cast<std::size_t>(c.num_heads) * B * T
                                                             : 0;  // per slot
  return slots * (gpu_block_stat_elements(B, T) + lse) + 3 * static_cast<std::size_t>(B) * T;
}

template <typename F>
void GpuGPT<F>::set_attention(AttentionKind kind) {
  require(kind != AttentionKind::kChunked, "attention",
          "--attention chunked has no GPU kernel: it is the CPU's step between naive and flash",
          "use --attention flash (or naive) with --device cuda, or run chunked with --device cpu");
  check_attention_policy(kind, policy_);
  attention_ = kind;
}

std::size_t gpu_logits_padding_elements(const GPTConfig& c, int B, int T) {
  return static_cast<std::size_t>(B) * T * (gpu_padded_vocab(c.vocab_size) - c.vocab_size);
}

template <typename F>
GpuGPT<F>::GpuGPT(const GPTConfig& config, MemoryTracker* tracker, const GpuOptions& options)
    : config_(config),
      layout_((config.validate(), config)),
      tracker_(tracker),
      blas_(stream_.get(), tracker, options.allow_tf32),
      params_(options.own_params ? layout_.num_params() : 0, MemCategory::kParams, tracker),
      grads_(options.own_grads ? layout_.num_params() : 0, MemCategory::kGrads, tracker),
      w_(options.own_params
             ? device_param_view(layout_, config_.num_layers, params_.data())
             : ParamView<F>{nullptr, nullptr, std::vector<BlockView<F>>(config.num_layers), nullptr, nullptr}),
      g_(options.own_grads
             ? device_param_view(layout_, config_.num_layers, grads_.data())
             : ParamView<F>{nullptr, nullptr, std::vector<BlockView<F>>(config.num_layers), nullptr, nullptr}),
      loss_(1, MemCategory::kWorkspace, tracker),
      ln_scratch_(layernorm_backward_scratch_elements(config.channels), MemCategory::kWorkspace, tracker) {
  scratch_.ln_partials = ln_scratch_.data();
  for (int l = 0; l < config_.num_layers; ++l)
    block_offsets_.push_back(layout_.find("transformer.h." + std::to_string(l) + ".ln_1.weight").offset);
  lnf_offset_ = layout_.find("transformer.ln_f.weight").offset;
}

template <typename F>
void GpuGPT<F>::ensure_buffers(int B, int T) {
  const bool same_policy = acts_.policy.kind == policy_.kind && acts_.policy.every == policy_.every;
  if (acts_.B == B && acts_.T == T && same_policy && acts_attention_ == attention_) return;
  const bool flash = attention_ == AttentionKind::kFlash;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * config_.channels;
  const std::size_t TT = static_cast<std::size_t>(T) * T;
  // Free the old buffers first, so the peak is not their sum.
  act_buffer_ = DeviceBuffer<F>();
  stat_buffer_ = DeviceBuffer<float>();
  scratch_buffer_ = DeviceBuffer<F>();
  tokens_ = DeviceBuffer<int>();
  targets_ = DeviceBuffer<int>();
  const std::size_t stats = gpu_stat_elements(config_, B, T, policy_, attention_);
  const std::size_t values = activation_elements(config_, B, T, policy_, ModelSlice{}, attention_) - stats +
                             gpu_logits_padding_elements(config_, B, T);
  act_buffer_ = DeviceBuffer<F>(values, MemCategory::kActivations, tracker_);
  stat_buffer_ = DeviceBuffer<float>(stats, MemCategory::kActivations, tracker_);
  assign_activations(B, T);

  const std::size_t datt = flash ? 0 : config_.num_heads * TT;  // attention_scratch_elements(T, NH)
  scratch_buffer_ = DeviceBuffer<F>(8 * BTC + datt, MemCategory::kWorkspace, tracker_);
  Carver<F> s(scratch_buffer_.data(), scratch_buffer_.size());
  scratch_.proj = s.take(BTC);
  scratch_.dbtc = s.take(BTC);
  scratch_.dwide = s.take(4 * BTC);
  scratch_.datt = flash ? nullptr : s.take(datt);
  dres_ = s.take(BTC);
  dlnf_ = s.take(BTC);
  tokens_ = DeviceBuffer<int>(BT, MemCategory::kWorkspace, tracker_);
  targets_ = DeviceBuffer<int>(BT, MemCategory::kWorkspace, tracker_);
}

template <typename F>
void GpuGPT<F>::assign_activations(int B, int T) {
  using Kind = CheckpointPolicy::Kind;
  const int C = config_.channels, L = config_.num_layers, NH = config_.num_heads;
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
  carve_head_acts(acts_, p, q, B, T, C, padded_vocab());  // probs (B,T,V) with rows Vp apart: B T Vp elements
  SCALELAB_CHECK(p.used_all(), "activation layout does not add up");
  SCALELAB_CHECK(q.used_all(), "statistics layout does not add up");
}

template <typename F>
double GpuGPT<F>::forward(const int* tokens, const int* targets, int B, int T) {
  const int C = config_.channels, V = config_.vocab_size, Vp = padded_vocab();
  check_batch(config_, tokens, targets, B, T);  // a kernel cannot throw: ids are checked on the host
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  ensure_buffers(B, T);
  tokens_.copy_from_host(tokens, BT);
  targets_.copy_from_host(targets, BT);
  probs_hold_dlogits_ = false;

  cudaStream_t st = stream();
  const int N = static_cast<int>(BT);
  source_root(false);
  SCALELAB_CHECK(w_.wte != nullptr, "forward without parameters: set_param_source() first");
  encoder_forward(acts_.encoded, tokens_.data(), w_.wte, w_.wpe, B, T, C, st);
  walk_blocks_forward(*this, policy_);
  layernorm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, acts_.final_input, w_.lnf_w, w_.lnf_b, N, C, st);
  // logits (B,T,V), rows Vp apart: the V rows of wte (V,C), written with an aligned leading dimension
  matmul_forward<F>(acts_.probs, acts_.lnf, w_.wte, nullptr, N, C, V, Vp, blas_);
  crossentropy_forward(acts_.probs, acts_.losses, acts_.probs, targets_.data(), N, V, Vp, st);  // in place
  mean_loss(loss_.data(), acts_.losses, N, st);
  float loss = 0;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(&loss, loss_.data(), sizeof(float), cudaMemcpyDeviceToHost, st));
  stream_.synchronize();
  return loss;
}

template <typename F>
void GpuGPT<F>::backward(float loss_scale) {
  SCALELAB_CHECK(acts_.B > 0, "backward() called before forward()");
  SCALELAB_CHECK(!probs_hold_dlogits_, "backward() called twice after one forward()");
  const int B = acts_.B, T = acts_.T, C = config_.channels, V = config_.vocab_size, Vp = padded_vocab(), N = B * T;
  cudaStream_t st = stream();
  // Mean loss over N positions: d loss / d loss[i] = 1/N (in float, as the CPU computes it).
  // dlogits overwrite the probabilities they are computed from (elementwise), which saves a
  // (B,T,V) buffer: with GPT-2's V = 50257 the largest tensor of the model.
  F* dlogits = acts_.probs;
  crossentropy_backward(dlogits, acts_.probs, targets_.data(), loss_scale / static_cast<float>(N), N, V, Vp, st);
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
  encoder_backward(g_.wte, g_.wpe, dres_, tokens_.data(), B, T, C, st);
  notify_grads_ready(0);  // the embeddings (wte also got the LM head's gradient) are enqueued
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
