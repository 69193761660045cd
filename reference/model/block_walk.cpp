// Stage 02: activation checkpointing, the walk over the blocks that every model uses (the fp32
// GPT, the mixed-precision GPT of stage 03 and the GPU GPT; see model/block_walk.hpp).
// Segment checkpointing: forward keeps only the input of every segment of k blocks (the
// "boundaries") and reuses one segment's worth of activation slots; backward walks the segments
// from last to first, recomputes each segment's forward from its boundary into the slots, then
// runs the blocks' backward. The last segment is still in the slots after forward, so it is not
// recomputed: the extra work is L - (last segment's length) block forwards.
// The selective policy keeps everything except the attention probabilities, which all blocks
// share one buffer for and which are recomputed from the saved qkv before each block's backward.
// The arithmetic is the same as without checkpointing, so the gradients are bitwise equal.
#include "model/block_walk.hpp"

#include <algorithm>

namespace scalelab {

bool has_segments(const CheckpointPolicy& policy) {
  return policy.kind == CheckpointPolicy::Kind::kEveryK || policy.kind == CheckpointPolicy::Kind::kSqrtL;
}

int activation_slots(const CheckpointPolicy& policy, int L) {
  return has_segments(policy) ? policy.segment_blocks(L) : L;
}

int segment_count(const CheckpointPolicy& policy, int L) {
  const int k = activation_slots(policy, L);
  return (L + k - 1) / k;
}

void walk_blocks_forward(BlockRunner& model, const CheckpointPolicy& policy) {
  if (has_segments(policy))
    forward_blocks_checkpointed(model, policy.segment_blocks(model.num_blocks()));
  else
    forward_blocks_all(model);
}

void walk_blocks_backward(BlockRunner& model, const CheckpointPolicy& policy) {
  switch (policy.kind) {
    case CheckpointPolicy::Kind::kNone: backward_blocks_all(model); return;
    case CheckpointPolicy::Kind::kSelective: backward_blocks_selective(model); return;
    case CheckpointPolicy::Kind::kEveryK:
    case CheckpointPolicy::Kind::kSqrtL:
      backward_blocks_checkpointed(model, policy.segment_blocks(model.num_blocks()));
      return;
  }
}

// Every block keeps its own slot: block l reads block l-1's output (block 0 the input).
void forward_blocks_all(BlockRunner& model) {
  const int L = model.num_blocks();
  for (int l = 0; l < L; ++l) model.forward_block(l, l, l == 0 ? ActPlace::boundary(0) : ActPlace::slot_output(l - 1));
  model.store_output(ActPlace::slot_output(L - 1));  // no copy: the slot is the output
}

void backward_blocks_all(BlockRunner& model) {
  for (int l = model.num_blocks() - 1; l >= 0; --l)
    model.backward_block(l, l, l == 0 ? ActPlace::boundary(0) : ActPlace::slot_output(l - 1));
}

void forward_blocks_checkpointed(BlockRunner& model, int k) {
  const int L = model.num_blocks();
  // LAB 02 BEGIN forward_blocks_checkpointed: section 2
  ActPlace x = ActPlace::boundary(0);
  for (int l = 0; l < L; ++l) {
    const int seg = l / k, slot = l % k;
    if (slot == 0 && seg > 0) {
      // A new segment starts: keep its input, since the slots holding it will be overwritten.
      model.keep_boundary(seg, x);
      x = ActPlace::boundary(seg);
    }
    model.forward_block(l, slot, x);
    x = ActPlace::slot_output(slot);
  }
  model.store_output(x);
  // LAB 02 END
}

void backward_blocks_checkpointed(BlockRunner& model, int k) {
  const int L = model.num_blocks();
  // LAB 02 BEGIN backward_blocks_checkpointed: section 2
  const int segments = (L + k - 1) / k;  // segment_count()
  for (int seg = segments - 1; seg >= 0; --seg) {
    const int first = seg * k, last = std::min(L, first + k) - 1;
    // Block l's input: the boundary for the segment's first block, else the previous slot's output.
    auto input = [&](int l) { return l == first ? ActPlace::boundary(seg) : ActPlace::slot_output(l - first - 1); };
    if (seg != segments - 1)  // recompute this segment's activations from its boundary
      for (int l = first; l <= last; ++l) model.forward_block(l, l - first, input(l));
    for (int l = last; l >= first; --l) model.backward_block(l, l - first, input(l));
  }
  // LAB 02 END
}

void backward_blocks_selective(BlockRunner& model) {
  const int L = model.num_blocks();
  // LAB 02 BEGIN backward_blocks_selective: section 3
  for (int l = L - 1; l >= 0; --l) {
    if (l != L - 1) model.recompute_attention(l, l);  // the shared buffer still holds the last block's
    model.backward_block(l, l, l == 0 ? ActPlace::boundary(0) : ActPlace::slot_output(l - 1));
  }
  // LAB 02 END
}

}  // namespace scalelab
