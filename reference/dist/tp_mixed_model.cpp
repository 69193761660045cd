// A rank's tensor-parallel shard in mixed precision (stage 06 with stage 03): TensorParallelModel's
// structure (dist/tp_model.cpp) with stage 03's storage (precision/mixed_model.cpp): half tensors,
// staged through fp32 one block at a time.
#include "dist/tp_mixed_model.hpp"

#include <algorithm>
#include <cstring>

#include "core/carve.hpp"
#include "core/error.hpp"
#include "dist/tp_linear.hpp"
#include "dist/vocab_parallel.hpp"
#include "model/batch_check.hpp"
#include "model/gpt.hpp"
#include "model/layers/attention.hpp"
#include "model/layers/layernorm.hpp"
#include "precision/half_type.hpp"

namespace scalelab {

namespace {

constexpr std::size_t kStepChunk = 1 << 16;  // gradients unscaled per chunk of the optimizer step

std::size_t offset_or_zero(const ParamLayout& layout, const std::string& name) {
  const ParamTensor* t = layout.find_if_held(name);
  return t ? t->offset : 0;
}

}  // namespace

MixedTensorParallelModel::MixedTensorParallelModel(const GPTConfig& config, Communicator& tp_comm,
                                                   bool sequence_parallel, HalfFormat format, MemoryTracker* tracker,
                                                   const MixedStorage& storage)
    : shard_(config, storage.slice, tp_comm.size(), tp_comm.rank()), format_(format), tracker_(tracker) {
  SCALELAB_CHECK(storage.params && storage.grads,
                 "a mixed-precision tensor-parallel shard keeps its half parameters and gradients");
  SCALELAB_CHECK(!storage.param_data == !storage.grad_data && (storage.param_data || !storage.master_data),
                 "caller-owned storage is the parameters and gradients, and the master weights held, or none");
  tp_.comm = &tp_comm;
  tp_.sequence_parallel = sequence_parallel;
  tp_.half = format;
  tp_.tracker = tracker;
  const std::size_t n = num_params();
  master_begin_ = std::min(storage.master_begin, n);
  master_count_ = std::max(std::min(storage.master_end, n), master_begin_) - master_begin_;
  if (storage.param_data) {
    param_data_ = storage.param_data;
    grad_data_ = storage.grad_data;
    master_data_ = storage.master_data;
    if (!master_data_) master_count_ = 0;
  } else {
    own_params_ = Buffer<std::uint16_t>(n, MemCategory::kParams, tracker);
    own_grads_ = Buffer<std::uint16_t>(n, MemCategory::kGrads, tracker);
    own_master_ = Buffer<float>(master_count_, MemCategory::kOptimizer, tracker);
    param_data_ = own_params_.data();
    grad_data_ = own_grads_.data();
    master_data_ = own_master_.data();
  }
  if (tp_comm.rank() != 0) counted_elsewhere_ = replicated_ranges(shard_);

  // Offsets of what is addressed one tensor at a time; a block's tensors are contiguous.
  const ParamLayout& l = layout();
  wte_ = offset_or_zero(l, "transformer.wte.weight");
  wpe_ = offset_or_zero(l, "transformer.wpe.weight");
  lnf_w_ = offset_or_zero(l, "transformer.ln_f.weight");
  lnf_b_ = offset_or_zero(l, "transformer.ln_f.bias");
  const TpLayout one_block(config, ModelSlice{0, 1, false, false}, tp_comm.size(), tp_comm.rank());
  block_params_ = one_block.layout().num_params();
  for (int i = 0; i < num_blocks(); ++i) {
    const std::string h = "transformer.h." + std::to_string(slice().first_layer + i) + ".";
    block_offsets_.push_back(l.find(h + "ln_1.weight").offset);
    const ParamTensor& last = l.find(h + "mlp.c_proj.bias");
    SCALELAB_CHECK(last.offset + last.numel == block_offsets_.back() + block_params_,
                   "a tensor-parallel block's tensors are not contiguous");
  }

  // Weight staging: one block (weights and gradients), then what the slice holds of wte (this
  // rank's rows), wpe and ln_f.
  const std::size_t C = static_cast<std::size_t>(config.channels);
  const std::size_t VC = slice().embeddings || slice().head ? shard_.vocab().local * C : 0;
  const std::size_t TC = slice().embeddings ? static_cast<std::size_t>(config.max_seq_len) * C : 0;
  const std::size_t LC = slice().head ? C : 0;
  weight_buffer_ = Buffer<float>(2 * block_params_ + 2 * (VC + TC) + 4 * LC, MemCategory::kWorkspace, tracker);
  Carver<float> p(weight_buffer_.data(), weight_buffer_.size());
  wblock_base_ = p.take(block_params_);
  gblock_base_ = p.take(block_params_);
  wblock_ = tp_param_view(one_block, wblock_base_).blocks.front();
  gblock_ = tp_param_view(one_block, gblock_base_).blocks.front();
  wte_w_ = p.take(VC);
  wte_g_ = p.take(VC);
  wpe_w_ = p.take(TC);
  wpe_g_ = p.take(TC);
  lnf_w_w_ = p.take(LC);
  lnf_b_w_ = p.take(LC);
  lnf_w_g_ = p.take(LC);
  lnf_b_g_ = p.take(LC);
  SCALELAB_CHECK(p.used_all(), "weight staging layout does not add up");
  step_chunk_ = Buffer<float>(std::min(master_count_, kStepChunk), MemCategory::kWorkspace, tracker);
}

DataType MixedTensorParallelModel::half_type() const { return half_data_type(format_); }

void MixedTensorParallelModel::narrow(std::uint16_t* out, float* in, std::size_t n) const {
  float_to_half(out, in, n, format_);
  half_to_float(in, out, n, format_);  // the fp32 copy now holds exactly what was stored
}

// ---- buffers ----

void MixedTensorParallelModel::ensure_buffers(int B, int T) {
  dims_ = tp_dims(tp_, config(), B, T, attention_);
  const bool same_staging = stage_.dims.B == B && stage_.dims.T == T && stage_.dims.attention == attention_ &&
                            stage_.policy.kind == policy_.kind && stage_.policy.every == policy_.every;
  if (!same_staging) ensure_staging();
  // The half activations: again when the staging changed, or after they were stashed or released.
  if (same_staging && acts_.buffer.size() > 0) return;
  acts_ = Saved{};  // free the old ones first, so the peak is not their sum
  assign_activations(acts_);
}

void MixedTensorParallelModel::ensure_staging() {
  const TpDims& d = dims_;
  const bool selective = policy_.kind == CheckpointPolicy::Kind::kSelective;
  const std::size_t N = d.N(), Nl = d.rows(), region = region_elements();
  const std::size_t att = static_cast<std::size_t>(d.NHl()) * N * d.T;
  const std::size_t NVl = slice().head ? N * shard_.vocab().local : 0;
  const std::size_t head = slice().head ? N * d.C + 2 * Nl + N + 2 * NVl : 0;
  Counter<float> block, scratch;
  carve_tp_block_acts(stage_.acts, block, d, !selective);
  carve_tp_block_scratch(stage_.scratch, scratch, d);
  stage_buffer_ = Buffer<float>();
  stage_buffer_ = Buffer<float>(block.used + (selective ? att : 0) + scratch.used + 3 * region + head,
                                MemCategory::kWorkspace, tracker_);
  Carver<float> p(stage_buffer_.data(), stage_buffer_.size());
  // One block slot in fp32, laid out as a half slot; the lse of chunked and flash is carved last
  // (and kept fp32), the selective policy's shared att after it (its own half buffer).
  stage_.acts_base = p.position();
  carve_tp_block_acts(stage_.acts, p, d, !selective);
  stage_.lse_count = stage_.acts.lse ? static_cast<std::size_t>(d.NHl()) * N : 0;
  stage_.acts_count = block.used - stage_.lse_count;
  stage_.residual3_offset = static_cast<std::size_t>(stage_.acts.residual3 - stage_.acts_base);
  if (selective) stage_.acts.att = p.take(att);
  carve_tp_block_scratch(stage_.scratch, p, d);
  stage_.x = p.take(region);
  stage_.dres = p.take(region);
  stage_.out = p.take(region);
  if (slice().head) {
    stage_.lnf = p.take(N * d.C);
    stage_.lnf_mean = p.take(Nl);
    stage_.lnf_rstd = p.take(Nl);
    stage_.losses = p.take(N);
    stage_.logits = p.take(NVl);
    stage_.dlogits = p.take(NVl);
  }
  SCALELAB_CHECK(p.used_all(), "tensor-parallel staging layout does not add up");
  stage_.dims = d;
  stage_.policy = policy_;
}

void MixedTensorParallelModel::assign_activations(Saved& s) {
  const TpDims& d = dims_;
  const int L = num_blocks();
  const std::size_t N = d.N(), Nl = d.rows(), region = region_elements();
  const std::size_t att = static_cast<std::size_t>(d.NHl()) * N * d.T;
  const std::size_t slots = static_cast<std::size_t>(activation_slots(policy_, L));
  const bool selective = policy_.kind == CheckpointPolicy::Kind::kSelective;
  // As the fp32 shard's (TensorParallelModel::carve_activations), in half: the embeddings'
  // output, a boundary per further segment and an output with segments, the block slots, the
  // selective policy's shared att, the head's.
  auto carve = [&](auto& v) {
    s.encoded = v.take(region);
    s.boundaries.assign(1, s.encoded);
    for (int seg = 1; seg < segment_count(policy_, L); ++seg) s.boundaries.push_back(v.take(region));
    s.final_input = has_segments(policy_) ? v.take(region) : nullptr;
    s.blocks.clear();
    for (std::size_t i = 0; i < slots; ++i) s.blocks.push_back(v.take(stage_.acts_count));
    s.shared_att = selective ? v.take(att) : nullptr;
    if (!slice().head) return;
    s.lnf = v.take(N * d.C);
    s.lnf_mean = v.take(Nl);
    s.lnf_rstd = v.take(Nl);
    s.probs = v.take(N * shard_.vocab().local);
    s.losses = v.take(N);
  };
  Counter<std::uint16_t> count;
  carve(count);
  s.buffer = Buffer<std::uint16_t>(count.used, MemCategory::kActivations, tracker_);
  Carver<std::uint16_t> p(s.buffer.data(), s.buffer.size());
  carve(p);
  SCALELAB_CHECK(p.used_all(), "half tensor-parallel activation layout does not add up");
  if (!has_segments(policy_)) s.final_input = s.blocks.back() + stage_.residual3_offset;
  // Chunked and flash: each slot's lse, fp32, in its own buffer.
  s.lse_buffer = Buffer<float>(slots * stage_.lse_count, MemCategory::kActivations, tracker_);
  s.lse.clear();
  for (std::size_t i = 0; i < slots && stage_.lse_count > 0; ++i)
    s.lse.push_back(s.lse_buffer.data() + i * stage_.lse_count);
  s.dims = d;
  s.policy = policy_;
}

// ---- forward ----

double MixedTensorParallelModel::forward(const int* tokens, const int* targets, int B, int T) {
  check_batch(config(), tokens, targets, B, T);
  return forward_slice(tokens, nullptr, targets, B, T);
}

std::size_t MixedTensorParallelModel::boundary_elements(int B, int T) const {
  return tp_.local_rows(static_cast<std::size_t>(B) * T) * config().channels;
}

float MixedTensorParallelModel::forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) {
  ensure_buffers(B, T);
  const int C = config().channels;
  const std::size_t N = dims_.N(), region = region_elements();
  if (slice().embeddings) {
    // This rank's wte rows and wpe widened; the lookup's sum (exact) plus wpe rounded to half.
    acts_.tokens.assign(tokens, tokens + N);
    label("embedding");
    widen_params(wte_w_, wte_, static_cast<std::size_t>(shard_.vocab().local) * C);
    widen_params(wpe_w_, wpe_, static_cast<std::size_t>(config().max_seq_len) * C);
    vocab_parallel_embedding_forward(tp_, stage_.x, stage_.scratch.full, tokens, wte_w_, wpe_w_, shard_.vocab(), B, T,
                                     C);
    narrow(acts_.encoded, stage_.x, region);
  } else {
    float_to_half(acts_.encoded, input, region, format_);  // exact: the previous stage sent half values
  }
  walk_blocks_forward(*this, policy_);
  output_ = nullptr;
  if (!slice().head) {
    widen(stage_.out, acts_.final_input, region);
    output_ = stage_.out;
    return 0.0f;
  }
  acts_.targets.assign(targets, targets + N);
  return head_forward(targets);
}

// ln_f, the vocabulary-split LM head and the cross-entropy: the logits rounded to half, the
// softmax's statistics reduced in fp32, the probabilities saved in half.
float MixedTensorParallelModel::head_forward(const int* targets) {
  const int C = config().channels, N = static_cast<int>(dims_.N()), Nl = static_cast<int>(dims_.rows());
  const int Vl = shard_.vocab().local;
  const std::size_t NVl = static_cast<std::size_t>(N) * Vl, NC = static_cast<std::size_t>(N) * C;
  label("head");
  widen(stage_.x, acts_.final_input, region_elements());
  widen_params(wte_w_, wte_, static_cast<std::size_t>(Vl) * C);
  widen_params(lnf_w_w_, lnf_w_, C);
  widen_params(lnf_b_w_, lnf_b_, C);
  float* lnf = tp_.sequence_parallel ? stage_.scratch.ln : stage_.lnf;
  layernorm_forward(lnf, stage_.lnf_mean, stage_.lnf_rstd, stage_.x, lnf_w_w_, lnf_b_w_, Nl, C);
  tp_.round(lnf, region_elements());
  tp_.round(stage_.lnf_mean, dims_.rows());
  tp_.round(stage_.lnf_rstd, dims_.rows());
  column_parallel_forward(tp_, stage_.logits, stage_.lnf, lnf, wte_w_, nullptr, N, C, Vl);
  tp_.round(stage_.logits, NVl);
  label("cross-entropy");
  const float loss = vocab_parallel_cross_entropy_forward(tp_, stage_.logits, stage_.losses, stage_.logits, targets,
                                                          shard_.vocab(), N);
  narrow(acts_.lnf, stage_.lnf, NC);
  narrow(acts_.lnf_mean, stage_.lnf_mean, dims_.rows());
  narrow(acts_.lnf_rstd, stage_.lnf_rstd, dims_.rows());
  narrow(acts_.probs, stage_.logits, NVl);
  narrow(acts_.losses, stage_.losses, dims_.N());
  return loss;
}

void MixedTensorParallelModel::forward_block(int l, int slot, ActPlace x) {
  label("block " + std::to_string(slice().first_layer + l));
  widen(stage_.x, place(x), region_elements());
  widen_params(wblock_base_, block_offsets_[static_cast<std::size_t>(l)], block_params_);
  tp_block_forward(tp_, stage_.acts, wblock_, stage_.x, stage_.scratch, dims_);
  narrow(acts_.blocks[slot], stage_.acts_base, stage_.acts_count);
  if (stage_.lse_count) std::copy_n(stage_.acts.lse, stage_.lse_count, acts_.lse[slot]);  // fp32, as computed
  if (acts_.shared_att)
    narrow(acts_.shared_att, stage_.acts.att, static_cast<std::size_t>(dims_.NHl()) * dims_.N() * dims_.T);
  ++block_forwards_;
}

void MixedTensorParallelModel::keep_boundary(int s, ActPlace x) {
  std::memcpy(acts_.boundaries[s], place(x), region_elements() * sizeof(std::uint16_t));
}

void MixedTensorParallelModel::store_output(ActPlace x) {
  if (place(x) != acts_.final_input)
    std::memcpy(acts_.final_input, place(x), region_elements() * sizeof(std::uint16_t));
}

void MixedTensorParallelModel::recompute_attention(int /*block*/, int slot) {
  // From the saved half qkv, as forward computed them, rounded and stored as forward stored them
  // (selective checkpointing: naive attention only).
  BlockActs<float>& a = stage_.acts;
  const std::size_t qkv = dims_.N() * 3 * static_cast<std::size_t>(dims_.Cl());
  widen(a.qkv, acts_.blocks[slot] + (a.qkv - stage_.acts_base), qkv);
  attention_forward(stage_.scratch.dnarrow, a.att, a.qkv, dims_.B, dims_.T, dims_.Cl(), dims_.NHl());
  narrow(acts_.shared_att, a.att, static_cast<std::size_t>(dims_.NHl()) * dims_.N() * dims_.T);
}

// ---- backward ----

void MixedTensorParallelModel::backward(double loss_scale) {
  SCALELAB_CHECK(acts_.dims.B > 0, "backward() called before forward()");
  backward_slice(nullptr, static_cast<float>(loss_scale));
}

void MixedTensorParallelModel::backward_slice(const float* doutput, float loss_scale) {
  backward_pass(doutput, loss_scale, false);
}

void MixedTensorParallelModel::backward_input(const float* doutput, float loss_scale) {
  backward_pass(doutput, loss_scale, true);
}

void MixedTensorParallelModel::backward_weight() {
  SCALELAB_CHECK(!acts_.tape.empty() || num_blocks() == 0, "backward_weight() without a backward_input() before it");
  // The staging is free between passes. A block slot's activations hold a linear layer's input
  // and its output gradient side by side, each at most (N, max(C, 4C/t)): the slot keeps ln_1
  // and ln_2 (N C each) and fch and fch_gelu (N 4C/t each).
  const std::size_t io = stage_.dims.N() * static_cast<std::size_t>(std::max(stage_.dims.C, 4 * stage_.dims.Cl()));
  SCALELAB_CHECK(2 * io <= stage_.acts_count, "a block slot's staging holds no layer's input and output gradient");
  acts_.tape.apply(grad_data_, stage_.acts_base, stage_.acts_base + io, gblock_base_);
}

void MixedTensorParallelModel::backward_pass(const float* doutput, float loss_scale, bool split) {
  SCALELAB_CHECK(acts_.buffer.size() > 0, "backward with no saved forward");
  const int C = config().channels;
  const std::size_t VC = static_cast<std::size_t>(shard_.vocab().local) * C;
  // wte's gradient stays in fp32 from the LM head's part until the embedding has added its own,
  // then is rounded once (as stage 03's whole model does).
  const bool wte = slice().embeddings || slice().head;
  if (wte) widen_grads(wte_g_, wte_, VC);
  if (slice().head)
    head_backward(loss_scale);
  else
    std::copy_n(doutput, region_elements(), stage_.dres);  // half values: the next stage rounded them
  if (split) {
    // ZB-H1's input pass: every block now (no checkpointing: block l in slot l), the linear
    // layers' weight gradients on the half tape (their inputs where the saved slots keep them).
    SCALELAB_CHECK(policy_.kind == CheckpointPolicy::Kind::kNone,
                   "the split backward reads saved activations: it runs without checkpointing");
    acts_.tape.reserve(static_cast<std::size_t>(num_blocks()) * tp_block_tape_elements(dims_), format_, tracker_);
    for (int l = num_blocks() - 1; l >= 0; --l) {
      const DeferWeightGrad defer = [this, l](float* dweight, const float* dout, const float* inp, int n, int c,
                                              int oc) {
        acts_.tape.record(block_offsets_[static_cast<std::size_t>(l)] +
                              static_cast<std::size_t>(dweight - gblock_base_),
                          HalfWeightTape::kNoBias, dout,
                          acts_.blocks[static_cast<std::size_t>(l)] + (inp - stage_.acts_base), n, c, oc);
      };
      backward_block_at(l, l,
                        l == 0 ? acts_.encoded
                               : acts_.blocks[static_cast<std::size_t>(l - 1)] + stage_.residual3_offset,
                        &defer);
    }
  } else {
    walk_blocks_backward(*this, policy_);
  }
  if (slice().embeddings) {
    label("embedding");
    const std::size_t TC = static_cast<std::size_t>(config().max_seq_len) * C;
    widen_grads(wpe_g_, wpe_, TC);
    vocab_parallel_embedding_backward(tp_, wte_g_, wpe_g_, stage_.dres, stage_.scratch.full, acts_.tokens.data(),
                                      shard_.vocab(), dims_.B, dims_.T, C);
    store_grads(wpe_, wpe_g_, TC);
  }
  if (wte) store_grads(wte_, wte_g_, VC);
}

void MixedTensorParallelModel::head_backward(float loss_scale) {
  const int C = config().channels, N = static_cast<int>(dims_.N()), Nl = static_cast<int>(dims_.rows());
  const int Vl = shard_.vocab().local;
  const std::size_t NVl = static_cast<std::size_t>(N) * Vl, region = region_elements();
  label("head");
  // The loss gradient (loss_scale / N per row, as the fp32 shard's), rounded to half.
  widen(stage_.logits, acts_.probs, NVl);
  vocab_parallel_cross_entropy_backward(stage_.dlogits, stage_.logits, acts_.targets.data(), shard_.vocab(),
                                        loss_scale / static_cast<float>(N), N);
  tp_.round(stage_.dlogits, NVl);
  // The LM head into wte's fp32 gradient; f's backward sums d ln_f over the group (in half).
  widen_params(wte_w_, wte_, static_cast<std::size_t>(Vl) * C);
  widen(stage_.lnf, acts_.lnf, static_cast<std::size_t>(N) * C);
  float* dlnf = stage_.scratch.dln;
  column_parallel_backward(tp_, dlnf, tp_.sequence_parallel ? stage_.scratch.full : dlnf, wte_g_, nullptr,
                           stage_.dlogits, stage_.lnf, wte_w_, N, C, Vl);
  // ln_f
  std::fill(stage_.dres, stage_.dres + region, 0.0f);
  widen(stage_.x, acts_.final_input, region);
  widen(stage_.lnf_mean, acts_.lnf_mean, dims_.rows());
  widen(stage_.lnf_rstd, acts_.lnf_rstd, dims_.rows());
  widen_params(lnf_w_w_, lnf_w_, C);
  widen_grads(lnf_w_g_, lnf_w_, C);
  widen_grads(lnf_b_g_, lnf_b_, C);
  layernorm_backward(stage_.dres, lnf_w_g_, lnf_b_g_, dlnf, stage_.x, lnf_w_w_, stage_.lnf_mean, stage_.lnf_rstd, Nl,
                     C);
  tp_.round(stage_.dres, region);
  store_grads(lnf_w_, lnf_w_g_, C);
  store_grads(lnf_b_, lnf_b_g_, C);
}

void MixedTensorParallelModel::backward_block(int l, int slot, ActPlace x) {
  backward_block_at(l, slot, place(x), nullptr);
}

void MixedTensorParallelModel::backward_block_at(int l, int slot, const std::uint16_t* x,
                                                 const DeferWeightGrad* defer) {
  label("block " + std::to_string(slice().first_layer + l));
  const std::size_t offset = block_offsets_[static_cast<std::size_t>(l)];
  widen(stage_.acts_base, acts_.blocks[slot], stage_.acts_count);
  if (stage_.lse_count) std::copy_n(acts_.lse[slot], stage_.lse_count, stage_.acts.lse);
  // The selective policy: the shared buffer holds this block's probabilities.
  if (acts_.shared_att)
    widen(stage_.acts.att, acts_.shared_att, static_cast<std::size_t>(dims_.NHl()) * dims_.N() * dims_.T);
  widen(stage_.x, x, region_elements());
  widen_params(wblock_base_, offset, block_params_);
  widen_grads(gblock_base_, offset, block_params_);
  tp_block_backward(tp_, stage_.dres, gblock_, stage_.acts, wblock_, stage_.x, stage_.scratch, dims_, defer);
  // The block's gradients rounded once (with `defer`, those of the deferred weights unchanged).
  store_grads(offset, gblock_base_, block_params_);
}

void MixedTensorParallelModel::finish_gradients() {
  if (!tp_.sequence_parallel) return;  // every rank ran all rows: the copies are already equal
  // As sum_sequence_parallel_grads (dist/tp_grad_sync.cpp), on the half gradients: packed,
  // added in half over the group, unpacked.
  const IndexRanges ranges = replicated_ranges(shard_);
  std::vector<std::uint16_t> packed;
  for (const auto& [begin, end] : ranges) packed.insert(packed.end(), grad_data_ + begin, grad_data_ + end);
  label("sequence-parallel gradients");
  tp_all_reduce_half(tp_, packed.data(), packed.size());
  auto from = packed.begin();
  for (const auto& [begin, end] : ranges) {
    std::copy(from, from + static_cast<std::ptrdiff_t>(end - begin), grad_data_ + begin);
    from += static_cast<std::ptrdiff_t>(end - begin);
  }
}

// ---- micro-batches in flight ----

void MixedTensorParallelModel::stash_activations(int key) { in_flight_.stash(acts_, key); }

void MixedTensorParallelModel::restore_activations(int key) { in_flight_.restore(acts_, key, dims_); }

void MixedTensorParallelModel::release_activations() { TpInFlight<Saved>::release(acts_); }

// ---- parameters and the step ----

void MixedTensorParallelModel::zero_grad() { std::fill(grad_data_, grad_data_ + num_params(), std::uint16_t{0}); }

void MixedTensorParallelModel::set_checkpoint_policy(const CheckpointPolicy& policy) {
  check_attention_policy(attention_, policy);
  policy_ = policy;
}

void MixedTensorParallelModel::set_attention(AttentionKind kind) {
  check_attention_policy(kind, policy_);
  attention_ = kind;
}

void MixedTensorParallelModel::init_weights(std::uint64_t seed) {
  // The whole slice's fp32 values once (transient host copies), this rank's part of them.
  std::vector<float> whole(shard_.whole().num_params()), mine(num_params());
  init_gpt2_weights(config(), shard_.whole(), whole.data(), seed);
  shard_.shard(whole.data(), mine.data());
  float_to_half(param_data_, mine.data(), mine.size(), format_);
  std::copy_n(mine.data() + master_begin_, master_count_, master_data_);
}

void MixedTensorParallelModel::set_master_params(const float* values) {
  std::copy_n(values, master_count_, master_data_);
  float_to_half(param_data_ + master_begin_, master_data_, master_count_, format_);
}

void MixedTensorParallelModel::broadcast_params(Communicator& group, int root) {
  if (master_count_ < num_params()) {
    group.broadcast(param_data_, num_params(), half_type(), root);
    return;
  }
  group.broadcast(master_data_, num_params(), root);
  float_to_half(param_data_, master_data_, num_params(), format_);
}

TrainModel::StepOutcome MixedTensorParallelModel::optimizer_step(AdamW& optimizer, double lr, double grad_scale,
                                                                 double clip) {
  SCALELAB_CHECK(master_count_ == num_params(),
                 "this shard holds part of its master weights: the distributed optimizer steps it");
  MixedNorm norm;
  norm.share = [this](const float* g, std::size_t offset, std::size_t count) {
    return sum_squares_skipping_at(g, offset, offset + count, counted_elsewhere_);
  };
  norm.total = [this](double s) {
    tp_.comm->all_reduce(&s, 1);
    return s;
  };
  const MixedStepBuffers buffers{master_data_, param_data_,        grad_data_,        num_params(),
                                 format_,      step_chunk_.data(), step_chunk_.size()};
  return mixed_optimizer_step(optimizer, buffers, lr, grad_scale, clip, norm);
}

std::vector<float> MixedTensorParallelModel::grads_as_float() const {
  std::vector<float> g(num_params());
  half_to_float(g.data(), grad_data_, g.size(), format_);
  return g;
}

}  // namespace scalelab
