// Stage 02: the one walk over a model's transformer blocks under a checkpoint policy. Every
// model with blocks uses it: GPTModel<F> (model/gpt.cpp, fp32 and fp64), the mixed-precision
// model (stage 03, precision/mixed_model.cpp: half storage, fp32 staging) and the GPU model
// (kernels/model/gpu_gpt.cpp). The walk decides WHEN each block runs forward or backward, from
// WHERE its input comes and into WHICH slot its activations go; the model says HOW (a
// BlockRunner). Activations are named by indices (an ActPlace), never by pointers, so one walk
// serves float, double, half and device memory alike.
//
// Why not a template in this header: lab 02's student writes model/block_walk.cpp, and the labs
// swap whole .cpp files for the student's copy (cmake/ScalelabLabs.cmake). A template here would
// be compiled into each model's own file instead, out of reach of the swap.
#pragma once

#include "model/checkpoint_policy.hpp"

namespace scalelab {

// A (B,T,C) activation on the residual stream, named by index. The walk never touches memory;
// the model maps a place to its own buffer.
struct ActPlace {
  enum class Kind {
    kBoundary,    // boundary s: the input of segment s; boundary 0 is the blocks' input (the
                  // embeddings' output, or a pipeline slice's input activations)
    kSlotOutput,  // the output (residual3) of the block whose activations are in slot i
  };
  Kind kind = Kind::kBoundary;
  int index = 0;

  static ActPlace boundary(int s) { return {Kind::kBoundary, s}; }
  static ActPlace slot_output(int slot) { return {Kind::kSlotOutput, slot}; }
};

// What a model provides for the walk. Blocks are numbered 0 .. num_blocks()-1 within the model
// (a pipeline slice numbers its own blocks from 0). A slot is one block's saved activations:
// without segments (none, selective) block l has slot l; with segments of k blocks there are k
// slots, and block l uses slot l % k.
class BlockRunner {
 public:
  virtual ~BlockRunner() = default;
  virtual int num_blocks() const = 0;
  // Block `block`'s forward on input x; its activations go into `slot`. Counts a block forward.
  virtual void forward_block(int block, int slot, ActPlace x) = 0;
  // Block `block`'s backward, its activations in `slot` and its input x (as in its forward). On
  // entry the model's residual-stream gradient holds d loss / d block output, on exit d loss /
  // d x; parameter gradients accumulate (+=). Then the grad-ready hook hears of the block.
  virtual void backward_block(int block, int slot, ActPlace x) = 0;
  // Copies x into boundary s (s >= 1): segment s starts, and x lives in a slot about to be reused.
  virtual void keep_boundary(int s, ActPlace x) = 0;
  // x, the last block's output, becomes the blocks' output (ln_f's input, or what a pipeline
  // slice hands on). A copy, unless x already is that buffer.
  virtual void store_output(ActPlace x) = 0;
  // Selective policy: recomputes block `block`'s attention probabilities into the buffer all
  // blocks share, from the qkv saved in `slot`. Counts an attention recompute.
  virtual void recompute_attention(int block, int slot) = 0;
};

// True for the policies that keep only segment boundaries (every:K, sqrt).
bool has_segments(const CheckpointPolicy& policy);
// Block-activation slots a model of L blocks needs under the policy: k with segments, else L.
int activation_slots(const CheckpointPolicy& policy, int L);
// Segments of L blocks under the policy: ceil(L/k) with segments, else 1. A model keeps one
// boundary per segment (boundary 0 is the blocks' input), and with segments a separate output.
int segment_count(const CheckpointPolicy& policy, int L);

// The walk: every block's forward, then (after the head's backward) every block's backward,
// as the policy says. What a model calls.
void walk_blocks_forward(BlockRunner& model, const CheckpointPolicy& policy);
void walk_blocks_backward(BlockRunner& model, const CheckpointPolicy& policy);

// The walk's pieces, one per policy (lab 02 writes the last three).
void forward_blocks_all(BlockRunner& model);                  // none, selective: slot l = block l
void backward_blocks_all(BlockRunner& model);                 // none
void forward_blocks_checkpointed(BlockRunner& model, int k);  // every:K, sqrt (segments of k)
void backward_blocks_checkpointed(BlockRunner& model, int k);
void backward_blocks_selective(BlockRunner& model);

}  // namespace scalelab
