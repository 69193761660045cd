// Stage 02 on the GPU: the blocks' forward and backward under a checkpoint policy, the walk of
// model/checkpointing.cpp. Without checkpointing every block has its slot. With segments of k
// blocks only each segment's input (a boundary) is kept; backward recomputes a segment into the
// shared slots before its blocks' backward (the last segment is still there from forward). The
// selective policy keeps everything but the attention probabilities, which all blocks share one
// buffer for and which are recomputed from the saved qkv before each block's backward.
#include <algorithm>

#include "kernels/core/dtype.hpp"
#include "kernels/layers/attention.hpp"
#include "kernels/model/gpu_gpt.hpp"

namespace scalelab::cuda {

template <typename F>
void GpuGPT<F>::forward_blocks() {
  using Kind = CheckpointPolicy::Kind;
  const int L = config_.num_layers;
  const bool segments = policy_.kind == Kind::kEveryK || policy_.kind == Kind::kSqrtL;
  const int k = segments ? policy_.segment_blocks(L) : L;
  const F* x = acts_.encoded;
  for (int l = 0; l < L; ++l) {
    const int seg = l / k, slot = l % k;
    if (slot == 0 && seg > 0) {
      // A new segment starts: keep its input, since the slots holding it will be overwritten.
      copy_activation(acts_.boundaries[seg], x);
      x = acts_.boundaries[seg];
    }
    block_forward_at(l, acts_.blocks[slot], x);
    x = acts_.blocks[slot].residual3;
  }
  if (x != acts_.final_input) copy_activation(acts_.final_input, x);
}

template <typename F>
void GpuGPT<F>::backward_blocks() {
  using Kind = CheckpointPolicy::Kind;
  const int B = acts_.B, T = acts_.T, C = config_.channels, NH = config_.num_heads, L = config_.num_layers;
  if (policy_.kind == Kind::kNone || policy_.kind == Kind::kSelective) {
    for (int l = L - 1; l >= 0; --l) {
      GpuBlockActs<F>& a = acts_.blocks[l];
      if (policy_.kind == Kind::kSelective && l != L - 1) {  // the shared buffer holds block L-1's
        attention_forward(scratch_.proj, a.att, a.qkv, B, T, C, NH, blas_);  // the output is discarded
        ++attention_recomputes_;
      }
      block_backward_at(l, a, l == 0 ? acts_.encoded : acts_.blocks[l - 1].residual3);
    }
    return;
  }
  const int k = policy_.segment_blocks(L);
  const int segments = (L + k - 1) / k;
  for (int seg = segments - 1; seg >= 0; --seg) {
    const int first = seg * k, last = std::min(L, first + k) - 1;
    if (seg != segments - 1) {  // recompute this segment's activations from its boundary
      const F* x = acts_.boundaries[seg];
      for (int l = first; l <= last; ++l) {
        block_forward_at(l, acts_.blocks[l - first], x);
        x = acts_.blocks[l - first].residual3;
      }
    }
    for (int l = last; l >= first; --l)
      block_backward_at(l, acts_.blocks[l - first],
                        l == first ? acts_.boundaries[seg] : acts_.blocks[l - first - 1].residual3);
  }
}

template void GpuGPT<float>::forward_blocks();
template void GpuGPT<bf16>::forward_blocks();
template void GpuGPT<fp16>::forward_blocks();
template void GpuGPT<float>::backward_blocks();
template void GpuGPT<bf16>::backward_blocks();
template void GpuGPT<fp16>::backward_blocks();

}  // namespace scalelab::cuda
