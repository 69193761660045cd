// GPT model (every stage): buffers, initialisation, and the forward/backward over all layers,
// of the whole model or of a pipeline slice. The blocks run through the walk of
// model/block_walk.cpp (stage 02's checkpoint policies), this model being its BlockRunner.
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/carve.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/batch_check.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/crossentropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"

namespace scalelab {

std::size_t activation_elements(const GPTConfig& c, int B, int T) {
  return activation_elements(c, B, T, CheckpointPolicy{});
}

std::size_t activation_elements(const GPTConfig& c, int B, int T, const CheckpointPolicy& policy) {
  return activation_elements(c, B, T, policy, ModelSlice{});
}

std::size_t activation_elements(const GPTConfig& c, int B, int T, const CheckpointPolicy& policy,
                                const ModelSlice& slice) {
  return activation_elements(c, B, T, policy, slice, AttentionKind::kNaive);  // model/gpt_attention.cpp
}

template <typename F>
GPTModel<F>::GPTModel(const GPTConfig& config, MemoryTracker* tracker, const ModelSlice& slice)
    : config_(config),
      slice_(slice.resolved(config)),
      layout_(config, slice_),
      tracker_(tracker),
      params_(layout_.num_params(), MemCategory::kParams, tracker),
      grads_(layout_.num_params(), MemCategory::kGrads, tracker),
      param_data_(params_.data()),
      grad_data_(grads_.data()),
      w_(make_param_view(config_, slice_, param_data_)),
      g_(make_param_view(config_, slice_, grad_data_)) {
  find_offsets();
}

template <typename F>
GPTModel<F>::GPTModel(const GPTConfig& config, MemoryTracker* tracker, const ModelSlice& slice, F* params, F* grads)
    : config_(config),
      slice_(slice.resolved(config)),
      layout_(config, slice_),
      tracker_(tracker),
      param_data_(params),
      grad_data_(grads),
      w_(params ? make_param_view(config_, slice_, params) : unset_view(slice_.num_layers)),
      g_(grads ? make_param_view(config_, slice_, grads) : unset_view(slice_.num_layers)) {
  find_offsets();
}

template <typename F>
ParamView<F> GPTModel<F>::unset_view(int blocks) {
  ParamView<F> v;
  v.blocks.resize(static_cast<std::size_t>(blocks), BlockView<F>{});
  return v;
}

template <typename F>
void GPTModel<F>::set_views(const ParamView<F>& weights, const ParamView<F>& grads) {
  SCALELAB_CHECK(weights.blocks.size() == w_.blocks.size() && grads.blocks.size() == g_.blocks.size(),
                 "set_views: views for ", weights.blocks.size(), " blocks, the model has ", w_.blocks.size());
  w_ = weights;
  g_ = grads;
}

template <typename F>
void GPTModel<F>::find_offsets() {
  for (int l = 0; l < slice_.num_layers; ++l)
    block_offsets_.push_back(
        layout_.find("transformer.h." + std::to_string(slice_.first_layer + l) + ".ln_1.weight").offset);
  if (slice_.head) lnf_offset_ = layout_.find("transformer.ln_f.weight").offset;
}

namespace {

// Initialises the tensors of `layout` in order with one RNG stream; `place` says where each
// tensor's values go (null: draw and discard them, so later tensors get the same values).
template <typename F, typename Place>
void init_gpt2_tensors(const ParamLayout& layout, int num_layers, std::uint64_t seed, Place place) {
  Rng rng(seed);
  const double std_base = 0.02;
  const double std_resid = 0.02 / std::sqrt(2.0 * num_layers);
  std::vector<F> discard;
  for (const auto& t : layout.tensors()) {
    F* p = place(t);
    if (!p) {
      discard.resize(t.numel);
      p = discard.data();
    }
    const std::string& n = t.name;
    auto ends_with = [&n](const char* s) {
      const std::string suf(s);
      return n.size() >= suf.size() && n.compare(n.size() - suf.size(), suf.size(), suf) == 0;
    };
    if (n.find(".ln_") != std::string::npos) {
      const F v = ends_with(".weight") ? F(1) : F(0);
      for (std::size_t i = 0; i < t.numel; ++i) p[i] = v;
    } else if (ends_with(".bias")) {
      for (std::size_t i = 0; i < t.numel; ++i) p[i] = F(0);
    } else {
      const bool resid = ends_with("c_proj.weight");
      const double sd = resid ? std_resid : std_base;
      for (std::size_t i = 0; i < t.numel; ++i) p[i] = static_cast<F>(sd * rng.normal());
    }
  }
}

}  // namespace

template <typename F>
void init_gpt2_weights(const ParamLayout& layout, int num_layers, F* params, std::uint64_t seed) {
  init_gpt2_tensors<F>(layout, num_layers, seed, [params](const ParamTensor& t) { return params + t.offset; });
}

template <typename F>
void init_gpt2_weights(const GPTConfig& config, const ParamLayout& slice_layout, F* params, std::uint64_t seed) {
  init_gpt2_tensors<F>(ParamLayout(config), config.num_layers, seed, [&](const ParamTensor& t) -> F* {
    const ParamTensor* held = slice_layout.find_if_held(t.name);
    return held ? params + held->offset : nullptr;
  });
}

template void init_gpt2_weights<float>(const ParamLayout&, int, float*, std::uint64_t);
template void init_gpt2_weights<double>(const ParamLayout&, int, double*, std::uint64_t);
template void init_gpt2_weights<float>(const GPTConfig&, const ParamLayout&, float*, std::uint64_t);
template void init_gpt2_weights<double>(const GPTConfig&, const ParamLayout&, double*, std::uint64_t);

template <typename F>
void GPTModel<F>::init_weights(std::uint64_t seed) {
  init_gpt2_weights(config_, layout_, param_data_, seed);
}

template <typename F>
void GPTModel<F>::ensure_buffers(int B, int T) {
  const bool same_policy = acts_.policy.kind == policy_.kind && acts_.policy.every == policy_.every;
  // The saved activations: reallocated when the shape, policy or attention kind changed, or after
  // they were stashed or released (stage 05).
  if (act_buffer_.size() == 0 || acts_.B != B || acts_.T != T || !same_policy || acts_.attention != attention_) {
    act_buffer_ = Buffer<F>();  // free the old ones first, so the peak is not their sum
    act_buffer_ = Buffer<F>(activation_elements(config_, B, T, policy_, slice_, attention_), MemCategory::kActivations,
                            tracker_);
    assign_activations(B, T);
  }
  if (scratch_B_ == B && scratch_T_ == T && scratch_attention_ == attention_) return;
  const int C = config_.channels, V = config_.vocab_size;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  const std::size_t BTV = slice_.head ? BT * V : 0;  // dlogits only with the head
  scratch_buffer_ = Buffer<F>();
  // dtt: the attention's workspace, T x T for naive (stage 08: far less for chunked and flash).
  const std::size_t attention_scratch = attention_scratch_elements(attention_, T);
  scratch_buffer_ = Buffer<F>(BTC * 8 + attention_scratch + BTV, MemCategory::kWorkspace, tracker_);
  scratch_B_ = B;
  scratch_T_ = T;
  scratch_attention_ = attention_;
  Carver<F> s(scratch_buffer_.data(), scratch_buffer_.size());
  scratch_.proj = s.take(BTC);
  scratch_.dbtc = s.take(BTC);
  scratch_.dwide = s.take(4 * BTC);
  scratch_.dtt = s.take(attention_scratch);
  dres_ = s.take(BTC);
  dlnf_ = s.take(BTC);
  dlogits_ = slice_.head ? s.take(BTV) : nullptr;
}

template <typename F>
void GPTModel<F>::assign_activations(int B, int T) {
  using Kind = CheckpointPolicy::Kind;
  const int C = config_.channels, V = config_.vocab_size, L = slice_.num_layers, NH = config_.num_heads;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  Carver<F> p(act_buffer_.data(), act_buffer_.size());
  acts_.B = B;
  acts_.T = T;
  acts_.policy = policy_;
  acts_.attention = attention_;
  acts_.encoded = p.take(BTC);
  acts_.boundaries.assign(1, acts_.encoded);
  // Segments (every:K, sqrt): a boundary per further segment, the output, then k slots. Else
  // L slots, the last one's residual3 being the output; selective shares one att buffer. Chunked
  // and flash attention (stage 08) keep lse (B,NH,T) per slot in place of att.
  for (int seg = 1; seg < segment_count(policy_, L); ++seg) acts_.boundaries.push_back(p.take(BTC));
  if (has_segments(policy_)) acts_.final_input = p.take(BTC);
  const bool own_att = policy_.kind != Kind::kSelective;
  acts_.blocks.resize(activation_slots(policy_, L));
  for (auto& b : acts_.blocks) assign_block_acts(b, p, B, T, C, NH, attention_, own_att);
  if (!own_att) {
    F* shared_att = p.take(static_cast<std::size_t>(NH) * BT * T);
    for (auto& b : acts_.blocks) b.att = shared_att;
  }
  if (!has_segments(policy_)) acts_.final_input = acts_.blocks.back().residual3;
  if (slice_.head) carve_head_acts(acts_, p, p, B, T, C, V);
  SCALELAB_CHECK(p.used_all(), "activation layout does not add up");
}

template <typename F>
F GPTModel<F>::forward(const int* tokens, const int* targets, int B, int T) {
  return forward_slice(tokens, nullptr, targets, B, T);
}

template <typename F>
F GPTModel<F>::forward_slice(const int* tokens, const F* input, const int* targets, int B, int T) {
  SCALELAB_CHECK(slice_.embeddings ? tokens != nullptr : input != nullptr, "slice ", slice_.describe(config_),
                 slice_.embeddings ? " starts from tokens" : " starts from input activations");
  SCALELAB_CHECK(!slice_.head || targets != nullptr, "slice ", slice_.describe(config_), " needs targets");
  const int C = config_.channels, V = config_.vocab_size;
  check_batch(config_, slice_.embeddings ? tokens : nullptr, slice_.head ? targets : nullptr, B, T);
  ensure_buffers(B, T);
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  if (slice_.embeddings) {
    tokens_.assign(tokens, tokens + BT);
    encoder_forward(acts_.encoded, tokens, w_.wte, w_.wpe, B, T, C);
  } else {
    std::copy(input, input + BT * C, acts_.encoded);  // kept: block 0's backward reads its input
  }
  walk_blocks_forward(*this, policy_);
  if (!slice_.head) return F(0);
  targets_.assign(targets, targets + BT);
  layernorm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, acts_.final_input, w_.lnf_w, w_.lnf_b,
                    static_cast<int>(BT), C);
  matmul_forward<F>(acts_.probs, acts_.lnf, w_.wte, nullptr, static_cast<int>(BT), C, V);  // logits
  return crossentropy_forward(acts_.probs, acts_.losses, acts_.probs, targets, static_cast<int>(BT), V);
}

template <typename F>
void GPTModel<F>::backward(F loss_scale) {
  SCALELAB_CHECK(acts_.B > 0, "backward() called before forward()");
  SCALELAB_CHECK(slice_.head, "backward(loss_scale) of slice ", slice_.describe(config_),
                 ", which has no head: use backward_slice(doutput)");
  // LAB 00 BEGIN model_backward: section 4
  const int B = acts_.B, T = acts_.T, C = config_.channels, V = config_.vocab_size;
  const int N = B * T;
  const ParamView<F>& w = w_;
  const ParamView<F>& g = g_;
  // mean loss over N positions: d loss / d loss[i] = 1/N
  crossentropy_backward(dlogits_, acts_.probs, targets_.data(), loss_scale / F(N), N, V);
  matmul_backward<F>(dlnf_, g.wte, nullptr, dlogits_, acts_.lnf, w.wte, N, C, V);
  std::fill(dres_, dres_ + static_cast<std::size_t>(N) * C, F(0));
  layernorm_backward(dres_, g.lnf_w, g.lnf_b, dlnf_, acts_.final_input, w.lnf_w, acts_.lnf_mean, acts_.lnf_rstd, N, C);
  backward_blocks(w, g);
  if (slice_.embeddings) encoder_backward(g.wte, g.wpe, dres_, tokens_.data(), B, T, C);
  // LAB 00 END
  notify_grads_ready(0);  // the embeddings (wte also got the LM head's gradient) are final
}

template <typename F>
void GPTModel<F>::backward_slice(const F* doutput, F loss_scale) {
  if (slice_.head) {
    backward(loss_scale);
    return;
  }
  SCALELAB_CHECK(acts_.B > 0, "backward_slice() called before forward_slice()");
  SCALELAB_CHECK(doutput != nullptr, "slice ", slice_.describe(config_), " needs d loss / d output");
  std::copy(doutput, doutput + btc(), dres_);  // the blocks' backward updates it in place
  backward_blocks(w_, g_);
  if (slice_.embeddings) encoder_backward(g_.wte, g_.wpe, dres_, tokens_.data(), acts_.B, acts_.T, config_.channels);
  notify_grads_ready(0);
}

template <typename F>
void GPTModel<F>::backward_blocks(const ParamView<F>& w, const ParamView<F>& g) {
  if (slice_.head) notify_grads_ready(lnf_offset_);  // ln_f's gradients are final once its backward ran
  if (policy_.kind != CheckpointPolicy::Kind::kNone) {
    walk_blocks_backward(*this, policy_);
    return;
  }
  // Without checkpointing, the plain loop: lab 00 writes it here, before stage 02's walk
  // (model/block_walk.cpp, whose backward_blocks_all is the same loop) exists.
  // LAB 00 BEGIN backward_blocks: section 4
  for (int l = num_blocks() - 1; l >= 0; --l) {
    const F* x = l == 0 ? acts_.encoded : acts_.blocks[l - 1].residual3;
    block_backward_at(l, acts_.blocks[l], x, w, g);
  }
  // LAB 00 END
}

template <typename F>
void GPTModel<F>::block_backward_at(int l, const BlockActs<F>& a, const F* x, const ParamView<F>& w,
                                    const ParamView<F>& g) {
  // The saved activations are laid out for the kind of their forward (att or lse).
  SCALELAB_CHECK(acts_.attention == attention_, "set_attention(", attention_kind_name(attention_),
                 ") between a forward with ", attention_kind_name(acts_.attention),
                 " attention and its backward: change the kind between steps");
  before_block(l, true);
  block_fns_.backward(dres_, g.blocks[l], a, w.blocks[l], x, scratch_, acts_.B, acts_.T, config_.channels,
                      config_.num_heads);  // block_backward, or stage 08's (set_attention)
  notify_grads_ready(block_offsets_[l]);
}

template <typename F>
void GPTModel<F>::forward_block(int l, int slot, ActPlace x) {
  before_block(l, false);
  block_fns_.forward(acts_.blocks[slot], w_.blocks[l], place(x), scratch_, acts_.B, acts_.T, config_.channels,
                     config_.num_heads);  // block_forward, or stage 08's (set_attention)
  ++block_forwards_;
}

template <typename F>
void GPTModel<F>::backward_block(int l, int slot, ActPlace x) {
  block_backward_at(l, acts_.blocks[slot], place(x), w_, g_);
}

template <typename F>
void GPTModel<F>::keep_boundary(int s, ActPlace x) {
  std::memcpy(acts_.boundaries[s], place(x), btc() * sizeof(F));
}

template <typename F>
void GPTModel<F>::store_output(ActPlace x) {
  if (place(x) != acts_.final_input) std::memcpy(acts_.final_input, place(x), btc() * sizeof(F));
}

template <typename F>
void GPTModel<F>::recompute_attention(int /*block*/, int slot) {
  BlockActs<F>& a = acts_.blocks[slot];
  attention_forward(scratch_.proj, a.att, a.qkv, acts_.B, acts_.T, config_.channels,
                    config_.num_heads);  // output discarded
  ++attention_recomputes_;
}

template <typename F>
void GPTModel<F>::backward_input(const F* doutput, F loss_scale) {
  SCALELAB_CHECK(acts_.B > 0, "backward_input() called before forward_slice()");
  SCALELAB_CHECK(policy_.kind == CheckpointPolicy::Kind::kNone,
                 "the split backward reads saved activations: it runs without checkpointing");
  SCALELAB_CHECK(acts_.attention == attention_, "set_attention(", attention_kind_name(attention_),
                 ") between a forward with ", attention_kind_name(acts_.attention),
                 " attention and its backward: change the kind between steps");
  const int B = acts_.B, T = acts_.T, C = config_.channels, NH = config_.num_heads;
  const int N = B * T;
  tape_.reserve(static_cast<std::size_t>(num_blocks()) * block_tape_elements(B, T, C), tracker_);
  if (slice_.head) {
    // The head as backward() does it (its gradient is not deferred: ln_f is small, and the tied
    // wte's head part stays in the order the other schedules give it).
    const int V = config_.vocab_size;
    crossentropy_backward(dlogits_, acts_.probs, targets_.data(), loss_scale / F(N), N, V);
    matmul_backward<F>(dlnf_, g_.wte, nullptr, dlogits_, acts_.lnf, w_.wte, N, C, V);
    std::fill(dres_, dres_ + btc(), F(0));
    layernorm_backward(dres_, g_.lnf_w, g_.lnf_b, dlnf_, acts_.final_input, w_.lnf_w, acts_.lnf_mean, acts_.lnf_rstd, N,
                       C);
  } else {
    SCALELAB_CHECK(doutput != nullptr, "slice ", slice_.describe(config_), " needs d loss / d output");
    std::copy(doutput, doutput + btc(), dres_);
  }
  for (int l = num_blocks() - 1; l >= 0; --l) {
    const F* x = l == 0 ? acts_.encoded : acts_.blocks[l - 1].residual3;
    block_backward_input(dres_, g_.blocks[l], acts_.blocks[l], w_.blocks[l], x, scratch_, B, T, C, NH, tape_,
                         block_fns_.attention_backward);
  }
  if (slice_.embeddings) encoder_backward(g_.wte, g_.wpe, dres_, tokens_.data(), B, T, C);
}

template <typename F>
void GPTModel<F>::backward_weight() {
  SCALELAB_CHECK(!tape_.empty() || num_blocks() == 0, "backward_weight() without a backward_input() before it");
  tape_.apply();
}

template <typename F>
void GPTModel<F>::stash_activations(int key) {
  SCALELAB_CHECK(acts_.B > 0, "stash_activations(", key, ") with no forward to stash");
  SCALELAB_CHECK(!stash_.count(key), "activations of key ", key, " are already stashed");
  SavedForward& saved = stash_[key];
  saved.act_buffer = std::move(act_buffer_);
  saved.acts = acts_;
  saved.tokens = std::move(tokens_);
  saved.targets = std::move(targets_);
  saved.tape = std::move(tape_);
  acts_.B = 0;
  tokens_.clear();
  targets_.clear();
  tape_ = WeightGradTape<F>();
}

template <typename F>
void GPTModel<F>::restore_activations(int key) {
  const auto it = stash_.find(key);
  SCALELAB_CHECK(it != stash_.end(), "no activations stashed under key ", key);
  release_activations();
  act_buffer_ = std::move(it->second.act_buffer);
  acts_ = it->second.acts;
  tokens_ = std::move(it->second.tokens);
  targets_ = std::move(it->second.targets);
  tape_ = std::move(it->second.tape);
  stash_.erase(it);
}

template <typename F>
void GPTModel<F>::release_activations() {
  SCALELAB_CHECK(tape_.empty(), "activations released while their weight gradients are still deferred");
  act_buffer_ = Buffer<F>();
  acts_.B = 0;
  tokens_.clear();
  targets_.clear();
}

template <typename F>
void GPTModel<F>::zero_grad() {
  std::fill(grad_data_, grad_data_ + layout_.num_params(), F(0));
}

template class GPTModel<float>;
template class GPTModel<double>;

}  // namespace scalelab
