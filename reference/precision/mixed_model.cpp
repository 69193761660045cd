// Stage 03: the mixed-precision GPT's buffers, its embeddings and head, and the walk over the
// blocks under a checkpoint policy. The structure is model/gpt.cpp's and model/checkpointing.cpp's;
// what changes is where the bytes live (half storage, fp32 staging) and that every layer output
// is rounded to half.
#include "precision/mixed_model.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "model/gpt.hpp"
#include "model/layers/crossentropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"

namespace scalelab {

namespace {

constexpr std::size_t kStepChunk = 1 << 16;  // gradients unscaled per chunk of the optimizer step

// The fields of a BlockView in layout order (ParamLayout: ln_1 ... mlp.c_proj).
constexpr float* BlockView<float>::*kBlockFields[] = {
    &BlockView<float>::ln1_w,     &BlockView<float>::ln1_b, &BlockView<float>::qkv_w,    &BlockView<float>::qkv_b,
    &BlockView<float>::attproj_w, &BlockView<float>::attproj_b, &BlockView<float>::ln2_w, &BlockView<float>::ln2_b,
    &BlockView<float>::fc_w,      &BlockView<float>::fc_b,  &BlockView<float>::fcproj_w, &BlockView<float>::fcproj_b};

// The views of `v` (whose block starts at `from`) moved to a block starting at `to`.
BlockView<float> rebase(const BlockView<float>& v, const float* from, float* to) {
  BlockView<float> r{};
  for (auto field : kBlockFields) r.*field = to + (v.*field - from);
  return r;
}

void check_batch(const GPTConfig& c, const int* tokens, const int* targets, int B, int T) {
  require(B >= 1, "batch", "must be at least 1, got " + std::to_string(B), "use a positive batch size");
  require(T >= 1 && T <= c.max_seq_len, "seq_len",
          "must be in [1, " + std::to_string(c.max_seq_len) + "] for config '" + c.name + "', got " + std::to_string(T),
          "use a sequence length no longer than the model's max_seq_len");
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  for (const int* ids : {tokens, targets}) {
    const int* bad = std::find_if(ids, ids + BT, [&c](int t) { return t < 0 || t >= c.vocab_size; });
    if (bad != ids + BT)
      throw ConfigError(std::string(ids == tokens ? "tokens" : "targets") + ": id " + std::to_string(*bad) +
                        " at position " + std::to_string(bad - ids) + " is outside the vocabulary [0, " +
                        std::to_string(c.vocab_size) + "); tokenize with a vocabulary that matches the model");
  }
}

}  // namespace

MixedPrecisionModel::MixedPrecisionModel(const GPTConfig& config, HalfFormat format, MemoryTracker* tracker)
    : config_(config),
      layout_((config.validate(), config)),
      format_(format),
      tracker_(tracker),
      params_(layout_.num_params(), MemCategory::kParams, tracker),
      grads_(layout_.num_params(), MemCategory::kGrads, tracker),
      master_(layout_.num_params(), MemCategory::kOptimizer, tracker),
      master_view_(make_param_view(config_, master_.data())),
      chunk_(std::min(layout_.num_params(), kStepChunk), MemCategory::kWorkspace, tracker) {
  const std::size_t C = config_.channels, VC = config_.vocab_size * C, TC = config_.max_seq_len * C;
  const BlockView<float>& b0 = master_view_.blocks[0];
  block_params_ = static_cast<std::size_t>((b0.fcproj_b + C) - b0.ln1_w);  // a block is contiguous
  weight_stage_ = Buffer<float>(2 * block_params_ + 2 * (VC + TC) + 4 * C, MemCategory::kWorkspace, tracker_);
  float* p = weight_stage_.data();
  auto take = [&p](std::size_t n) { float* r = p; p += n; return r; };
  stage_.wblock = take(block_params_);
  stage_.gblock = take(block_params_);
  stage_.w = rebase(b0, b0.ln1_w, stage_.wblock);
  stage_.g = rebase(b0, b0.ln1_w, stage_.gblock);
  stage_.wte = take(VC);
  stage_.gwte = take(VC);
  stage_.wpe = take(TC);
  stage_.gwpe = take(TC);
  stage_.lnf_w = take(C);
  stage_.lnf_b = take(C);
  stage_.glnf_w = take(C);
  stage_.glnf_b = take(C);
}

void MixedPrecisionModel::widen_params(float* out, const float* master_ptr, std::size_t n) const {
  half_to_float(out, params_.data() + offset_of(master_ptr), n, format_);
}

void MixedPrecisionModel::widen_grads(float* out, const float* master_ptr, std::size_t n) const {
  half_to_float(out, grads_.data() + offset_of(master_ptr), n, format_);
}

void MixedPrecisionModel::store_grads(const float* master_ptr, const float* in, std::size_t n) {
  float_to_half(grads_.data() + offset_of(master_ptr), in, n, format_);
}

void MixedPrecisionModel::narrow(std::uint16_t* out, float* in, std::size_t n) const {
  float_to_half(out, in, n, format_);
  half_to_float(in, out, n, format_);  // the fp32 copy now holds exactly what was stored
}

void MixedPrecisionModel::init_weights(std::uint64_t seed) {
  // The fp32 model's initialisation, straight into the master weights.
  init_gpt2_weights(layout(), config_.num_layers, master_.data(), seed);
  float_to_half(params_.data(), master_.data(), num_params(), format_);
}

void MixedPrecisionModel::set_master_params(const float* values) {
  std::copy(values, values + num_params(), master_.data());
  float_to_half(params_.data(), master_.data(), num_params(), format_);
}

void MixedPrecisionModel::zero_grad() { std::fill(grads_.begin(), grads_.end(), std::uint16_t{0}); }

std::vector<float> MixedPrecisionModel::grads_as_float() const {
  std::vector<float> g(num_params());
  half_to_float(g.data(), grads_.data(), g.size(), format_);
  return g;
}

int MixedPrecisionModel::segment_blocks() const {
  const bool segments = policy_.kind == CheckpointPolicy::Kind::kEveryK || policy_.kind == CheckpointPolicy::Kind::kSqrtL;
  return segments ? policy_.segment_blocks(config_.num_layers) : config_.num_layers;
}

void MixedPrecisionModel::ensure_buffers(int B, int T) {
  const bool same_policy = acts_.policy.kind == policy_.kind && acts_.policy.every == policy_.every;
  if (acts_.B == B && acts_.T == T && same_policy) return;
  const std::size_t C = config_.channels, V = config_.vocab_size, NH = config_.num_heads;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C, att = NH * BT * T;
  const std::size_t block = block_act_elements(B, T, config_.channels, config_.num_heads);
  act_buffer_ = Buffer<std::uint16_t>();  // free the old ones first, so the peak is not their sum
  stage_buffer_ = Buffer<float>();
  // Half activations: exactly the fp32 model's element count, at 2 bytes each.
  act_buffer_ = Buffer<std::uint16_t>(activation_elements(config_, B, T, policy_), MemCategory::kActivations, tracker_);
  stage_buffer_ = Buffer<float>(block + 10 * BTC + static_cast<std::size_t>(T) * T + 3 * BT + 2 * BT * V,
                                MemCategory::kWorkspace, tracker_);
  float* p = stage_buffer_.data();
  auto take = [&p](std::size_t n) { float* r = p; p += n; return r; };
  // One block in fp32, laid out as a half slot; the selective policy's att goes at the end.
  const bool shared_att = policy_.kind == CheckpointPolicy::Kind::kSelective;
  stage_.acts_base = take(block);
  float* end = assign_block_acts(stage_.acts, stage_.acts_base, B, T, config_.channels, config_.num_heads, !shared_att);
  if (shared_att) stage_.acts.att = end;
  stage_.acts_count = shared_att ? block - att : block;
  stage_.residual3_offset = static_cast<std::size_t>(stage_.acts.residual3 - stage_.acts_base);
  stage_.scratch.proj = take(BTC);
  stage_.scratch.dbtc = take(BTC);
  stage_.scratch.dwide = take(4 * BTC);
  stage_.scratch.dtt = take(static_cast<std::size_t>(T) * T);
  stage_.x = take(BTC);
  stage_.lnf = take(BTC);
  stage_.dres = take(BTC);
  stage_.dlnf = take(BTC);
  stage_.lnf_mean = take(BT);
  stage_.lnf_rstd = take(BT);
  stage_.losses = take(BT);
  stage_.logits = take(BT * V);
  stage_.dlogits = take(BT * V);
  SCALELAB_CHECK(p == stage_buffer_.data() + stage_buffer_.size(), "staging layout does not add up");
  assign_activations(B, T);
}

void MixedPrecisionModel::assign_activations(int B, int T) {
  const std::size_t C = config_.channels, V = config_.vocab_size, L = config_.num_layers;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  const std::size_t att = static_cast<std::size_t>(config_.num_heads) * BT * T;
  std::uint16_t* p = act_buffer_.data();
  auto take = [&p](std::size_t n) { std::uint16_t* r = p; p += n; return r; };
  acts_.B = B;
  acts_.T = T;
  acts_.policy = policy_;
  acts_.encoded = take(BTC);
  acts_.boundaries.assign(1, acts_.encoded);
  acts_.shared_att = nullptr;
  const std::size_t k = segment_blocks();
  if (policy_.kind == CheckpointPolicy::Kind::kNone || policy_.kind == CheckpointPolicy::Kind::kSelective) {
    // No segments: every block keeps its slot.
    acts_.blocks.resize(L);
    for (auto& b : acts_.blocks) b = take(stage_.acts_count);
    if (policy_.kind == CheckpointPolicy::Kind::kSelective) acts_.shared_att = take(att);
    acts_.final_input = block_output(static_cast<int>(L) - 1);
  } else {
    for (std::size_t seg = 1; seg < (L + k - 1) / k; ++seg) acts_.boundaries.push_back(take(BTC));
    acts_.final_input = take(BTC);
    acts_.blocks.resize(k);
    for (auto& b : acts_.blocks) b = take(stage_.acts_count);
  }
  acts_.lnf = take(BTC);
  acts_.lnf_mean = take(BT);
  acts_.lnf_rstd = take(BT);
  acts_.probs = take(BT * V);
  acts_.losses = take(BT);
  SCALELAB_CHECK(p == act_buffer_.data() + act_buffer_.size(), "half activation layout does not add up");
}

double MixedPrecisionModel::forward(const int* tokens, const int* targets, int B, int T) {
  check_batch(config_, tokens, targets, B, T);
  ensure_buffers(B, T);
  tokens_.assign(tokens, tokens + static_cast<std::size_t>(B) * T);
  targets_.assign(targets, targets + tokens_.size());
  const int C = config_.channels, V = config_.vocab_size, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C, VC = static_cast<std::size_t>(V) * C;
  // Embeddings: half tables widened, the sum rounded to half.
  widen_params(stage_.wte, master_view_.wte, VC);
  widen_params(stage_.wpe, master_view_.wpe, static_cast<std::size_t>(config_.max_seq_len) * C);
  encoder_forward(stage_.x, tokens, stage_.wte, stage_.wpe, B, T, C);
  narrow(acts_.encoded, stage_.x, NC);
  forward_blocks();
  // ln_f, then the tied LM head; the softmax and the loss run in fp32 on the half logits (as
  // autocast does), and the probabilities are saved in half.
  widen(stage_.x, acts_.final_input, NC);
  widen_params(stage_.lnf_w, master_view_.lnf_w, C);
  widen_params(stage_.lnf_b, master_view_.lnf_b, C);
  layernorm_forward(stage_.lnf, stage_.lnf_mean, stage_.lnf_rstd, stage_.x, stage_.lnf_w, stage_.lnf_b, N, C);
  narrow(acts_.lnf, stage_.lnf, NC);
  narrow(acts_.lnf_mean, stage_.lnf_mean, N);
  narrow(acts_.lnf_rstd, stage_.lnf_rstd, N);
  matmul_forward(stage_.logits, stage_.lnf, stage_.wte, static_cast<const float*>(nullptr), N, C, V);
  round(stage_.logits, static_cast<std::size_t>(N) * V);
  const float loss = crossentropy_forward(stage_.logits, stage_.losses, stage_.logits, targets, N, V);
  narrow(acts_.probs, stage_.logits, static_cast<std::size_t>(N) * V);
  narrow(acts_.losses, stage_.losses, N);
  return loss;
}

void MixedPrecisionModel::backward(double loss_scale) {
  SCALELAB_CHECK(acts_.B > 0, "backward() called before forward()");
  const int B = acts_.B, T = acts_.T, C = config_.channels, V = config_.vocab_size, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C, NV = static_cast<std::size_t>(N) * V;
  const std::size_t VC = static_cast<std::size_t>(V) * C, TC = static_cast<std::size_t>(config_.max_seq_len) * C;
  // The loss gradient, as the fp32 model computes it (float(loss_scale) / N), rounded to half.
  widen(stage_.logits, acts_.probs, NV);
  crossentropy_backward(stage_.dlogits, stage_.logits, targets_.data(), static_cast<float>(loss_scale) / N, N, V);
  round(stage_.dlogits, NV);
  // The LM head. wte's gradient stays in fp32 until the encoder has added its part too.
  widen_params(stage_.wte, master_view_.wte, VC);
  widen_grads(stage_.gwte, master_view_.wte, VC);
  widen_grads(stage_.gwpe, master_view_.wpe, TC);
  widen(stage_.lnf, acts_.lnf, NC);
  matmul_backward(stage_.dlnf, stage_.gwte, static_cast<float*>(nullptr), stage_.dlogits, stage_.lnf, stage_.wte, N,
                  C, V);
  round(stage_.dlnf, NC);
  // ln_f
  std::fill(stage_.dres, stage_.dres + NC, 0.0f);
  widen(stage_.x, acts_.final_input, NC);
  widen(stage_.lnf_mean, acts_.lnf_mean, N);
  widen(stage_.lnf_rstd, acts_.lnf_rstd, N);
  widen_params(stage_.lnf_w, master_view_.lnf_w, C);
  widen_grads(stage_.glnf_w, master_view_.lnf_w, C);
  widen_grads(stage_.glnf_b, master_view_.lnf_b, C);
  layernorm_backward(stage_.dres, stage_.glnf_w, stage_.glnf_b, stage_.dlnf, stage_.x, stage_.lnf_w, stage_.lnf_mean,
                     stage_.lnf_rstd, N, C);
  round(stage_.dres, NC);
  store_grads(master_view_.lnf_w, stage_.glnf_w, C);
  store_grads(master_view_.lnf_b, stage_.glnf_b, C);
  backward_blocks();
  // The embeddings, then wte's and wpe's gradients rounded to half once.
  encoder_backward(stage_.gwte, stage_.gwpe, stage_.dres, tokens_.data(), B, T, C);
  store_grads(master_view_.wte, stage_.gwte, VC);
  store_grads(master_view_.wpe, stage_.gwpe, TC);
}

// The blocks under the checkpoint policy: without segments (none, selective) k = L and there is
// one segment whose slots are the blocks themselves; with segments of k blocks only each
// segment's input is kept and backward recomputes a segment before its blocks' backward.
void MixedPrecisionModel::forward_blocks() {
  const int L = config_.num_layers, k = segment_blocks();
  const std::size_t NC = static_cast<std::size_t>(acts_.B) * acts_.T * config_.channels;
  const std::uint16_t* x = acts_.encoded;
  for (int l = 0; l < L; ++l) {
    const int seg = l / k, slot = l % k;
    if (slot == 0 && seg > 0) {  // keep the segment's input: its slot is about to be reused
      std::memcpy(acts_.boundaries[seg], x, NC * sizeof(std::uint16_t));
      x = acts_.boundaries[seg];
    }
    block_forward(l, slot, x);
    x = block_output(slot);
  }
  if (x != acts_.final_input) std::memcpy(acts_.final_input, x, NC * sizeof(std::uint16_t));
}

void MixedPrecisionModel::backward_blocks() {
  const int L = config_.num_layers, k = segment_blocks();
  const int segments = (L + k - 1) / k;
  for (int seg = segments - 1; seg >= 0; --seg) {
    const int first = seg * k, last = std::min(L, first + k) - 1;
    if (seg != segments - 1)  // the last segment is still in its slots from forward
      for (int l = first; l <= last; ++l)
        block_forward(l, l - first, l == first ? acts_.boundaries[seg] : block_output(l - first - 1));
    for (int l = last; l >= first; --l)
      block_backward(l, l - first, l == first ? acts_.boundaries[seg] : block_output(l - first - 1));
  }
}

}  // namespace scalelab
