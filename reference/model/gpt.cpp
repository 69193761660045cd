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
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  return BT * c.channels * 2 + BT * 3 + BT * c.vocab_size +
         c.num_layers * block_act_elements(B, T, c.channels, c.num_heads);
}

template <typename F>
GPTModel<F>::GPTModel(const GPTConfig& config, MemoryTracker* tracker)
    : config_(config), layout_((config.validate(), config)), tracker_(tracker),
      params_(layout_.num_params(), MemCategory::kParams, tracker),
      grads_(layout_.num_params(), MemCategory::kGrads, tracker) {}

template <typename F>
void GPTModel<F>::init_weights(std::uint64_t seed) {
  Rng rng(seed);
  const double std_base = 0.02;
  const double std_resid = 0.02 / std::sqrt(2.0 * config_.num_layers);
  for (const auto& t : layout_.tensors()) {
    F* p = params_.data() + t.offset;
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

template <typename F>
void GPTModel<F>::ensure_buffers(int B, int T) {
  if (acts_.B == B && acts_.T == T) return;
  const int C = config_.channels, V = config_.vocab_size, L = config_.num_layers, NH = config_.num_heads;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  act_buffer_ = Buffer<F>();  // free the old ones first, so the peak is not their sum
  scratch_buffer_ = Buffer<F>();
  act_buffer_ = Buffer<F>(activation_elements(config_, B, T), MemCategory::kActivations, tracker_);
  F* p = act_buffer_.data();
  auto take = [&p](std::size_t n) { F* r = p; p += n; return r; };
  acts_.B = B;
  acts_.T = T;
  acts_.encoded = take(BTC);
  acts_.blocks.resize(L);
  for (auto& b : acts_.blocks) p = assign_block_acts(b, p, B, T, C, NH);
  acts_.lnf = take(BTC);
  acts_.lnf_mean = take(BT);
  acts_.lnf_rstd = take(BT);
  acts_.probs = take(BT * V);
  acts_.losses = take(BT);
  SCALELAB_CHECK(p == act_buffer_.data() + act_buffer_.size(), "activation layout does not add up");

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
F GPTModel<F>::forward(const int* tokens, const int* targets, int B, int T) {
  const int C = config_.channels, V = config_.vocab_size, NH = config_.num_heads;
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
  const F* x = acts_.encoded;
  for (int l = 0; l < config_.num_layers; ++l) {
    block_forward(acts_.blocks[l], w.blocks[l], x, scratch_, B, T, C, NH);
    ++block_forwards_;
    x = acts_.blocks[l].residual3;
  }
  layernorm_forward(acts_.lnf, acts_.lnf_mean, acts_.lnf_rstd, x, w.lnf_w, w.lnf_b, static_cast<int>(BT), C);
  matmul_forward<F>(acts_.probs, acts_.lnf, w.wte, nullptr, static_cast<int>(BT), C, V);  // logits
  return crossentropy_forward(acts_.probs, acts_.losses, acts_.probs, targets, static_cast<int>(BT), V);
}

template <typename F>
void GPTModel<F>::backward(F loss_scale) {
  // LAB 00 BEGIN model_backward: section 4
  SCALELAB_CHECK(acts_.B > 0, "backward() called before forward()");
  const int B = acts_.B, T = acts_.T, C = config_.channels, V = config_.vocab_size, NH = config_.num_heads;
  const int N = B * T;
  ParamView<F> w = make_param_view(config_, params_.data());
  ParamView<F> g = make_param_view(config_, grads_.data());
  // mean loss over N positions: d loss / d loss[i] = 1/N
  crossentropy_backward(dlogits_, acts_.probs, targets_.data(), loss_scale / F(N), N, V);
  matmul_backward<F>(dlnf_, g.wte, nullptr, dlogits_, acts_.lnf, w.wte, N, C, V);
  const F* last = config_.num_layers > 0 ? acts_.blocks.back().residual3 : acts_.encoded;
  std::fill(dres_, dres_ + static_cast<std::size_t>(N) * C, F(0));
  layernorm_backward(dres_, g.lnf_w, g.lnf_b, dlnf_, last, w.lnf_w, acts_.lnf_mean, acts_.lnf_rstd, N, C);
  for (int l = config_.num_layers - 1; l >= 0; --l) {
    const F* x = l == 0 ? acts_.encoded : acts_.blocks[l - 1].residual3;
    block_backward(dres_, g.blocks[l], acts_.blocks[l], w.blocks[l], x, scratch_, B, T, C, NH);
  }
  encoder_backward(g.wte, g.wpe, dres_, tokens_.data(), B, T, C);
  // LAB 00 END
}

template <typename F>
void GPTModel<F>::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), F(0));
}

template class GPTModel<float>;
template class GPTModel<double>;

}  // namespace scalelab
