// Stage 02: activation checkpointing. Forward keeps only the input of every segment of k blocks
// (the "boundaries") and reuses one segment's worth of activation slots; backward walks the
// segments from last to first, recomputes each segment's forward from its boundary into the
// slots, then runs the blocks' backward. The last segment is still in the slots after forward,
// so it is not recomputed: the extra work is L - (last segment's length) block forwards.
// The selective policy keeps everything except the attention probabilities, which all blocks
// share one buffer for and which are recomputed from the saved qkv before each block's backward.
// The arithmetic is the same as without checkpointing, so the gradients are bitwise equal.
#include <algorithm>
#include <cstring>

#include "model/gpt.hpp"
#include "model/layers/attention.hpp"

namespace scalelab {

template <typename F>
void GPTModel<F>::forward_blocks_checkpointed(const ParamView<F>& w) {
  const int B = acts_.B, T = acts_.T, C = config_.channels, NH = config_.num_heads, L = config_.num_layers;
  const std::size_t BTC = static_cast<std::size_t>(B) * T * C;
  // LAB 02 BEGIN forward_blocks_checkpointed: section 2
  const int k = policy_.segment_blocks(L);
  const F* x = acts_.encoded;
  for (int l = 0; l < L; ++l) {
    const int seg = l / k, slot = l % k;
    if (slot == 0 && seg > 0) {
      // A new segment starts: keep its input, since the slots holding it will be overwritten.
      std::memcpy(acts_.boundaries[seg], x, BTC * sizeof(F));
      x = acts_.boundaries[seg];
    }
    block_forward(acts_.blocks[slot], w.blocks[l], x, scratch_, B, T, C, NH);
    ++block_forwards_;
    x = acts_.blocks[slot].residual3;
  }
  std::memcpy(acts_.final_input, x, BTC * sizeof(F));
  // LAB 02 END
}

template <typename F>
void GPTModel<F>::backward_blocks_checkpointed(const ParamView<F>& w, const ParamView<F>& g) {
  const int B = acts_.B, T = acts_.T, C = config_.channels, NH = config_.num_heads, L = config_.num_layers;
  if (policy_.kind == CheckpointPolicy::Kind::kSelective) {
    // LAB 02 BEGIN backward_blocks_selective: section 3
    for (int l = L - 1; l >= 0; --l) {
      BlockActs<F>& a = acts_.blocks[l];
      if (l != L - 1) {  // the shared buffer still holds the last block's probabilities
        attention_forward(scratch_.proj, a.att, a.qkv, B, T, C, NH);  // the output is discarded
        ++attention_recomputes_;
      }
      const F* x = l == 0 ? acts_.encoded : acts_.blocks[l - 1].residual3;
      block_backward_at(l, a, x, w, g);
    }
    // LAB 02 END
    return;
  }
  // LAB 02 BEGIN backward_blocks_checkpointed: section 2
  const int k = policy_.segment_blocks(L);
  const int segments = (L + k - 1) / k;
  for (int seg = segments - 1; seg >= 0; --seg) {
    const int first = seg * k, last = std::min(L, first + k) - 1;
    if (seg != segments - 1) {  // recompute this segment's activations from its boundary
      const F* x = acts_.boundaries[seg];
      for (int l = first; l <= last; ++l) {
        block_forward(acts_.blocks[l - first], w.blocks[l], x, scratch_, B, T, C, NH);
        ++block_forwards_;
        x = acts_.blocks[l - first].residual3;
      }
    }
    for (int l = last; l >= first; --l) {
      const F* x = l == first ? acts_.boundaries[seg] : acts_.blocks[l - first - 1].residual3;
      block_backward_at(l, acts_.blocks[l - first], x, w, g);
    }
  }
  // LAB 02 END
}

template void GPTModel<float>::forward_blocks_checkpointed(const ParamView<float>&);
template void GPTModel<double>::forward_blocks_checkpointed(const ParamView<double>&);
template void GPTModel<float>::backward_blocks_checkpointed(const ParamView<float>&, const ParamView<float>&);
template void GPTModel<double>::backward_blocks_checkpointed(const ParamView<double>&, const ParamView<double>&);

}  // namespace scalelab
