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
#include "model/split_backward.hpp"

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
      slice_(storage.slice.resolved(config)),
      layout_(config, slice_),
      format_(format),
      tracker_(tracker),
      master_begin_(std::min(storage.master_begin, layout_.num_params())),
      params_(storage.params && !storage.param_data ? layout_.num_params() : 0, MemCategory::kParams, tracker),
      grads_(storage.grads && !storage.grad_data ? layout_.num_params() : 0, MemCategory::kGrads, tracker),
      master_(storage.master_data
                  ? 0
                  : std::max(std::min(storage.master_end, layout_.num_params()), master_begin_) - master_begin_,
              MemCategory::kOptimizer, tracker),
      param_data_(storage.param_data ? storage.param_data : params_.data()),
      grad_data_(storage.grad_data ? storage.grad_data : grads_.data()),
      master_data_(storage.master_data ? storage.master_data : master_.data()),
      param_count_(param_data_ ? layout_.num_params() : 0),
      grad_count_(grad_data_ ? layout_.num_params() : 0),
      master_count_(storage.master_data
                        ? std::max(std::min(storage.master_end, layout_.num_params()), master_begin_) - master_begin_
                        : master_.size()),
      offsets_(tensor_offsets(layout_, slice_)),
      block_params_(ParamLayout(config_, ModelSlice{0, 1, false, false}).num_params()),
      chunk_(std::min(layout_.num_params(), kStepChunk), MemCategory::kWorkspace, tracker) {
  SCALELAB_CHECK(!storage.param_data == !storage.grad_data && (storage.param_data || !storage.master_data),
                 "caller-owned storage is the parameters and gradients, and the master weights held, or none");
  // Weight staging for what the slice holds: one block, the tied wte (with the embeddings or the
  // head), wpe (with the embeddings), ln_f (with the head).
  const std::size_t C = config_.channels;
  const std::size_t VC = slice_.embeddings || slice_.head ? static_cast<std::size_t>(config_.vocab_size) * C : 0;
  const std::size_t TC = slice_.embeddings ? static_cast<std::size_t>(config_.max_seq_len) * C : 0;
  const std::size_t LC = slice_.head ? C : 0;
  weight_stage_ = Buffer<float>(2 * block_params_ + 2 * (VC + TC) + 4 * LC, MemCategory::kWorkspace, tracker_);
  Carver<float> p(weight_stage_.data(), weight_stage_.size());
  stage_.wblock = p.take(block_params_);
  stage_.gblock = p.take(block_params_);
  stage_.w = one_block_view(config_, stage_.wblock);
  stage_.g = one_block_view(config_, stage_.gblock);
  stage_.wte = p.take(VC);
  stage_.gwte = p.take(VC);
  stage_.wpe = p.take(TC);
  stage_.gwpe = p.take(TC);
  stage_.lnf_w = p.take(LC);
  stage_.lnf_b = p.take(LC);
  stage_.glnf_w = p.take(LC);
  stage_.glnf_b = p.take(LC);
  SCALELAB_CHECK(p.used_all(), "weight staging layout does not add up");
}

MixedPrecisionModel::TensorOffsets MixedPrecisionModel::tensor_offsets(const ParamLayout& layout,
                                                                       const ModelSlice& slice) {
  TensorOffsets o;
  auto offset_of = [&](const std::string& name) {
    const ParamTensor* t = layout.find_if_held(name);
    return t ? t->offset : 0;
  };
  o.wte = offset_of("transformer.wte.weight");
  o.wpe = offset_of("transformer.wpe.weight");
  o.lnf_w = offset_of("transformer.ln_f.weight");
  o.lnf_b = offset_of("transformer.ln_f.bias");
  for (int l = slice.first_layer; l < slice.first_layer + slice.num_layers; ++l)
    o.blocks.push_back(layout.find("transformer.h." + std::to_string(l) + ".ln_1.weight").offset);
  return o;
}

void MixedPrecisionModel::widen_params(float* out, std::size_t offset, std::size_t n, bool block_backward) const {
  half_to_float(out, param_source_ ? param_source_(offset, block_backward) : param_data_ + offset, n, format_);
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
  // The fp32 model's initialisation, straight into the master weights when they are all held
  // (a slice's tensors get what the whole model's initialisation gives them).
  if (master_count_ == num_params()) {
    init_gpt2_weights(config_, layout(), master_data_, seed);
    float_to_half(param_data_, master_data_, param_count_, format_);
    return;
  }
  // A shard of them (ZeRO): every parameter drawn, rounded to half where held, the shard kept.
  Buffer<float> whole(num_params(), MemCategory::kWorkspace, tracker_);
  init_gpt2_weights(config_, layout(), whole.data(), seed);
  float_to_half(param_data_, whole.data(), param_count_, format_);
  std::copy_n(whole.data() + master_begin_, master_count_, master_data_);
}

void MixedPrecisionModel::set_master_params(const float* values) {
  std::copy_n(values, master_count_, master_data_);
  if (param_count_ > 0) float_to_half(param_data_ + master_begin_, master_data_, master_count_, format_);
}

void MixedPrecisionModel::zero_grad() { std::fill(grad_data_, grad_data_ + grad_count_, std::uint16_t{0}); }

std::vector<float> MixedPrecisionModel::grads_as_float() const {
  std::vector<float> g(num_params());
  half_to_float(g.data(), grad_data_, g.size(), format_);
  return g;
}

MixedActivationElements mixed_activation_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy,
                                                  AttentionKind attention) {
  return mixed_activation_elements(config, B, T, policy, attention, ModelSlice{});
}

MixedActivationElements mixed_activation_elements(const GPTConfig& config, int B, int T, const CheckpointPolicy& policy,
                                                  AttentionKind attention, const ModelSlice& slice) {
  // One lse per block slot (L, or one segment's k); selective, with its shared att, is naive only.
  const std::size_t lse = attention == AttentionKind::kNaive
                              ? 0
                              : static_cast<std::size_t>(activation_slots(policy, slice.count(config))) *
                                    static_cast<std::size_t>(
                                        attention_activation_elems(attention, B, config.num_heads, T));
  return {activation_elements(config, B, T, policy, slice, attention) - lse, lse};
}

void MixedPrecisionModel::ensure_buffers(int B, int T) {
  const bool same_staging = staged_B_ == B && staged_T_ == T && staged_policy_.kind == policy_.kind &&
                            staged_policy_.every == policy_.every && staged_attention_ == attention_;
  // The half activations: again when the staging changed, or after they were stashed or released.
  if (same_staging && act_buffer_.size() > 0) return;
  act_buffer_ = Buffer<std::uint16_t>();  // free the old ones first, so the peak is not their sum
  lse_buffer_ = Buffer<float>();
  if (!same_staging) ensure_staging(B, T);
  // Half activations: the fp32 model's element count at 2 bytes each, except the lse of chunked
  // and flash, kept in fp32 (mixed_block.cpp).
  const MixedActivationElements saved = mixed_activation_elements(config_, B, T, policy_, attention_, slice_);
  act_buffer_ = Buffer<std::uint16_t>(saved.half, MemCategory::kActivations, tracker_);
  if (saved.fp32 > 0) lse_buffer_ = Buffer<float>(saved.fp32, MemCategory::kActivations, tracker_);
  assign_activations(B, T);
}

void MixedPrecisionModel::ensure_staging(int B, int T) {
  const std::size_t C = config_.channels, NH = config_.num_heads;
  const std::size_t V = slice_.head ? config_.vocab_size : 0;  // the logits only with the head
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * C, att = NH * BT * T;
  // 16 BTC + 4 BT + att (naive) or lse (chunked, flash)
  const std::size_t block = block_act_elements(B, T, config_.channels, config_.num_heads, attention_);
  const std::size_t scratch = attention_scratch_elements(attention_, T);
  stage_buffer_ = Buffer<float>();
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
  staged_B_ = B;
  staged_T_ = T;
  staged_policy_ = policy_;
  staged_attention_ = attention_;
}

void MixedPrecisionModel::assign_activations(int B, int T) {
  const std::size_t C = config_.channels, V = config_.vocab_size, L = slice_.num_layers;
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
  if (slice_.head) carve_head_acts(acts_, p, p, B, T, static_cast<int>(C), static_cast<int>(V));
  SCALELAB_CHECK(p.used_all(), "half activation layout does not add up");
}

double MixedPrecisionModel::forward(const int* tokens, const int* targets, int B, int T) {
  return forward_slice(tokens, nullptr, targets, B, T);
}

double MixedPrecisionModel::forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) {
  SCALELAB_CHECK(slice_.embeddings ? tokens != nullptr : input != nullptr, "slice ", slice_.describe(config_),
                 slice_.embeddings ? " starts from tokens" : " starts from input activations");
  SCALELAB_CHECK(!slice_.head || targets != nullptr, "slice ", slice_.describe(config_), " needs targets");
  check_batch(config_, slice_.embeddings ? tokens : nullptr, slice_.head ? targets : nullptr, B, T);
  ensure_buffers(B, T);
  const int C = config_.channels, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  if (slice_.embeddings) {
    // Embeddings: half tables widened, the sum rounded to half.
    tokens_.assign(tokens, tokens + N);
    widen_params(stage_.wte, offsets_.wte, static_cast<std::size_t>(config_.vocab_size) * C);
    widen_params(stage_.wpe, offsets_.wpe, static_cast<std::size_t>(config_.max_seq_len) * C);
    encoder_forward(stage_.x, tokens, stage_.wte, stage_.wpe, B, T, C);
    narrow(acts_.encoded, stage_.x, NC);
  } else {
    float_to_half(acts_.encoded, input, NC, format_);  // exact: the previous slice stored it as half
  }
  walk_blocks_forward(*this, policy_);
  if (!slice_.head) return 0.0;
  targets_.assign(targets, targets + N);
  return head_forward(targets, N);
}

// ln_f, then the tied LM head; the softmax and the loss run in fp32 on the half logits (as
// autocast does), and the probabilities are saved in half.
float MixedPrecisionModel::head_forward(const int* targets, int N) {
  const int C = config_.channels, V = config_.vocab_size;
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  widen(stage_.x, acts_.final_input, NC);
  widen_params(stage_.wte, offsets_.wte, static_cast<std::size_t>(V) * C);
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

const float* MixedPrecisionModel::output() {
  SCALELAB_CHECK(acts_.B > 0, "output() before forward_slice()");
  widen(stage_.x, acts_.final_input, static_cast<std::size_t>(acts_.B) * acts_.T * config_.channels);
  return stage_.x;
}

void MixedPrecisionModel::backward(double loss_scale) {
  SCALELAB_CHECK(slice_.head, "backward(loss_scale) of slice ", slice_.describe(config_),
                 ", which has no head: use backward_slice(doutput)");
  backward_slice(nullptr, loss_scale);
}

void MixedPrecisionModel::backward_slice(const float* doutput, double loss_scale) {
  backward_pass(doutput, loss_scale, false);
}

void MixedPrecisionModel::backward_input(const float* doutput, double loss_scale) {
  backward_pass(doutput, loss_scale, true);
}

void MixedPrecisionModel::backward_pass(const float* doutput, double loss_scale, bool split) {
  SCALELAB_CHECK(acts_.B > 0,
                 slice_.head ? "backward() called before forward()" : "backward_slice() called before forward_slice()");
  SCALELAB_CHECK(slice_.head || doutput != nullptr, "slice ", slice_.describe(config_), " needs d loss / d output");
  const int B = acts_.B, T = acts_.T, C = config_.channels, N = B * T;
  const std::size_t NC = static_cast<std::size_t>(N) * C, VC = static_cast<std::size_t>(config_.vocab_size) * C;
  // wte's gradient stays in fp32 from the LM head's part until the encoder has added its own
  // (the whole model rounds their sum once; a pipeline's two copies each round their part).
  if (slice_.embeddings || slice_.head) widen_grads(stage_.gwte, offsets_.wte, VC);
  if (slice_.head)
    head_backward(loss_scale, N);
  else
    std::copy_n(doutput, NC, stage_.dres);  // half values already: the next slice rounded them
  if (split) {
    // Zero-bubble: every block's input gradient now (no checkpointing: all blocks' activations
    // are saved, slot l for block l), the linear layers' weight gradients on the tape.
    SCALELAB_CHECK(policy_.kind == CheckpointPolicy::Kind::kNone,
                   "the split backward reads saved activations: it runs without checkpointing");
    tape_.reserve(slice_.num_layers * block_tape_elements(B, T, C), format_, tracker_);
    for (int l = slice_.num_layers - 1; l >= 0; --l)
      backward_block_input(l, l, l == 0 ? acts_.encoded : block_output(l - 1));
  } else {
    walk_blocks_backward(*this, policy_);
  }
  if (slice_.embeddings) {
    // The embeddings, then wte's and wpe's gradients rounded to half once.
    const std::size_t TC = static_cast<std::size_t>(config_.max_seq_len) * C;
    widen_grads(stage_.gwpe, offsets_.wpe, TC);
    encoder_backward(stage_.gwte, stage_.gwpe, stage_.dres, tokens_.data(), B, T, C);
    store_grads(offsets_.wpe, stage_.gwpe, TC);
  }
  if (slice_.embeddings || slice_.head) store_grads(offsets_.wte, stage_.gwte, VC);
  if (slice_.embeddings) notify_grads_ready(offsets_.wte);  // the embeddings (offset 0) are final
}

void MixedPrecisionModel::head_backward(double loss_scale, int N) {
  const int C = config_.channels, V = config_.vocab_size;
  const std::size_t NC = static_cast<std::size_t>(N) * C, NV = static_cast<std::size_t>(N) * V;
  // The loss gradient, as the fp32 model computes it (float(loss_scale) / N), rounded to half.
  widen(stage_.logits, acts_.probs, NV);
  crossentropy_backward(stage_.dlogits, stage_.logits, targets_.data(), static_cast<float>(loss_scale) / N, N, V);
  round(stage_.dlogits, NV);
  // The LM head, into wte's fp32 gradient.
  widen_params(stage_.wte, offsets_.wte, static_cast<std::size_t>(V) * C);
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
}

void MixedPrecisionModel::backward_weight() {
  SCALELAB_CHECK(!tape_.empty() || slice_.num_layers == 0, "backward_weight() without a backward_input() before it");
  SCALELAB_CHECK(grad_data_ != nullptr, "the split backward writes the model's own gradient buffer");
  // The staging is free between passes: a block slot's activations hold any layer's input (N, up
  // to 4C), the scratch's dwide any output gradient, the block's gradient staging any layer's.
  tape_.apply(grad_data_, stage_.acts_base, stage_.scratch.dwide, stage_.gblock);
}

void MixedPrecisionModel::record_weight_grad(int l, int slot, const float* dweight, const float* dbias,
                                             const float* dout, const float* inp, int N, int C, int OC) {
  const std::size_t block = offsets_.blocks[static_cast<std::size_t>(l)];
  tape_.record(block + static_cast<std::size_t>(dweight - stage_.gblock),
               block + static_cast<std::size_t>(dbias - stage_.gblock), dout,
               acts_.blocks[slot] + (inp - stage_.acts_base), N, C, OC);
}

void MixedPrecisionModel::stash_activations(int key) {
  SCALELAB_CHECK(acts_.B > 0, "stash_activations(", key, ") with no forward to stash");
  SCALELAB_CHECK(!stash_.count(key), "activations of key ", key, " are already stashed");
  SavedForward& saved = stash_[key];
  saved.act_buffer = std::move(act_buffer_);
  saved.lse_buffer = std::move(lse_buffer_);
  saved.acts = acts_;  // its pointers stay valid: the buffers moved, their memory did not
  saved.tokens = std::move(tokens_);
  saved.targets = std::move(targets_);
  saved.tape = std::move(tape_);
  tape_ = HalfWeightTape{};
  acts_.B = 0;
  tokens_.clear();
  targets_.clear();
}

void MixedPrecisionModel::restore_activations(int key) {
  const auto it = stash_.find(key);
  SCALELAB_CHECK(it != stash_.end(), "no activations stashed under key ", key);
  release_activations();
  act_buffer_ = std::move(it->second.act_buffer);
  lse_buffer_ = std::move(it->second.lse_buffer);
  acts_ = it->second.acts;
  tokens_ = std::move(it->second.tokens);
  targets_ = std::move(it->second.targets);
  tape_ = std::move(it->second.tape);
  stash_.erase(it);
}

void MixedPrecisionModel::release_activations() {
  SCALELAB_CHECK(tape_.empty(), "activations released while their weight gradients are still deferred");
  act_buffer_ = Buffer<std::uint16_t>();
  lse_buffer_ = Buffer<float>();
  acts_.B = 0;
  tokens_.clear();
  targets_.clear();
}

}  // namespace scalelab
