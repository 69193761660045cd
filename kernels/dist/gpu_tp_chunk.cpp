// The tensor-parallel shard on the GPU: buffers, the vocabulary-split embedding and head, the
// blocks through the shared walk, and the host copy's loads and stores.
#include "kernels/dist/gpu_tp_chunk.hpp"

#include <cstdint>
#include <optional>

#include "core/carve.hpp"
#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/layers/attention.hpp"
#include "kernels/layers/crossentropy.hpp"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/matmul.hpp"
#include "kernels/layers/tensor_parallel.hpp"
#include "kernels/model/gpu_gpt.hpp"
#include "kernels/model/gpu_params.hpp"
#include "model/attention_block.hpp"
#include "model/gpt.hpp"

namespace scalelab::cuda {

namespace {

template <typename F>
std::optional<HalfFormat> half_format_of() {
  if constexpr (std::is_same_v<F, bf16>) return HalfFormat::kBF16;
  if constexpr (std::is_same_v<F, fp16>) return HalfFormat::kFP16;
  return std::nullopt;
}

// bytes between host and device on `stream`, then waits for it.
void copy_and_wait(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream));
}

[[noreturn]] void no_pipeline_on_gpu() {
  throw ConfigError(
      "tp: a tensor-parallel shard on the GPU is the whole model in this build, not a pipeline stage's part; use "
      "--device cpu for --tp with --pp");
}

}  // namespace

template <typename F>
GpuTpChunk<F>::GpuTpChunk(const GPTConfig& config, const DeviceChunkStorage& storage, Communicator& tp,
                          const DeviceCommFactory& make_comm, MemoryTracker* device)
    : shard_(config, tp.size(), tp.rank()),
      slice_(ModelSlice{}.resolved(config)),
      host_(storage),
      device_(device),
      blas_(stream_.get(), device),
      params_(shard_.layout().num_params(), MemCategory::kParams, device),
      grads_(shard_.layout().num_params(), MemCategory::kGrads, device),
      w_(device_param_view(shard_.layout(), slice_, params_.data())),
      g_(device_param_view(shard_.layout(), slice_, grads_.data())),
      comm_(make_comm(tp, stream_.get())),
      ce_(0, MemCategory::kWorkspace, device),
      ln_scratch_(layernorm_backward_scratch_elements(config.channels), MemCategory::kWorkspace, device),
      loss_(1, MemCategory::kWorkspace, device) {
  require(storage.slice.is_whole(config), "tp",
          "a tensor-parallel shard on the GPU holds the whole model in this build (a pipeline slice was asked for)",
          "use --device cpu for --tp with --pp");
  SCALELAB_CHECK(comm_ && comm_->memory_space() == MemorySpace::kDevice,
                 "the tensor-parallel group's communicator on the GPU must take device memory");
  device_chunk_host_params(host_, kMixed);  // checks that the host copy is there
  device_chunk_host_grads(host_, kMixed);
  tp_.comm = comm_.get();
  tp_.half = half_format_of<F>();
  tp_.tracker = device;
  scratch_.ln_partials = ln_scratch_.data();
}

template <typename F>
void GpuTpChunk<F>::set_checkpoint_policy(const CheckpointPolicy& policy) {
  check_attention_policy(attention_, policy);
  policy_ = policy;
}

template <typename F>
void GpuTpChunk<F>::set_attention(AttentionKind kind) {
  require_gpu_attention(kind, policy_);
  attention_ = kind;
}

template <typename F>
template <typename Values, typename Stats>
void GpuTpChunk<F>::carve_activations(Values& p, Stats& q) {
  using Kind = CheckpointPolicy::Kind;
  const int L = slice_.num_layers;
  const std::size_t N = static_cast<std::size_t>(dims_.N()), NC = N * dims_.C;
  encoded_ = p.take(NC);
  boundaries_.assign(1, encoded_);
  for (int seg = 1; seg < segment_count(policy_, L); ++seg) boundaries_.push_back(p.take(NC));
  if (has_segments(policy_)) final_input_ = p.take(NC);
  const bool own_att = policy_.kind != Kind::kSelective;
  blocks_.assign(static_cast<std::size_t>(activation_slots(policy_, L)), GpuBlockActs<F>{});
  for (auto& b : blocks_) carve_gpu_tp_block_acts(b, p, q, dims_, own_att);
  if (policy_.kind == Kind::kSelective) {  // one att buffer for every block (naive attention only)
    F* shared_att = p.take(static_cast<std::size_t>(dims_.NHl()) * N * dims_.T);
    for (auto& b : blocks_) b.att = shared_att;
  }
  if (!has_segments(policy_)) final_input_ = blocks_.back().residual3;
  lnf_ = p.take(NC);
  lnf_mean_ = q.take(N);
  lnf_rstd_ = q.take(N);
  probs_ = p.take(N * static_cast<std::size_t>(logits_stride()));
  losses_ = q.take(N);
}

template <typename F>
void GpuTpChunk<F>::ensure_buffers(int B, int T) {
  const bool same_shape = dims_.B == B && dims_.T == T && dims_.attention == attention_;
  const bool same_policy = acts_policy_.kind == policy_.kind && acts_policy_.every == policy_.every;
  dims_ = GpuTpDims{B, T, shard_.config().channels, shard_.config().num_heads, shard_.size(), attention_};
  const std::size_t N = static_cast<std::size_t>(B) * T, NC = N * dims_.C;
  if (!have_acts_ || !same_shape || !same_policy) {
    act_buffer_ = DeviceBuffer<F>();  // free the old ones first, so the peak is not their sum
    stat_buffer_ = DeviceBuffer<float>();
    Counter<F> count_values;
    Counter<float> count_stats;
    carve_activations(count_values, count_stats);
    act_buffer_ = DeviceBuffer<F>(count_values.used, MemCategory::kActivations, device_);
    stat_buffer_ = DeviceBuffer<float>(count_stats.used, MemCategory::kActivations, device_);
    Carver<F> p(act_buffer_.data(), act_buffer_.size());
    Carver<float> q(stat_buffer_.data(), stat_buffer_.size());
    carve_activations(p, q);
    SCALELAB_CHECK(p.used_all() && q.used_all(), "tensor-parallel GPU activation layout does not add up");
    acts_policy_ = policy_;
    have_acts_ = true;
  }
  if (same_shape && scratch_buffer_.size() > 0) return;
  scratch_buffer_ = DeviceBuffer<F>();
  scratch_buffer_ = DeviceBuffer<F>(gpu_tp_block_scratch_elements(dims_) + 2 * NC, MemCategory::kWorkspace, device_);
  Carver<F> s(scratch_buffer_.data(), scratch_buffer_.size());
  carve_gpu_tp_block_scratch(scratch_, s, dims_);
  dres_ = s.take(NC);
  dlnf_ = s.take(NC);
  SCALELAB_CHECK(s.used_all(), "tensor-parallel GPU scratch layout does not add up");
  tokens_ = DeviceBuffer<int>(N, MemCategory::kWorkspace, device_);
  targets_ = DeviceBuffer<int>(N, MemCategory::kWorkspace, device_);
  ce_ = DeviceBuffer<float>(3 * N, MemCategory::kWorkspace, device_);
}

template <typename F>
void GpuTpChunk<F>::localise(const int* ids, DeviceBuffer<int>& out) {
  const VocabRange& v = shard_.vocab();
  local_ids_.resize(out.size());
  for (std::size_t i = 0; i < local_ids_.size(); ++i) {
    const int local = ids[i] - v.begin;
    local_ids_[i] = local >= 0 && local < v.real() ? local : -1;
  }
  out.copy_from_host(local_ids_);
}

template <typename F>
float GpuTpChunk<F>::forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) {
  SCALELAB_CHECK(tokens != nullptr && targets != nullptr && input == nullptr,
                 "the GPU tensor-parallel shard runs the whole model: tokens and targets in, the loss out");
  ensure_buffers(B, T);
  localise(tokens, tokens_);
  localise(targets, targets_);
  probs_hold_dlogits_ = false;
  const int N = dims_.N(), C = dims_.C, V = shard_.vocab().real(), ld = logits_stride();
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  cudaStream_t st = stream();
  label("embedding");
  vocab_embedding_forward(encoded_, tokens_.data(), w_.wte, B, T, C, st);
  gpu_tp_all_reduce(tp_, encoded_, NC);  // g: the whole lookup on every rank
  add_position_embedding(encoded_, w_.wpe, B, T, C, st);
  walk_blocks_forward(*this, policy_);
  label("head");
  layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, final_input_, w_.lnf_w, w_.lnf_b, N, C, st);
  if (V > 0) matmul_forward<F>(probs_, lnf_, w_.wte, nullptr, N, C, V, ld, blas_);  // logits of this rank's rows
  label("cross-entropy");
  float *row_max = ce_.data(), *target = row_max + N, *sum_exp = target + N;
  vocab_ce_row_max(row_max, probs_, N, V, ld, st);
  tp_all_reduce(tp_, row_max, static_cast<std::size_t>(N), ReduceOp::kMax);
  vocab_ce_row_sums(sum_exp, target, probs_, row_max, targets_.data(), N, V, ld, st);
  tp_all_reduce(tp_, target, static_cast<std::size_t>(N), ReduceOp::kSum);
  tp_all_reduce(tp_, sum_exp, static_cast<std::size_t>(N), ReduceOp::kSum);
  vocab_ce_finish(probs_, losses_, probs_, row_max, sum_exp, target, N, V, ld, st);
  mean_loss(loss_.data(), losses_, N, st);
  float loss = 0;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(&loss, loss_.data(), sizeof(float), cudaMemcpyDeviceToHost, st));
  stream_.synchronize();
  return loss;
}

template <typename F>
void GpuTpChunk<F>::backward_slice(const float* doutput, float loss_scale) {
  SCALELAB_CHECK(have_acts_, "backward() called before forward()");
  SCALELAB_CHECK(doutput == nullptr, "the GPU tensor-parallel shard's backward starts from its loss");
  SCALELAB_CHECK(!probs_hold_dlogits_, "backward() called twice after one forward()");
  const int N = dims_.N(), C = dims_.C, V = shard_.vocab().real(), ld = logits_stride();
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  cudaStream_t st = stream();
  // The whole row's softmax is already on every rank: the gradient of this rank's columns is
  // local (a target of -1 is another rank's column). In place over the probabilities.
  crossentropy_backward(probs_, probs_, targets_.data(), loss_scale / static_cast<float>(N), N, V, ld, st);
  probs_hold_dlogits_ = true;
  label("head");
  if (V > 0)
    matmul_backward<F>(dlnf_, g_.wte, nullptr, probs_, lnf_, w_.wte, N, C, V, ld, blas_);  // partial d lnf
  else
    SCALELAB_CUDA_CHECK(cudaMemsetAsync(dlnf_, 0, NC * sizeof(F), st));  // no rows here: adds nothing
  gpu_tp_all_reduce(tp_, dlnf_, NC);                                     // f's backward: the LM head is column-parallel
  SCALELAB_CUDA_CHECK(cudaMemsetAsync(dres_, 0, NC * sizeof(F), st));
  layernorm_backward(dres_, g_.lnf_w, g_.lnf_b, scratch_.ln_partials, dlnf_, final_input_, w_.lnf_w, lnf_mean_,
                     lnf_rstd_, N, C, st);
  walk_blocks_backward(*this, policy_);
  label("embedding");
  vocab_embedding_backward(g_.wte, g_.wpe, dres_, tokens_.data(), dims_.B, dims_.T, C, st);
  stream_.synchronize();  // the gradients are final for store_grads
}

template <typename F>
void GpuTpChunk<F>::backward_input(const float*, float) {
  no_pipeline_on_gpu();
}

template <typename F>
void GpuTpChunk<F>::backward_weight() {
  no_pipeline_on_gpu();
}

template <typename F>
void GpuTpChunk<F>::stash_activations(int) {
  no_pipeline_on_gpu();
}

template <typename F>
void GpuTpChunk<F>::restore_activations(int) {
  no_pipeline_on_gpu();
}

template <typename F>
void GpuTpChunk<F>::release_activations() {
  act_buffer_ = DeviceBuffer<F>();
  stat_buffer_ = DeviceBuffer<float>();
  have_acts_ = false;
}

template <typename F>
void GpuTpChunk<F>::init_weights(std::uint64_t seed) {
  std::vector<float> whole(shard_.whole().num_params()), mine(num_params());
  init_gpt2_weights(shard_.config(), shard_.whole(), whole.data(), seed);
  shard_.shard(whole.data(), mine.data());
  if constexpr (kMixed) {
    std::vector<std::uint16_t> half(mine.size());
    float_to_half(half.data(), mine.data(), mine.size(), *half_format_of<F>());
    copy_and_wait(params_.data(), half.data(), params_.bytes(), cudaMemcpyHostToDevice, stream());
  } else {
    copy_and_wait(params_.data(), mine.data(), params_.bytes(), cudaMemcpyHostToDevice, stream());
  }
}

template <typename F>
void GpuTpChunk<F>::load_params() {
  copy_and_wait(params_.data(), device_chunk_host_params(host_, kMixed), params_.bytes(), cudaMemcpyHostToDevice,
                stream());
}

template <typename F>
void GpuTpChunk<F>::store_grads() {
  copy_and_wait(device_chunk_host_grads(host_, kMixed), grads_.data(), grads_.bytes(), cudaMemcpyDeviceToHost,
                stream());
}

template <typename F>
void GpuTpChunk<F>::zero_grads() {
  SCALELAB_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), stream()));
}

template <typename F>
std::vector<float> GpuTpChunk<F>::grads_to_host() const {
  stream_.synchronize();
  std::vector<float> out(num_params());
  if constexpr (kMixed) {
    std::vector<std::uint16_t> half(num_params());
    grads_.copy_to_host(reinterpret_cast<F*>(half.data()), half.size());
    half_to_float(out.data(), half.data(), half.size(), *half_format_of<F>());
  } else {
    grads_.copy_to_host(out.data(), out.size());
  }
  return out;
}

template <typename F>
void GpuTpChunk<F>::forward_block(int l, int slot, ActPlace x) {
  label("block " + std::to_string(l));
  gpu_tp_block_forward(tp_, blocks_[slot], w_.blocks[l], place(x), scratch_, dims_, blas_);
  ++block_forwards_;
}

template <typename F>
void GpuTpChunk<F>::backward_block(int l, int slot, ActPlace x) {
  label("block " + std::to_string(l));
  gpu_tp_block_backward(tp_, dres_, g_.blocks[l], blocks_[slot], w_.blocks[l], place(x), scratch_, dims_, blas_);
}

template <typename F>
void GpuTpChunk<F>::keep_boundary(int s, ActPlace x) {
  copy_activation(boundaries_[s], place(x));
}

template <typename F>
void GpuTpChunk<F>::store_output(ActPlace x) {
  if (place(x) != final_input_) copy_activation(final_input_, place(x));
}

template <typename F>
void GpuTpChunk<F>::recompute_attention(int /*l*/, int slot) {
  GpuBlockActs<F>& a = blocks_[slot];
  attention_forward(scratch_.proj, a.att, a.qkv, dims_.B, dims_.T, dims_.Cl(), dims_.NHl(), blas_);  // output unused
}

template <typename F>
void GpuTpChunk<F>::copy_activation(F* dst, const F* src) {
  const std::size_t n = static_cast<std::size_t>(dims_.N()) * dims_.C;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(F), cudaMemcpyDeviceToDevice, stream()));
}

template class GpuTpChunk<float>;
template class GpuTpChunk<bf16>;
template class GpuTpChunk<fp16>;

std::unique_ptr<DeviceTpChunk> make_gpu_tp_chunk(const GPTConfig& config, const std::string& precision,
                                                 const DeviceChunkStorage& storage, Communicator& tp,
                                                 const DeviceCommFactory& make_comm, MemoryTracker* device) {
  if (precision == "fp32") return std::make_unique<GpuTpChunk<float>>(config, storage, tp, make_comm, device);
  if (precision == "bf16") return std::make_unique<GpuTpChunk<bf16>>(config, storage, tp, make_comm, device);
  if (precision == "fp16") return std::make_unique<GpuTpChunk<fp16>>(config, storage, tp, make_comm, device);
  throw ConfigError("precision: unknown precision '" + precision + "'; use fp32, bf16 or fp16");
}

}  // namespace scalelab::cuda
