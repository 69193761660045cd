// Stage 06: this rank's shard of the GPT under tensor parallelism, behind the trainer's
// TrainModel interface. Every tensor-parallel rank runs the same rows; each holds its split of
// every layer (dist/tp_layout.hpp) and runs:
//
//   tokens -> vocab-parallel embedding [g] + wpe -> blocks (dist/tp_block.hpp)
//          -> ln_f -> [f] -> LM head, column-parallel over the vocabulary (the tied wte shard)
//          -> vocab-parallel cross-entropy (3 all-reduces of N numbers)
//
// Collectives per forward + backward, N = B*T rows of C channels, L blocks:
//   without sequence parallelism: all-reduces of N*C: 1 (embedding) + 2L forward, 2L + 1
//     (ln_f's f) backward; all-reduces of N: 3 (cross-entropy)
//   with it: each all-reduce of N*C becomes an all-gather or a reduce-scatter, and the
//     embedding's backward and ln_f's forward add an all-gather each (the vocabulary-split
//     layers need all rows); then, once per step, one all-reduce of the replicated tensors'
//     gradients (LayerNorms, wpe, the c_proj biases), which each rank computed from its rows
//     only (sum_sequence_parallel_grads).
//
// Checkpointing (stage 02) comes from the shared block walk (model/block_walk.hpp); a recomputed
// block forward communicates again, as Megatron's does.
//
// Inside a pipeline (tp x pp) the model is built for one stage's slice: the embedding only on the
// first stage, ln_f, the head and the cross-entropy only on the last; a slice without the
// embeddings starts from the previous stage's rows, one without the head ends at its blocks'
// output (PipelineChunk's forward_slice and backward_slice, dist/pipeline_chunk.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "dist/norm_share.hpp"
#include "dist/pipeline_chunk.hpp"
#include "dist/tp_block.hpp"
#include "dist/tp_in_flight.hpp"
#include "dist/tp_layout.hpp"
#include "dist/tp_operators.hpp"
#include "dist/tp_shard_model.hpp"
#include "model/block_walk.hpp"
#include "model/split_backward.hpp"

namespace scalelab {

// Under sequence parallelism every rank's replicated tensors (dist/tp_layout.hpp) got gradients
// from its own N/t rows only: adds them over the tensor-parallel group, in one all-reduce
// through `staging` (resized as needed), so every rank holds the whole batch's gradient.
// Without sequence parallelism the ranks' copies are already equal and it does nothing.
void sum_sequence_parallel_grads(TpGroup& tp, const TpLayout& layout, float* grads, std::vector<float>& staging);

class TensorParallelModel final : public TpShardModel, private BlockRunner {
 public:
  // Rank tp_comm.rank() of tp_comm.size(); the communicator must outlive the model.
  TensorParallelModel(const GPTConfig& config, Communicator& tp_comm, bool sequence_parallel, MemoryTracker* tracker)
      : TensorParallelModel(config, ModelSlice{}, tp_comm, sequence_parallel, tracker, nullptr, nullptr) {}
  // A pipeline slice's part (tp x pp, dist/pipeline_stage_model.hpp): its tensors split as above,
  // in the flat buffers params and grads (shard().layout().num_params() each) when given, else
  // in its own.
  TensorParallelModel(const GPTConfig& config, const ModelSlice& slice, Communicator& tp_comm, bool sequence_parallel,
                      MemoryTracker* tracker, float* params, float* grads);

  const GPTConfig& config() const override { return shard_.config(); }
  const ModelSlice& slice() const override { return shard_.slice(); }
  const ParamLayout& layout() const override { return shard_.layout(); }
  std::size_t num_params() const override { return shard_.layout().num_params(); }
  const TpLayout& shard() const override { return shard_; }
  TpGroup& group() override { return tp_; }
  float* params() { return params_; }
  float* grads() { return grads_; }

  // Mean loss of the whole batch (every tensor-parallel rank gets the same).
  double forward(const int* tokens, const int* targets, int B, int T) override;
  void backward(double loss_scale) override;
  // After the step's last backward: the sequence-parallel sum of replicated gradients.
  void finish_gradients() override { sum_sequence_parallel_grads(tp_, shard_, grads_, staging_); }
  void zero_grad() override;
  // Selective with chunked or flash attention is refused (check_attention_policy).
  void set_checkpoint_policy(const CheckpointPolicy& policy) override;
  // Stage 08: the attention the blocks run on this rank's heads (model/attention_block.hpp's
  // attention_step): naive keeps (B, NH/t, T, T) probabilities, chunked and flash (B, NH/t, T).
  void set_attention(AttentionKind kind) override;
  // The whole model's GPT-2 initialisation, then this rank's part: the same start as stage 00.
  void init_weights(std::uint64_t seed) override;
  const float* master_params() const override { return params_; }
  void set_master_params(const float* values) override;
  // AdamW on this rank's shard; the clipping norm is the whole model's (split tensors summed
  // over the group, replicated ones counted once).
  StepOutcome optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) override;
  const IndexRanges& counted_elsewhere() const override { return counted_elsewhere_; }
  void broadcast_params(Communicator& group, int root) override { group.broadcast(params_, num_params(), root); }
  float* fp32_grads() override { return grads_; }
  std::size_t block_forward_count() const override { return block_forwards_; }
  std::string precision_name() const override { return "fp32"; }

  // As a pipeline chunk (tp x pp). The activations crossing to the next chunk are this rank's
  // rows of the region, (Nl, C): all N rows, or N/t under sequence parallelism (each tp rank
  // sends its own rows to the same tp rank of the next stage).
  std::size_t boundary_elements(int B, int T) const override;
  float forward_slice(const int* tokens, const float* input, const int* targets, int B, int T) override;
  const float* output() const override { return acts_.final_input; }
  void backward_slice(const float* doutput, float loss_scale) override;
  // ZB-H1's split backward (model/split_backward.hpp): backward_slice with the blocks' linear
  // layers' weight gradients on a tape (tp_block_backward's `defer`: each layer's output gradient,
  // (N, C) for the row-parallel c_proj layers and (N, OC/t) for the column-parallel ones, 2 N C +
  // 7 N C/t floats per block), added by backward_weight. The collectives all run in the input
  // pass. Without checkpointing.
  void backward_input(const float* doutput, float loss_scale) override;
  void backward_weight() override;
  const float* input_grad() const override { return dres_; }
  void stash_activations(int key) override;
  void restore_activations(int key) override;
  void release_activations() override;
  std::size_t stashed_count() const override { return in_flight_.size(); }

  // The last forward's saved activations, for tests: the logits' softmax (this rank's columns,
  // (N, Vl)), the embeddings' output (Nl, C) and block slot i's activations (dist/tp_block.hpp).
  const float* probs() const { return acts_.head.probs; }
  const float* encoded() const { return acts_.encoded; }
  const BlockActs<float>& block_acts(int slot) const { return acts_.blocks.at(static_cast<std::size_t>(slot)); }
  const TpDims& dims() const { return dims_; }

 private:
  // One forward's saved activations (all in `buffer`), with its tokens and targets: what a
  // pipeline keeps per micro-batch in flight.
  struct Saved {
    Buffer<float> buffer;
    TpDims dims;
    CheckpointPolicy policy;
    float* encoded = nullptr;        // (Nl, C) the embeddings' output (a slice without them: its input)
    std::vector<float*> boundaries;  // (Nl, C) segment inputs; [0] = encoded
    std::vector<BlockActs<float>> blocks;
    float* final_input = nullptr;  // (Nl, C) ln_f's input: the slice's output
    struct Head {                  // with the head only
      float* lnf = nullptr;        // (N, C)  ln_f's output, gathered: the LM head's whole input
      float* lnf_mean = nullptr;   // (Nl)
      float* lnf_rstd = nullptr;   // (Nl)
      float* probs = nullptr;      // (N, Vl) this rank's columns of the softmax
      float* losses = nullptr;     // (N)
    } head;
    std::vector<int> tokens, targets;
    WeightGradTape<float> tape;  // ZB-H1: the weight gradients its backward_input deferred
  };

  void ensure_buffers(int B, int T);
  void backward_pass(const float* doutput, float loss_scale, bool split);
  template <typename Values>
  void carve_activations(Values& v, Saved& s);
  // BlockRunner (model/block_walk.hpp).
  int num_blocks() const override { return slice().count(config()); }
  void forward_block(int block, int slot, ActPlace x) override;
  void backward_block(int block, int slot, ActPlace x) override;
  void keep_boundary(int s, ActPlace x) override;
  void store_output(ActPlace x) override;
  void recompute_attention(int block, int slot) override;
  float* place(ActPlace x) const {
    return x.kind == ActPlace::Kind::kBoundary ? acts_.boundaries[x.index] : acts_.blocks[x.index].residual3;
  }
  std::size_t region_elements() const { return dims_.rows() * static_cast<std::size_t>(dims_.C); }
  void label(const std::string& where) { tp_.where = where; }

  TpLayout shard_;
  TpGroup tp_;
  MemoryTracker* tracker_;
  Buffer<float> own_params_, own_grads_;  // empty when the buffers were given
  float* params_ = nullptr;
  float* grads_ = nullptr;
  ParamView<float> w_, g_;
  IndexRanges counted_elsewhere_;
  CheckpointPolicy policy_;
  AttentionKind attention_ = AttentionKind::kNaive;
  TpDims dims_;  // the scratch's shape (the last forward's)
  Saved acts_;
  TpInFlight<Saved> in_flight_;
  Buffer<float> scratch_buffer_;
  // Workspace (in scratch_buffer_).
  TpBlockScratch scratch_;
  float* dres_ = nullptr;       // (Nl, C)
  float* dlogits_ = nullptr;    // (N, Vl)
  std::vector<float> staging_;  // sum_sequence_parallel_grads's
  std::size_t block_forwards_ = 0;
};

}  // namespace scalelab
