// Stage 03: the mixed-precision GPT's buffers, its embeddings and head. The structure is
// model/gpt.cpp's, and the blocks run through the same walk (model/block_walk.cpp); what changes
// is where the bytes live (half storage, fp32 staging) and that every layer output is rounded
// to half.
#include "precision/mixed_model.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/carve.hpp"
#include "core/error.hpp"
#include "model/batch_check.hpp"
#include "model/gpt.hpp"
#include "model/layers/crossentropy.hpp"
#include "model/layers/encoder.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/matmul.hpp"

namespace scalelab {

namespace {

constexpr std::size_t kStepChunk = 1 << 16;  // gradients unscaled per chunk of the optimizer step

// One block alone, laid out as every block is in the flat buffer: its tensors' places in a
// block-sized buffer.
BlockView<float> one_block_view(const GPTConfig& config, float* base) {
  return make_param_view(config, ModelSlice{0, 1, false, false}, base).blocks.front();
}

}  // namespace

MixedPrecisionModel::MixedPrecisionModel(const GPTConfig& config, HalfFormat format, MemoryTracker* tracker,
                                         const MixedStorage& storage)
    : config_(config),
      layout_((config.validate(), config)),
      format_(format),
      tracker_(tracker),
      master_begin_(std::min(storage.master_begin, layout_.num_params())),
      params_(storage.params ? layout_.num_params() : 0, MemCategory::kParams, tracker),
      grads_(storage.grads ? layout_.num_params() : 0, MemCategory::kGrads, tracker),
      master_(std::max(std::min(storage.master_end, layout_.num_params()), master_begin_) - master_begin_,
              MemCategory::kOptimizer, tracker),
      offsets_(tensor_offsets(layout_, config.num_layers)),
      block_params_(ParamLayout(config_, ModelSlice{0, 1, false, false}).num_params()),
      chunk_(std::min(layout_.num_params(), kStepChunk), MemCategory::kWorkspace, tracker) {
  const std::size_t C = config_.channels, VC = config_.vocab_size * C, TC = config_.max_seq_len * C;
  weight_stage_ = Buffer<float>(2 * block_params_ + 2 * (VC + TC) + 4 * C, MemCategory::kWorkspace, tracker_);
  Carver<float> p(weight_stage_.data(), weight_stage_.size());
  stage_.wblock = p.take(block_params_);
  stage_.gblock = p.take(block_params_);
  stage_.w = one_block_view(config_, stage_.wblock);
  stage_.g = one_block_view(config_, stage_.gblock);
  stage_.wte = p.take(VC);
  stage_.gwte = p.take(VC);
  stage_.wpe = p.take(TC);
  stage_.gwpe = p.take(TC);
  stage_.lnf_w = p.take(C);
  stage_.lnf_b = p.take(C);
  stage_.glnf_w = p.take(C);
  stage_.glnf_b = p.take(C);
  SCALELAB_CHECK(p.used_all(), "weight staging layout does not add up");
}

MixedPrecisionModel::TensorOffsets MixedPrecisionModel::tensor_offsets(const ParamLayout& layout, int num_layers) {
  TensorOffsets o;
  o.wte = layout.find("transformer.wte.weight").offset;
  o.wpe = layout.find("transformer.wpe.weight").offset;
  o.lnf_w = layout.find("transformer.ln_f.weight").offset;
  o.lnf_b = layout.find("transformer.ln_f.bias").offset;
  for (int l = 0; l < num_layers; ++l)
    o.blocks.push_back(layout.find("transformer.h." + std::to_string(l) + ".ln_1.weight").offset);
  return o;
}

void MixedPrecisionModel::widen_params(float* out, std::size_t offset, std::size_t n, bool block_backward) const {
  half_to_float(out, param_source_ ? param_source_(offset, block_backward) : params_.data() + offset, n, format_);
}

void MixedPrecisionModel::widen_grads(float* out, std::size_t offset, std::size_t n) {
  half_to_float(out, grad_place(offset), n, format_);
}

void MixedPrecisionModel::store_grads(std::size_t offset, const float* in, std::size_t n) {
  float_to_half(grad_place(offset), in, n, format_);
}

void MixedPrecisionModel::narrow(std::uint16_t* out, float* in, std::size_t n) const {
  float_to_half(out, in, n, format_);
  half_to_float(in, out, n, format_);  // the fp32 copy now holds exactly what was stored
}

void MixedPrecisionModel::init_weights(std::uint64_t seed) {
  // The fp32 model's initialisation, straight into the master weights when they are all held.
  if (master_.size() == num_params()) {
    init_gpt2_weights(layout(), config_.num_layers, master_.data(), seed);
    float_to_half(params_.data(), master_.data(), params_.size(), format_);
    return;
  }
  // A shard of them (ZeRO): every parameter drawn, rounded to half where held, the shard kept.
  Buffer<float> whole(num_params(), MemCategory::kWorkspace, tracker_);
  init_gpt2_weights(layout(), config_.num_layers, whole.data(), seed);
  float_to_half(params_.data(), whole.data(), params_.size(), format_);
  std::copy_n(whole.data() + master_begin_, master_.size(), master_.data());
}

void MixedPrecisionModel::set_master_params(const float* values) {
  std::copy_n(values, master_.size(), master_.data());
  if (params_.size() > 0) float_to_half(params_.data() + master_begin_, master_.data(), master_.size(), format_);
}

void MixedPrecisionModel::zero_grad() { std::fill(grads_.begin(), grads_.end(), std::uint16_t{0}); }

std::vector<float> MixedPrecisionModel::grads_as_float() const {
  std::vector<float> g(num_params());
  half_to_float(g.data(), grads_.data(), g.size(), format_);
  return g;
}

MixedActivationElements mixed_activation_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy,
                                                  AttentionKind attention) {
  // One lse per block slot (L, or one segment's k); selective, with its shared att, is naive only.
  const std::size_t lse = attention == AttentionKind::kNaive
                              ? 0
                              : static_cast<std::size_t>(activation_slots(policy, config.num_layers)) *
                                    static_cast<std::size_t>(
                                        attention_activation_elems(attention, B, config.num_heads, T));
  return {activation_elements(config, B, T, policy, ModelSlice{}, attention) - lse, lse};
}

void MixedPrecisionModel::ensure_buffers(int B, int T) {
  const bool same_policy = acts_.policy.kind == policy_.kind && acts_.policy.every == policy_.every;
  if (acts_.B == B && acts_.T == T && same_policy && acts_.attention == attention_) return;
  const std::size_t C = config_.channels, V = config_.vocab_size, NH = config_.num_heads;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C, att = NH * BT * T;
  // 16 BTC + 4 BT + att (naive) or lse (chunked, flash)
  const std::size_t block = block_act_elements(B, T, config_.channels, config_.num_heads, attention_);
  const std::size_t scratch = attention_scratch_elements(attention_, T);
  act_buffer_ = Buffer<std::uint16_t>();  // free the old ones first, so the peak is not their sum
  lse_buffer_ = Buffer<float>();
  stage_buffer_ = Buffer<float>();
  // Half activations: the fp32 model's element count at 2 bytes each, except the lse of chunked
  // and flash, kept in fp32 (mixed_block.cpp).
  const MixedActivationElements saved = mixed_activation_elements(config_, B, T, policy_, attention_);
  act_buffer_ = Buffer<std::uint16_t>(saved.half, MemCategory::kActivations, tracker_);
  if (saved.fp32 > 0) lse_buffer_ = Buffer<float>(saved.fp32, MemCategory::kActivations, tracker_);
  stage_buffer_ = Buffer<float>(block + 10 * BTC + scratch + 3 * BT + 2 * BT * V, MemCategory::kWorkspace, tracker_);
  Carver<float> p(stage_buffer_.data(), stage_buffer_.size());
  // One block in fp32, laid out as a half slot; the selective policy's att and the lse of chunked
  // and flash go at the end (neither is part of the half slot).
  const bool shared_att = policy_.kind == CheckpointPolicy::Kind::kSelective;
  stage_.acts_base = p.position();
  assign_block_acts(stage_.acts, p, B, T, config_.channels, config_.num_heads, attention_, !shared_att);
  if (shared_att) stage_.acts.att = p.take(att);
  stage_.lse_count = stage_.acts.lse ? NH * BT : 0;
  stage_.acts_count = block - (shared_att ? att : 0) - stage_.lse_count;
  stage_.residual3_offset = static_cast<std::size_t>(stage_.acts.residual3 - stage_.acts_base);
  stage_.scratch.proj = p.take(BTC);
  stage_.scratch.dbtc = p.take(BTC);
  stage_.scratch.dwide = p.take(4 * BTC);
  stage_.scratch.dtt = p.take(scratch);  // naive's T x T; chunked's and flash's workspace
  stage_.x = p.take(BTC);
  stage_.lnf = p.take(BTC);
  stage_.dres = p.take(BTC);
  stage_.dlnf = p.take(BTC);
  stage_.lnf_mean = p.take(BT);
  stage_.lnf_rstd = p.take(BT);
  stage_.losses = p.take(BT);
  stage_.logits = p.take(BT * V);
  stage_.dlogits = p.take(BT * V);
  SCALELAB_CHECK(p.used_all(), "staging layout does not add up");
  assign_activations(B, T);
}

void MixedPrecisionModel::assign_activations(int B, int T) {
  const std::size_t C = config_.channels, V = config_.vocab_size, L = config_.num_layers;
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C;
  const std::size_t att = static_cast<std::size_t>(config_.num_heads) * BT * T;
  Carver<std::uint16_t> p(act_buffer_.data(), act_buffer_.size());
  acts_.B = B;
  acts_.T = T;
  acts_.policy = policy_;
  acts_.attention = attention_;
  acts_.encoded = p.take(BTC);
  acts_.boundaries.assign(1, acts_.encoded);
  acts_.shared_att = nullptr;
  // The fp32 model's layout (model/gpt.cpp), with half slots laid out like a staged block.
  const int layers = static_cast<int>(L);
  for (int seg = 1; seg < segment_count(policy_, layers); ++seg) acts_.boundaries.push_back(p.take(BTC));
  if (has_segments(policy_)) acts_.final_input = p.take(BTC);
  acts_.blocks.resize(static_cast<std::size_t>(activation_slots(policy_, layers)));
  for (auto& b : acts_.blocks) b = p.take(stage_.acts_count);
  if (policy_.kind == CheckpointPolicy::Kind::kSelective) acts_.shared_att = p.take(att);
  // Chunked and flash: each slot's lse, fp32, in its own buffer.
  Carver<float> lse(lse_buffer_.data(), lse_buffer_.size());
  acts_.lse.clear();
  if (stage_.lse_count > 0)
    for (std::size_t slot = 0; slot < acts_.blocks.size(); ++slot) acts_.lse.push_back(lse.take(stage_.lse_count));
  SCALELAB_CHECK(lse.used_all(), "lse layout does not add up");
  if (!has_segments(policy_)) acts_.final_input = block_output(layers - 1);
  carve_head_acts(acts_, p, p, B, T, static_cast<int>(C), static_cast<int>(V));
  SCALELAB_CHECK(p.used_all(), "half activation layout does not add up");
}

double MixedPrecisionModel::forward(const int* tokens, const int* targets, int B, int T) {
  check_batch(config_, tokens, targets, B, T);
  ensure_buffers(B, T);
  tokens_.assign(tokens, tokens + static_cast<std::size_t>(B) * T);
  targets_.assign(targets, targets + tokens_.size());
  const int C = config_.channels, V = config_.vocab_size, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C, VC = static_cast<std::size_t>(V) * C;
  // Embeddings: half tables widened, the sum rounded to half.
  widen_params(stage_.wte, offsets_.wte, VC);
  widen_params(stage_.wpe, offsets_.wpe, static_cast<std::size_t>(config_.max_seq_len) * C);
  encoder_forward(stage_.x, tokens, stage_.wte, stage_.wpe, B, T, C);
  narrow(acts_.encoded, stage_.x, NC);
  walk_blocks_forward(*this, policy_);
  // ln_f, then the tied LM head; the softmax and the loss run in fp32 on the half logits (as
  // autocast does), and the probabilities are saved in half.
  widen(stage_.x, acts_.final_input, NC);
  widen_params(stage_.lnf_w, offsets_.lnf_w, C);
  widen_params(stage_.lnf_b, offsets_.lnf_b, C);
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
  widen_params(stage_.wte, offsets_.wte, VC);
  widen_grads(stage_.gwte, offsets_.wte, VC);
  widen_grads(stage_.gwpe, offsets_.wpe, TC);
  widen(stage_.lnf, acts_.lnf, NC);
  matmul_backward(stage_.dlnf, stage_.gwte, static_cast<float*>(nullptr), stage_.dlogits, stage_.lnf, stage_.wte, N, C,
                  V);
  round(stage_.dlnf, NC);
  // ln_f
  std::fill(stage_.dres, stage_.dres + NC, 0.0f);
  widen(stage_.x, acts_.final_input, NC);
  widen(stage_.lnf_mean, acts_.lnf_mean, N);
  widen(stage_.lnf_rstd, acts_.lnf_rstd, N);
  widen_params(stage_.lnf_w, offsets_.lnf_w, C);
  widen_grads(stage_.glnf_w, offsets_.lnf_w, C);
  widen_grads(stage_.glnf_b, offsets_.lnf_b, C);
  layernorm_backward(stage_.dres, stage_.glnf_w, stage_.glnf_b, stage_.dlnf, stage_.x, stage_.lnf_w, stage_.lnf_mean,
                     stage_.lnf_rstd, N, C);
  round(stage_.dres, NC);
  store_grads(offsets_.lnf_w, stage_.glnf_w, C);
  store_grads(offsets_.lnf_b, stage_.glnf_b, C);
  notify_grads_ready(offsets_.lnf_w);  // ln_f's gradients are final
  walk_blocks_backward(*this, policy_);
  // The embeddings, then wte's and wpe's gradients rounded to half once.
  encoder_backward(stage_.gwte, stage_.gwpe, stage_.dres, tokens_.data(), B, T, C);
  store_grads(offsets_.wte, stage_.gwte, VC);
  store_grads(offsets_.wpe, stage_.gwpe, TC);
  notify_grads_ready(offsets_.wte);  // the embeddings (offset 0) are final
}

}  // namespace scalelab
