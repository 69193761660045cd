// Stage 06 on the GPU: this rank's tensor-parallel shard of the whole GPT, computing on the
// device (dist/device_tp_shard.hpp holds it, with the host's buffers and optimizer). The twin of
// dist/tp_model.hpp without sequence parallelism:
//
//   tokens -> vocab-parallel embedding: this rank's rows, zeros elsewhere -> all-reduce -> + wpe
//          -> L tensor-parallel blocks (kernels/dist/gpu_tp_block.hpp)
//          -> ln_f -> LM head over this rank's vocabulary rows (N, V_real)
//          -> vocab-parallel cross-entropy: all-reduces of the row maxima, target logits and
//             sums of exponentials (N numbers each)
//
// Collectives per forward + backward, all-reduces over the device communicator, in F for the
// activations and fp32 for the cross-entropy's numbers: 1 + 2L of N C forward, 2L + 1 (ln_f's
// input gradient) backward, 3 of N: the CPU's ledger, entry for entry.
//
// The LM head. The logits are (N, V_real) with rows ld = V_real rounded up to 128 apart (the
// whole model's alignment, kernels/model/gpu_gpt.hpp), where V_real = VocabRange::real(): the
// padding rows of this rank's wte (ids >= V) get no logits at all, so they never enter the
// softmax and their gradient stays zero. The activations are the CPU's tp formula with the
// probabilities N ld instead of N Vl, the LayerNorm statistics, losses and lse in fp32.
//
// Parameters and gradients are device buffers laid out as the host shard's (TpLayout::layout());
// load_params and store_grads copy them whole. Checkpointing (every policy) goes through the
// shared block walk; a recomputed block forward communicates again, as on the CPU.
// Not here (refused before a chunk is built): sequence parallelism, tp x pp, zb-h1.
#pragma once

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

  // Rank tp.rank() of tp.size(); make_comm turns tp into the device communicator of its
  // collectives, ordered after this chunk's stream. The host copy in `storage`.
  GpuTpChunk(const GPTConfig& config, const DeviceChunkStorage& storage, Communicator& tp,
             const DeviceCommFactory& make_comm, MemoryTracker* device);

  TpGroup& group() override { return tp_; }
  const TpLayout& shard() const { return shard_; }
  const ModelSlice& slice() const override { return slice_; }
  const ParamLayout& layout() const override { return shard_.layout(); }
  std::size_t num_params() const override { return shard_.layout().num_params(); }
  cudaStream_t stream() const { return stream_.get(); }
  // V_real rounded up to 128: the logits' row stride.
  int logits_stride() const { return gpu_padded_vocab(shard_.vocab().real()); }

  // The whole model: from tokens (host) to the mean loss of targets (host), the same on every
  // rank of the group.
  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override;
  // Accumulates this rank's gradients of loss_scale * loss on the device; returns once they are
  // final (store_grads reads them).
  void backward_slice(const float* doutput, float loss_scale) override;
  std::size_t boundary_elements(int B, int T) const override {
    return static_cast<std::size_t>(B) * T * shard_.config().channels;
  }
  DataType boundary_type() const override { return DType<F>::comm_type; }
  const float* output() const override { return nullptr; }      // the whole model ends in the loss
  const float* input_grad() const override { return nullptr; }  // and starts from tokens
  // A pipeline's part: refused with a ConfigError (tp x pp runs on the CPU in this build).
  void backward_input(const float* doutput, float loss_scale) override;
  void backward_weight() override;
  void stash_activations(int key) override;
  void restore_activations(int key) override;
  void release_activations() override;
  std::size_t stashed_count() const override { return 0; }

  void set_checkpoint_policy(const CheckpointPolicy& policy) override;
  // naive or flash on this rank's heads (chunked has no GPU kernel: refused).
  void set_attention(AttentionKind kind) override;
  // GPT-2's initialisation of the whole model, this rank's part of it, into the device copy.
  void init_weights(std::uint64_t seed) override;
  std::size_t block_forward_count() const override { return block_forwards_; }

  void load_params() override;
  void store_grads() override;
  void zero_grads() override;

  // For tests: this rank's gradients on the host, widened to fp32.
  std::vector<float> grads_to_host() const;

 private:
  void ensure_buffers(int B, int T);
  template <typename Values, typename Stats>
  void carve_activations(Values& p, Stats& q);
  // Token ids as this rank's rows (-1: another rank's), uploaded into `out`.
  void localise(const int* ids, DeviceBuffer<int>& out);
  void label(const std::string& where) { tp_.where = where; }
  // BlockRunner (model/block_walk.hpp), as GpuGPT's.
  int num_blocks() const override { return slice_.num_layers; }
  void forward_block(int l, int slot, ActPlace x) override;
  void backward_block(int l, int slot, ActPlace x) override;
  void keep_boundary(int s, ActPlace x) override;
  void store_output(ActPlace x) override;
  void recompute_attention(int l, int slot) override;
  F* place(ActPlace x) const {
    return x.kind == ActPlace::Kind::kBoundary ? boundaries_[x.index] : blocks_[x.index].residual3;
  }
  void copy_activation(F* dst, const F* src);

  TpLayout shard_;
  ModelSlice slice_;
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
  GpuTpDims dims_;
  CheckpointPolicy acts_policy_;
  bool have_acts_ = false;
  bool probs_hold_dlogits_ = false;
  std::size_t block_forwards_ = 0;

  // The saved activations (act_buffer_ in F, stat_buffer_ in fp32).
  DeviceBuffer<F> act_buffer_;
  DeviceBuffer<float> stat_buffer_;
  F* encoded_ = nullptr;        // (N, C)
  std::vector<F*> boundaries_;  // segment inputs; [0] = encoded_
  std::vector<GpuBlockActs<F>> blocks_;
  F* final_input_ = nullptr;   // (N, C) ln_f's input
  F* lnf_ = nullptr;           // (N, C)
  float* lnf_mean_ = nullptr;  // (N)
  float* lnf_rstd_ = nullptr;  // (N)
  F* probs_ = nullptr;         // (N, V_real), rows logits_stride() apart
  float* losses_ = nullptr;    // (N)
  // Workspace.
  DeviceBuffer<int> tokens_, targets_;  // (N) localised ids
  DeviceBuffer<F> scratch_buffer_;
  GpuBlockScratch<F> scratch_{};
  F* dres_ = nullptr;               // (N, C)
  F* dlnf_ = nullptr;               // (N, C)
  DeviceBuffer<float> ce_;          // (3N) the cross-entropy's row maxima, target logits, sums
  DeviceBuffer<float> ln_scratch_;  // the LayerNorm backward's partial sums
  DeviceBuffer<float> loss_;        // (1)
  std::vector<int> local_ids_;      // host staging of localise()
};

// The DeviceTpChunkFactory's work for scalelab train --tp T --device cuda: fp32, bf16 or fp16.
std::unique_ptr<DeviceTpChunk> make_gpu_tp_chunk(const GPTConfig& config, const std::string& precision,
                                                 const DeviceChunkStorage& storage, Communicator& tp,
                                                 const DeviceCommFactory& make_comm, MemoryTracker* device);

}  // namespace scalelab::cuda
