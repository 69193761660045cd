// GPT model: buffers, initialisation, and the forward/backward over all layers.
#include "model/gpt.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/layers/crossentropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"

namespace scalelab {

std::size_t activation_elements(const GPTConfig& c, int B, int T) {
  return activation_elements(c, B, T, CheckpointPolicy{});
}

std::size_t activation_elements(const GPTConfig& c, int B, int T, const CheckpointPolicy& policy) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * c.channels;
  const std::size_t L = c.num_layers;
  const std::size_t block = block_act_elements(B, T, c.channels, c.num_heads);
  const std::size_t att = static_cast<std::size_t>(c.num_heads) * BT * T;
  const std::size_t head = 2 * BTC + 3 * BT + BT * c.vocab_size;  // encoded, lnf + stats, probs, losses
  switch (policy.kind) {
    case CheckpointPolicy::Kind::kNone: return head + L * block;
    case CheckpointPolicy::Kind::kSelective: return head + L * (block - att) + att;
    case CheckpointPolicy::Kind::kEveryK:
    case CheckpointPolicy::Kind::kSqrtL: {
      const std::size_t k = policy.segment_blocks(c.num_layers);
      const std::size_t segments = (L + k - 1) / k;
      return head + (segments - 1) * BTC + BTC + k * block;  // boundaries, final output, one segment
    }
  }
  return 0;
}

template <typename F>
GPTModel<F>::GPTModel(const GPTConfig& config, MemoryTracker* tracker)
    : config_(config), layout_((config.validate(), config)), tracker_(tracker),
      params_(layout_.num_params(), MemCategory::kParams, tracker),
      grads_(layout_.num_params(), MemCategory::kGrads, tracker) {
  for (int l = 0; l < config_.num_layers; ++l)
    block_offsets_.push_back(layout_.find("transformer.h." + std::to_string(l) + ".ln_1.weight").offset);
  lnf_offset_ = layout_.find("transformer.ln_f.weight").offset;
}

template <typename F>
void init_gpt2_weights(const ParamLayout& layout, int num_layers, F* params, std::uint64_t seed) {
  Rng rng(seed);
  const double std_base = 0.02;
  const double std_resid = 0.02 / std::sqrt(2.0 * num_layers);
  for (const auto& t : layout.tensors()) {
    F* p = params + t.offset;
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
template void init_gpt2_weights<float>(const ParamLayout&, int, float*, std::uint64_t);
template void init_gpt2_weights<double>(const ParamLayout&, int, double*, std::uint64_t);

template <typename F>
void GPTModel<F>::init_weights(std::uint64_t seed) {
  init_gpt2_weights(layout_, config_.num_layers, params_.data(), seed);
}

template <typename F>
void GPTModel<F>::ensure_buffers(int B, int T) {
  const bool same_policy = acts_.policy.kind == policy_.kind && acts_.policy.every == policy_.every;
  if (acts_.B == B && acts_.T == T && same_policy) return;
  const int C = config_.channels, V = config_.vocab_size;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  act_buffer_ = Buffer<F>();  // free the old ones first, so the peak is not their sum
  scratch_buffer_ = Buffer<F>();
  act_buffer_ = Buffer<F>(activation_elements(config_, B, T, policy_), MemCategory::kActivations, tracker_);
  assign_activations(B, T);

  scratch_buffer_ = Buffer<F>(BTC * 8 + static_cast<std::size_t>(T) * T + BT * V, MemCategory::kWorkspace, tracker_);
  F* s = scratch_buffer_.data();
  auto stake = [&s](std::size_t n) { F* r = s; s += n; return r; };
  scratch_.proj = stake(BTC);
  scratch_.dbtc = stake(BTC);
  scratch_.dwide = stake(4 * BTC);
  scratch_.dtt = stake(static_cast<std::size_t>(T) * T);
  dres_ = stake(BTC);
  dlnf_ = stake(BTC);
  dlogits_ = stake(BT * V);
}

template <typename F>
void GPTModel<F>::assign_activations(int B, int T) {
  using Kind = CheckpointPolicy::Kind;
  const int C = config_.channels, V = config_.vocab_size, L = config_.num_layers, NH = config_.num_heads;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  F* p = act_buffer_.data();
  auto take = [&p](std::size_t n) { F* r = p; p += n; return r; };
  acts_.B = B;
  acts_.T = T;
  acts_.policy = policy_;
  acts_.encoded = take(BTC);
  acts_.boundaries.assign(1, acts_.encoded);
  if (policy_.kind == Kind::kNone || policy_.kind == Kind::kSelective) {
    const bool own_att = policy_.kind == Kind::kNone;
    acts_.blocks.resize(L);
    for (auto& b : acts_.blocks) p = assign_block_acts(b, p, B, T, C, NH, own_att);
    if (!own_att) {
      F* shared_att = take(static_cast<std::size_t>(NH) * BT * T);
      for (auto& b : acts_.blocks) b.att = shared_att;
    }
    acts_.final_input = acts_.blocks.back().residual3;
  } else {
    const int k = policy_.segment_blocks(L);
    const int segments = (L + k - 1) / k;
    for (int seg = 1; seg < segments; ++seg) acts_.boundaries.push_back(take(BTC));
    acts_.final_input = take(BTC);
    acts_.blocks.resize(k);
    for (auto& b : acts_.blocks) p = assign_block_acts(b, p, B, T, C, NH);
  }
  acts_.lnf = take(BTC);
  acts_.lnf_mean = take(BT);
  acts_.lnf_rstd = take(BT);
  acts_.probs = take(BT * V);
  acts_.losses = take(BT);
  SCALELAB_CHECK(p == act_buffer_.data() + act_buffer_.size(), "activation layout does not add up");
}

template <typename F>
F GPTModel<F>::forward(const int* tokens, const int* targets, int B, int T) {
  const int C = config_.channels, V = config_.vocab_size;
  require(B >= 1, "batch", "must be at least 1, got " + std::to_string(B), "use a positive batch size");
  require(T >= 1 && T <= config_.max_seq_len, "seq_len",
          "must be in [1, " + std::to_string(config_.max_seq_len) + "] for config '" + config_.name + "', got " +
              std::to_string(T),
          "use a sequence length no longer than the model's max_seq_len");
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  for (std::size_t i = 0; i < BT; ++i) {
    require(tokens[i] >= 0 && tokens[i] < V, "tokens", "token " + std::to_string(tokens[i]) + " at position " +
            std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(V) + ")",
            "tokenize with a vocabulary that matches the model");
    require(targets[i] >= 0 && targets[i] < V, "targets", "target " + std::to_string(targets[i]) +
            " at position " + std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(V) + ")",
            "tokenize with a vocabulary that matches the model");
  }
  ensure_buffers(B, T);
  tokens_.assign(tokens, tokens + BT);
  targets_.assign(targets, targets + BT);

  ParamView<F> w = make_param_view(config_, params_.data());
  encoder_forward(acts_.encoded, tokens, w.wte, w.wpe, B, T, C);
  forward_blocks(w);
  layernorm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, acts_.final_input, w.lnf_w, w.lnf_b,
                    static_cast<int>(BT), C);
  matmul_forward<F>(acts_.probs, acts_.lnf, w.wte, nullptr, static_cast<int>(BT), C, V);  // logits
  return crossentropy_forward(acts_.probs, acts_.losses, acts_.probs, targets, static_cast<int>(BT), V);
}

template <typename F>
void GPTModel<F>::forward_blocks(const ParamView<F>& w) {
  if (policy_.kind == CheckpointPolicy::Kind::kEveryK || policy_.kind == CheckpointPolicy::Kind::kSqrtL) {
    forward_blocks_checkpointed(w);
    return;
  }
  const F* x = acts_.encoded;
  for (int l = 0; l < config_.num_layers; ++l) {
    block_forward(acts_.blocks[l], w.blocks[l], x, scratch_, acts_.B, acts_.T, config_.channels, config_.num_heads);
    ++block_forwards_;
    x = acts_.blocks[l].residual3;
  }
}

template <typename F>
void GPTModel<F>::backward(F loss_scale) {
  SCALELAB_CHECK(acts_.B > 0, "backward() called before forward()");
  // LAB 00 BEGIN model_backward: section 4
  const int B = acts_.B, T = acts_.T, C = config_.channels, V = config_.vocab_size;
  const int N = B * T;
  ParamView<F> w = make_param_view(config_, params_.data());
  ParamView<F> g = make_param_view(config_, grads_.data());
  // mean loss over N positions: d loss / d loss[i] = 1/N
  crossentropy_backward(dlogits_, acts_.probs, targets_.data(), loss_scale / F(N), N, V);
  matmul_backward<F>(dlnf_, g.wte, nullptr, dlogits_, acts_.lnf, w.wte, N, C, V);
  std::fill(dres_, dres_ + static_cast<std::size_t>(N) * C, F(0));
  layernorm_backward(dres_, g.lnf_w, g.lnf_b, dlnf_, acts_.final_input, w.lnf_w, acts_.lnf_mean, acts_.lnf_rstd, N,
                     C);
  backward_blocks(w, g);
  encoder_backward(g.wte, g.wpe, dres_, tokens_.data(), B, T, C);
  // LAB 00 END
  notify_grads_ready(0);  // the embeddings (wte also got the LM head's gradient) are final
}

template <typename F>
void GPTModel<F>::backward_blocks(const ParamView<F>& w, const ParamView<F>& g) {
  notify_grads_ready(lnf_offset_);  // ln_f's gradients are final once its backward ran
  if (policy_.kind != CheckpointPolicy::Kind::kNone) {
    backward_blocks_checkpointed(w, g);
    return;
  }
  // LAB 00 BEGIN backward_blocks: section 4
  for (int l = config_.num_layers - 1; l >= 0; --l) {
    const F* x = l == 0 ? acts_.encoded : acts_.blocks[l - 1].residual3;
    block_backward_at(l, acts_.blocks[l], x, w, g);
  }
  // LAB 00 END
}

template <typename F>
void GPTModel<F>::block_backward_at(int l, const BlockActs<F>& a, const F* x, const ParamView<F>& w,
                                    const ParamView<F>& g) {
  block_backward(dres_, g.blocks[l], a, w.blocks[l], x, scratch_, acts_.B, acts_.T, config_.channels,
                 config_.num_heads);
  notify_grads_ready(block_offsets_[l]);
}

template <typename F>
void GPTModel<F>::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), F(0));
}

template class GPTModel<float>;
template class GPTModel<double>;

}  // namespace scalelab
