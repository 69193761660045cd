// The tensor-parallel shard on the GPU: buffers, the vocabulary-split embedding and head, the
// blocks through the shared walk, micro-batches in flight, and the host copy's loads and stores.
#include "kernels/dist/gpu_tp_chunk.hpp"

#include <cstdint>

#include "core/carve.hpp"
#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/layers/attention.hpp"
#include "kernels/layers/crossentropy.hpp"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/matmul.hpp"
#include "kernels/layers/tensor_parallel.hpp"
#include "kernels/model/gpu_params.hpp"
#include "model/attention_block.hpp"
#include "model/batch_check.hpp"
#include "model/gpt.hpp"

namespace scalelab::cuda {

template <typename F>
GpuTpChunk<F>::GpuTpChunk(const GPTConfig& config, const DeviceChunkStorage& storage, Communicator& tp,
                          bool sequence_parallel, const DeviceCommFactory& make_comm, MemoryTracker* device)
    : shard_(config, storage.slice.resolved(config), tp.size(), tp.rank()),
      host_(storage),
      device_(device),
      blas_(stream_.get(), device),
      params_(shard_.layout().num_params(), MemCategory::kParams, device),
      grads_(shard_.layout().num_params(), MemCategory::kGrads, device),
      w_(device_param_view(shard_.layout(), shard_.slice(), params_.data())),
      g_(device_param_view(shard_.layout(), shard_.slice(), grads_.data())),
      comm_(make_comm(tp, stream_.get())),
      ln_scratch_(layernorm_backward_scratch_elements(config.channels), MemCategory::kWorkspace, device),
      loss_(1, MemCategory::kWorkspace, device) {
  SCALELAB_CHECK(comm_ && comm_->memory_space() == MemorySpace::kDevice,
                 "the tensor-parallel group's communicator on the GPU must take device memory");
  device_chunk_host_params(host_, kMixed);  // checks that the host copy is there
  device_chunk_host_grads(host_, kMixed);
  tp_.comm = comm_.get();
  tp_.sequence_parallel = sequence_parallel;
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
void GpuTpChunk<F>::carve_activations(Values& p, Stats& q, Saved& s) {
  using Kind = CheckpointPolicy::Kind;
  const int L = slice().num_layers;
  const std::size_t N = s.dims.N(), Nl = s.dims.rows(), NC = N * s.dims.C, NlC = Nl * s.dims.C;
  s.encoded = p.take(NlC);
  s.boundaries.assign(1, s.encoded);
  for (int seg = 1; seg < segment_count(s.policy, L); ++seg) s.boundaries.push_back(p.take(NlC));
  if (has_segments(s.policy)) s.final_input = p.take(NlC);
  const bool own_att = s.policy.kind != Kind::kSelective;
  s.blocks.assign(static_cast<std::size_t>(activation_slots(s.policy, L)), GpuBlockActs<F>{});
  for (auto& b : s.blocks) carve_gpu_tp_block_acts(b, p, q, s.dims, own_att);
  if (s.policy.kind == Kind::kSelective) {  // one att buffer for every block (naive attention only)
    F* shared_att = p.take(static_cast<std::size_t>(s.dims.NHl()) * N * s.dims.T);
    for (auto& b : s.blocks) b.att = shared_att;
  }
  if (!has_segments(s.policy)) s.final_input = s.blocks.back().residual3;
  if (!slice().head) return;
  s.lnf = p.take(NC);
  s.lnf_mean = q.take(Nl);
  s.lnf_rstd = q.take(Nl);
  s.probs = p.take(N * static_cast<std::size_t>(logits_stride()));
  s.losses = q.take(N);
}

template <typename F>
void GpuTpChunk<F>::ensure_buffers(int B, int T) {
  // Under sequence parallelism the N = B T rows must split over the group (a ConfigError otherwise).
  const TpDims dims = tp_dims(tp_, shard_.config(), B, T, attention_);
  const std::size_t N = dims.N(), NlC = dims.rows() * dims.C;
  const auto same = [](const TpDims& a, const TpDims& b) {
    return a.B == b.B && a.T == b.T && a.attention == b.attention;
  };
  const bool same_policy = acts_.policy.kind == policy_.kind && acts_.policy.every == policy_.every;
  // The saved activations: reallocated when the shape or the policy changed, or after they were
  // stashed or released (one set per micro-batch in flight).
  if (acts_.values.size() == 0 || !same(acts_.dims, dims) || !same_policy) {
    acts_.values = DeviceBuffer<F>();  // free the old ones first, so the peak is not their sum
    acts_.stats = DeviceBuffer<float>();
    acts_.dims = dims;
    acts_.policy = policy_;
    Counter<F> count_values;
    Counter<float> count_stats;
    carve_activations(count_values, count_stats, acts_);
    acts_.values = DeviceBuffer<F>(count_values.used, MemCategory::kActivations, device_);
    acts_.stats = DeviceBuffer<float>(count_stats.used, MemCategory::kActivations, device_);
    Carver<F> p(acts_.values.data(), acts_.values.size());
    Carver<float> q(acts_.stats.data(), acts_.stats.size());
    carve_activations(p, q, acts_);
    SCALELAB_CHECK(p.used_all() && q.used_all(), "tensor-parallel GPU activation layout does not add up");
    acts_.tokens = DeviceBuffer<int>(slice().embeddings ? N : 0, MemCategory::kWorkspace, device_);
    acts_.targets = DeviceBuffer<int>(slice().head ? N : 0, MemCategory::kWorkspace, device_);
  }
  if (scratch_buffer_.size() > 0 && same(scratch_dims_, dims)) return;
  scratch_dims_ = dims;
  scratch_buffer_ = DeviceBuffer<F>();
  Counter<F> sized;
  carve_gpu_tp_block_scratch(scratch_, sized, dims);
  scratch_buffer_ = DeviceBuffer<F>(sized.used + NlC, MemCategory::kWorkspace, device_);
  Carver<F> s(scratch_buffer_.data(), scratch_buffer_.size());
  carve_gpu_tp_block_scratch(scratch_, s, dims);
  dres_ = s.take(NlC);
  SCALELAB_CHECK(s.used_all(), "tensor-parallel GPU scratch layout does not add up");
  ce_ = DeviceBuffer<float>();
  ce_ = DeviceBuffer<float>(slice().head ? 3 * N : 0, MemCategory::kWorkspace, device_);
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
  SCALELAB_CHECK(input == nullptr, "a GPU tensor-parallel chunk takes its input activations as a device message");
  Message none;
  return forward_message(tokens, none, targets, B, T);
}

template <typename F>
float GpuTpChunk<F>::forward_message(const int* tokens, Message& input, const int* targets, int B, int T) {
  SCALELAB_CHECK(slice().embeddings ? tokens != nullptr : !input.empty(), "slice ", slice().describe(shard_.config()),
                 slice().embeddings ? " starts from tokens" : " starts from input");
  SCALELAB_CHECK(!slice().head || targets != nullptr, "slice ", slice().describe(shard_.config()), " needs targets");
  // A kernel cannot throw: ids are checked on the host.
  check_batch(shard_.config(), slice().embeddings ? tokens : nullptr, slice().head ? targets : nullptr, B, T);
  ensure_buffers(B, T);
  acts_.probs_hold_dlogits = false;
  const TpDims& d = acts_.dims;
  if (slice().embeddings) {
    localise(tokens, acts_.tokens);
    label("embedding");
    // This rank's rows of the vocabulary, zeros elsewhere; g sums them into the whole lookup (all
    // N rows, or this rank's Nl under sequence parallelism), then wpe once.
    F* partial = d.sequence_parallel ? scratch_.full : acts_.encoded;
    vocab_embedding_forward(partial, acts_.tokens.data(), w_.wte, static_cast<int>(d.N()), d.C, stream());
    gpu_g_forward(tp_, partial, acts_.encoded, d.N() * d.C);
    add_position_embedding(acts_.encoded, w_.wpe, static_cast<int>(tp_.first_row(d.N())), static_cast<int>(d.rows()), T,
                           d.C, stream());
  } else {
    // Kept for block 0's backward; the message may go once the stream has copied it.
    copy_activation(acts_.encoded, message_input<F>(input, region_elements(), "input activations"));
  }
  boundary_ = region_elements();
  walk_blocks_forward(*this, policy_);
  if (!slice().head) {
    output_ = acts_.final_input;
    stream_.synchronize();
    return 0.0f;
  }
  localise(targets, acts_.targets);
  head_forward();
  float loss = 0;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(&loss, loss_.data(), sizeof(float), cudaMemcpyDeviceToHost, stream()));
  stream_.synchronize();
  return loss;
}

template <typename F>
void GpuTpChunk<F>::head_forward() {
  Saved& s = acts_;
  const int N = static_cast<int>(s.dims.N()), C = s.dims.C, V = shard_.vocab().real(), ld = logits_stride();
  cudaStream_t st = stream();
  label("head");
  F* lnf = s.dims.sequence_parallel ? scratch_.ln : s.lnf;  // this rank's rows, gathered by f for the head
  layernorm_forward(lnf, s.lnf_mean, s.lnf_rstd, s.final_input, w_.lnf_w, w_.lnf_b, static_cast<int>(s.dims.rows()), C,
                    st);
  gpu_f_forward(tp_, lnf, s.lnf, s.dims.N() * C);
  if (V > 0) matmul_forward<F>(s.probs, s.lnf, w_.wte, nullptr, N, C, V, ld, blas_);  // logits of this rank's rows
  label("cross-entropy");
  float *row_max = ce_.data(), *target = row_max + N, *sum_exp = target + N;
  vocab_ce_row_max(row_max, s.probs, N, V, ld, st);
  tp_all_reduce(tp_, row_max, static_cast<std::size_t>(N), ReduceOp::kMax);
  vocab_ce_row_sums(sum_exp, target, s.probs, row_max, s.targets.data(), N, V, ld, st);
  tp_all_reduce(tp_, target, static_cast<std::size_t>(N), ReduceOp::kSum);
  tp_all_reduce(tp_, sum_exp, static_cast<std::size_t>(N), ReduceOp::kSum);
  vocab_ce_finish(s.probs, s.losses, s.probs, row_max, sum_exp, target, N, V, ld, st);
  mean_loss(loss_.data(), s.losses, N, st);
}

template <typename F>
void GpuTpChunk<F>::head_backward(float loss_scale) {
  Saved& s = acts_;
  SCALELAB_CHECK(!s.probs_hold_dlogits, "backward() called twice after one forward()");
  const int N = static_cast<int>(s.dims.N()), C = s.dims.C, V = shard_.vocab().real(), ld = logits_stride();
  const std::size_t NC = s.dims.N() * C;
  cudaStream_t st = stream();
  // The whole row's softmax is already on every rank: the gradient of this rank's columns is
  // local (a target of -1 is another rank's column). In place over the probabilities.
  crossentropy_backward(s.probs, s.probs, s.targets.data(), loss_scale / static_cast<float>(N), N, V, ld, st);
  s.probs_hold_dlogits = true;
  label("head");
  F* dlnf_full = scratch_.full;  // partial d lnf (N, C): the LM head is column-parallel
  if (V > 0)
    matmul_backward<F>(dlnf_full, g_.wte, nullptr, s.probs, s.lnf, w_.wte, N, C, V, ld, blas_);
  else
    SCALELAB_CUDA_CHECK(cudaMemsetAsync(dlnf_full, 0, NC * sizeof(F), st));  // no rows here: adds nothing
  F* dlnf = s.dims.sequence_parallel ? scratch_.dln : dlnf_full;
  gpu_f_backward(tp_, dlnf_full, dlnf, NC);
  SCALELAB_CUDA_CHECK(cudaMemsetAsync(dres_, 0, region_elements() * sizeof(F), st));
  layernorm_backward(dres_, g_.lnf_w, g_.lnf_b, scratch_.ln_partials, dlnf, s.final_input, w_.lnf_w, s.lnf_mean,
                     s.lnf_rstd, static_cast<int>(s.dims.rows()), C, st);
}

template <typename F>
void GpuTpChunk<F>::backward_slice(const float* doutput, float loss_scale) {
  SCALELAB_CHECK(doutput == nullptr, "a GPU tensor-parallel chunk takes d loss / d output as a device message");
  Message none;
  backward_message(none, loss_scale);
}

template <typename F>
void GpuTpChunk<F>::backward_message(Message& doutput, float loss_scale) {
  SCALELAB_CHECK(acts_.values.size() > 0, "backward with no saved forward");
  if (slice().head) {
    head_backward(loss_scale);
  } else {
    SCALELAB_CHECK(!doutput.empty(), "slice ", slice().describe(shard_.config()), " needs d loss / d output");
    copy_activation(dres_, message_input<F>(doutput, region_elements(), "d loss / d output"));  // updated in place
  }
  boundary_ = region_elements();
  walk_blocks_backward(*this, policy_);
  if (slice().embeddings) {
    const TpDims& d = acts_.dims;
    label("embedding");
    // wpe's gradient from this rank's rows (under sequence parallelism a part, summed over the
    // group on the host); wte's from the whole rows (g's backward gathers them), this rank's ids.
    position_embedding_backward(g_.wpe, dres_, static_cast<int>(tp_.first_row(d.N())), static_cast<int>(d.rows()), d.T,
                                d.C, stream());
    F* dout_full = d.sequence_parallel ? scratch_.full : dres_;
    gpu_g_backward(tp_, dres_, dout_full, d.N() * d.C);
    vocab_embedding_backward(g_.wte, dout_full, acts_.tokens.data(), static_cast<int>(d.N()), d.C, stream());
  }
  stream_.synchronize();  // the gradients are final for store_grads, and the message was copied
}

template <typename F>
Message GpuTpChunk<F>::output_message(std::size_t n, const MessagePlace& place) const {
  SCALELAB_CHECK(!slice().head && output_ && n == boundary_, "output_message: ", n,
                 " elements asked of a chunk whose output has ", slice().head ? 0 : boundary_);
  return message_of<F>(output_, n, place, stream());
}

template <typename F>
Message GpuTpChunk<F>::input_grad_message(std::size_t n, const MessagePlace& place) const {
  SCALELAB_CHECK(!slice().embeddings && n == boundary_, "input_grad_message: ", n,
                 " elements asked of a chunk whose input gradient has ", slice().embeddings ? 0 : boundary_);
  return message_of<F>(dres_, n, place, stream());  // d loss / d input, for the previous stage
}

template <typename F>
void GpuTpChunk<F>::backward_input(const float*, float) {
  refuse_split_backward_on_gpu();
}

template <typename F>
void GpuTpChunk<F>::backward_weight() {
  refuse_split_backward_on_gpu();
}

template <typename F>
void GpuTpChunk<F>::stash_activations(int key) {
  SCALELAB_CHECK(acts_.values.size() > 0, "stash_activations(", key, ") with no forward to stash");
  SCALELAB_CHECK(!stash_.count(key), "activations of key ", key, " are already stashed");
  stash_[key] = std::move(acts_);  // the device buffers move, the pointers into them stay valid
  acts_ = Saved{};                 // the next forward allocates its own
}

template <typename F>
void GpuTpChunk<F>::restore_activations(int key) {
  const auto it = stash_.find(key);
  SCALELAB_CHECK(it != stash_.end(), "no activations stashed under key ", key);
  acts_ = std::move(it->second);
  stash_.erase(it);
}

template <typename F>
void GpuTpChunk<F>::release_activations() {
  acts_ = Saved{};
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
void GpuTpChunk<F>::forward_block(int l, int slot, ActPlace x) {
  label("block " + std::to_string(slice().first_layer + l));
  gpu_tp_block_forward(tp_, acts_.blocks[slot], w_.blocks[l], place(x), scratch_, acts_.dims, blas_);
  ++block_forwards_;
}

template <typename F>
void GpuTpChunk<F>::backward_block(int l, int slot, ActPlace x) {
  label("block " + std::to_string(slice().first_layer + l));
  gpu_tp_block_backward(tp_, dres_, g_.blocks[l], acts_.blocks[slot], w_.blocks[l], place(x), scratch_, acts_.dims,
                        blas_);
}

template <typename F>
void GpuTpChunk<F>::keep_boundary(int s, ActPlace x) {
  copy_activation(acts_.boundaries[s], place(x));
}

template <typename F>
void GpuTpChunk<F>::store_output(ActPlace x) {
  if (place(x) != acts_.final_input) copy_activation(acts_.final_input, place(x));
}

template <typename F>
void GpuTpChunk<F>::recompute_attention(int /*l*/, int slot) {
  GpuBlockActs<F>& a = acts_.blocks[slot];
  const TpDims& d = acts_.dims;
  attention_forward(scratch_.proj, a.att, a.qkv, d.B, d.T, d.Cl(), d.NHl(), blas_);  // the output is discarded
}

template <typename F>
void GpuTpChunk<F>::copy_activation(F* dst, const F* src) {
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(dst, src, region_elements() * sizeof(F), cudaMemcpyDeviceToDevice, stream()));
}

template class GpuTpChunk<float>;
template class GpuTpChunk<bf16>;
template class GpuTpChunk<fp16>;

std::unique_ptr<DeviceTpChunk> make_gpu_tp_chunk(const GPTConfig& config, const std::string& precision,
                                                 const DeviceChunkStorage& storage, Communicator& tp,
                                                 bool sequence_parallel, const DeviceCommFactory& make_comm,
                                                 MemoryTracker* device) {
  if (precision == "fp32")
    return std::make_unique<GpuTpChunk<float>>(config, storage, tp, sequence_parallel, make_comm, device);
  if (precision == "bf16")
    return std::make_unique<GpuTpChunk<bf16>>(config, storage, tp, sequence_parallel, make_comm, device);
  if (precision == "fp16")
    return std::make_unique<GpuTpChunk<fp16>>(config, storage, tp, sequence_parallel, make_comm, device);
  throw ConfigError("precision: unknown precision '" + precision + "'; use fp32, bf16 or fp16");
}

}  // namespace scalelab::cuda
