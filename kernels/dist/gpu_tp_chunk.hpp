// Stage 06 on the GPU: this rank's tensor-parallel shard of the GPT (or of a pipeline stage's
// slice of it: tp x pp), computing on the device; dist/device_tp_shard.hpp holds it, with the
// host's buffers and optimizer. The twin of dist/tp_model.hpp:
//
//   tokens -> vocab-parallel embedding: this rank's rows, zeros elsewhere -> all-reduce -> + wpe
//          -> the slice's tensor-parallel blocks (kernels/dist/gpu_tp_block.hpp)
//          -> ln_f -> LM head over this rank's vocabulary rows (N, V_real)
//          -> vocab-parallel cross-entropy: all-reduces of the row maxima, target logits and
//             sums of exponentials (N numbers each)
//
// With sequence parallelism the LayerNorm/residual regions hold this rank's Nl = N/t rows: the
// embedding's reduction is a reduce-scatter (then wpe on those rows), ln_f's output is
// all-gathered for the head, and the blocks' f and g become all-gathers and reduce-scatters
// (gpu_tp_block.hpp). The replicated tensors' gradients are then parts, summed over the group on
// the host after the step (the host shard's finish_gradients).
//
// A slice without the embeddings starts from the previous stage's (Nl, C) rows, one without the
// head ends at its blocks' output; those cross between stages as device messages
// (device_messages.hpp), each tp rank to the same tp rank of the next stage, as on the CPU.
//
// Collectives per forward + backward, all-reduces over the device communicator, in F for the
// activations and fp32 for the cross-entropy's numbers: for the whole model 1 + 2L of N C
// forward, 2L + 1 (ln_f's input gradient) backward, 3 of N (with sequence parallelism the N C ones
// as all-gathers and reduce-scatters, and two all-gathers more): the CPU's ledger, entry for entry.
//
// The LM head. The logits are (N, V_real) with rows ld = V_real rounded up to 128 apart (the
// whole model's alignment, kernels/model/gpu_gpt.hpp), where V_real = VocabRange::real(): the
// padding rows of this rank's wte (ids >= V) get no logits at all, so they never enter the
// softmax and their gradient stays zero. The activations are the CPU's tp formula with the
// probabilities N ld instead of N Vl, the LayerNorm statistics, losses and lse in fp32.
//
// Parameters and gradients are device buffers laid out as the host shard's (TpLayout::layout());
// load_params and store_grads copy them whole. Checkpointing (every policy) goes through the
// shared block walk; a recomputed block forward communicates again, as on the CPU. Micro-batches
// in flight (a pipeline's) keep their saved activations aside by key, as GpuGPT's do.
// Not here (refused before a chunk is built): zb-h1.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "dist/device_tp_shard.hpp"
#include "dist/tp_layout.hpp"
#include "kernels/core/blas.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/core/dtype.hpp"
#include "kernels/dist/device_messages.hpp"
#include "kernels/dist/gpu_tp_block.hpp"
#include "kernels/dist/gpu_zero_model.hpp"
#include "kernels/model/gpu_gpt.hpp"
#include "model/block_walk.hpp"
#include "model/checkpoint_policy.hpp"

namespace scalelab::cuda {

template <typename F>
class GpuTpChunk final : public DeviceTpChunk, private BlockRunner {
 public:
  static constexpr bool kMixed = !std::is_same_v<F, float>;

  // Rank tp.rank() of tp.size() of storage.slice; make_comm turns tp into the device
  // communicator of its collectives, ordered after this chunk's stream. The host copy in `storage`.
  GpuTpChunk(const GPTConfig& config, const DeviceChunkStorage& storage, Communicator& tp, bool sequence_parallel,
             const DeviceCommFactory& make_comm, MemoryTracker* device);

  TpGroup& group() override { return tp_; }
  const TpLayout& shard() const { return shard_; }
  const ModelSlice& slice() const override { return shard_.slice(); }
  const ParamLayout& layout() const override { return shard_.layout(); }
  std::size_t num_params() const override { return shard_.layout().num_params(); }
  cudaStream_t stream() const { return stream_.get(); }
  // V_real rounded up to 128: the logits' row stride.
  int logits_stride() const { return gpu_padded_vocab(shard_.vocab().real()); }

  // From tokens (host, with the embeddings) or the previous stage's rows (a device message); with
  // the head the mean loss of targets (host), the same on every rank of the group. forward_slice
  // is the first form only (input null).
  float forward_message(const int* tokens, Message& input, const int* targets, int B, int T) override;
  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override;
  // Accumulates this rank's gradients of loss_scale * loss (with the head) or of the next stage's
  // doutput (a device message) on the device; returns once they are final (store_grads reads
  // them) and the message was copied. backward_slice is the first form only (doutput null).
  void backward_message(Message& doutput, float loss_scale) override;
  void backward_slice(const float* doutput, float loss_scale) override;
  // The blocks' output and the input gradient (this rank's rows) as device messages.
  Message output_message(std::size_t n, const MessagePlace& place) const override;
  Message input_grad_message(std::size_t n, const MessagePlace& place) const override;
  std::size_t boundary_elements(int B, int T) const override {
    return tp_.local_rows(static_cast<std::size_t>(B) * T) * shard_.config().channels;
  }
  DataType boundary_type() const override { return DType<F>::comm_type; }
  const float* output() const override { return nullptr; }      // on the device: output_message
  const float* input_grad() const override { return nullptr; }  // on the device: input_grad_message
  // ZB-H1's split backward has no GPU kernels: refused (PipelineStrategy refuses zb-h1 first).
  void backward_input(const float* doutput, float loss_scale) override;
  void backward_weight() override;
  void stash_activations(int key) override;
  void restore_activations(int key) override;
  void release_activations() override;
  std::size_t stashed_count() const override { return stash_.size(); }

  void set_checkpoint_policy(const CheckpointPolicy& policy) override;
  // naive or flash on this rank's heads (chunked has no GPU kernel: refused).
  void set_attention(AttentionKind kind) override;
  // GPT-2's initialisation of the whole model, this rank's part of its slice, into the device copy.
  void init_weights(std::uint64_t seed) override;
  std::size_t block_forward_count() const override { return block_forwards_; }

  void load_params() override;
  void store_grads() override;
  void zero_grads() override;

 private:
  // One forward's saved activations (values in F, statistics in fp32) with its localised tokens
  // and targets: what a micro-batch in flight keeps until its backward.
  struct Saved {
    DeviceBuffer<F> values;
    DeviceBuffer<float> stats;
    DeviceBuffer<int> tokens, targets;  // (N) ids as this rank's rows, -1 for another rank's
    TpDims dims;
    CheckpointPolicy policy;
    F* encoded = nullptr;        // (Nl, C) the embeddings' output, or the previous stage's rows
    std::vector<F*> boundaries;  // segment inputs; [0] = encoded
    std::vector<GpuBlockActs<F>> blocks;
    F* final_input = nullptr;   // (Nl, C) the blocks' output: ln_f's input, or the next stage's
    F* lnf = nullptr;           // (N, C)  with the head: ln_f's output, gathered
    float* lnf_mean = nullptr;  // (Nl)
    float* lnf_rstd = nullptr;  // (Nl)
    F* probs = nullptr;         // (N, V_real), rows logits_stride() apart
    float* losses = nullptr;    // (N)
    bool probs_hold_dlogits = false;
  };

  void ensure_buffers(int B, int T);
  template <typename Values, typename Stats>
  void carve_activations(Values& p, Stats& q, Saved& s);
  // Token ids as this rank's rows (-1: another rank's), uploaded into `out`.
  void localise(const int* ids, DeviceBuffer<int>& out);
  void label(const std::string& where) { tp_.where = where; }
  void head_forward();
  void head_backward(float loss_scale);
  // BlockRunner (model/block_walk.hpp), as GpuGPT's.
  int num_blocks() const override { return slice().num_layers; }
  void forward_block(int l, int slot, ActPlace x) override;
  void backward_block(int l, int slot, ActPlace x) override;
  void keep_boundary(int s, ActPlace x) override;
  void store_output(ActPlace x) override;
  void recompute_attention(int l, int slot) override;
  F* place(ActPlace x) const {
    return x.kind == ActPlace::Kind::kBoundary ? acts_.boundaries[x.index] : acts_.blocks[x.index].residual3;
  }
  void copy_activation(F* dst, const F* src);
  // The LayerNorm/residual region of the last forward: Nl x C.
  std::size_t region_elements() const { return acts_.dims.rows() * acts_.dims.C; }

  TpLayout shard_;
  DeviceChunkStorage host_;
  MemoryTracker* device_;
  Stream stream_;
  Blas blas_;
  DeviceBuffer<F> params_, grads_;
  ParamView<F> w_, g_;
  std::unique_ptr<Communicator> comm_;  // the device communicator of the group
  TpGroup tp_;
  CheckpointPolicy policy_;
  AttentionKind attention_ = AttentionKind::kNaive;
  std::size_t block_forwards_ = 0;

  Saved acts_;                  // the last forward's (values empty: none, or stashed)
  std::map<int, Saved> stash_;  // micro-batches in flight, by key
  // Workspace, sized for scratch_dims_.
  TpDims scratch_dims_;
  DeviceBuffer<F> scratch_buffer_;
  GpuTpBlockScratch<F> scratch_{};
  F* dres_ = nullptr;               // (Nl, C)
  DeviceBuffer<float> ce_;          // (3N) the cross-entropy's row maxima, target logits, sums
  DeviceBuffer<float> ln_scratch_;  // the LayerNorm backward's partial sums
  DeviceBuffer<float> loss_;        // (1)
  std::vector<int> local_ids_;      // host staging of localise()
  F* output_ = nullptr;             // (Nl, C) the last forward's output (no head), kept while stashed
  std::size_t boundary_ = 0;        // Nl C of the last forward
};

// The DeviceTpChunkFactory's work for scalelab train --tp T --device cuda: fp32, bf16 or fp16.
std::unique_ptr<DeviceTpChunk> make_gpu_tp_chunk(const GPTConfig& config, const std::string& precision,
                                                 const DeviceChunkStorage& storage, Communicator& tp,
                                                 bool sequence_parallel, const DeviceCommFactory& make_comm,
                                                 MemoryTracker* device);

}  // namespace scalelab::cuda
