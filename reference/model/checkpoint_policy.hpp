// Activation checkpointing policies (stage 02): which activations forward keeps for backward.
// Everything not kept is recomputed during backward from the nearest kept block input.
#pragma once

#include <string>

namespace scalelab {

struct CheckpointPolicy {
  enum class Kind {
    kNone,       // keep everything (stage 00)
    kEveryK,     // keep the input of every k-th block; recompute a segment of k blocks at a time
    kSqrtL,      // kEveryK with k = round(sqrt(L)): the memory optimum of boundaries + one segment
    kSelective,  // keep everything but the attention probabilities (B,NH,T,T), recompute those
  };
  Kind kind = Kind::kNone;
  int every = 1;  // k for kEveryK

  // The segment length in blocks for a model of L layers (kEveryK, kSqrtL), clamped to [1, L].
  int segment_blocks(int L) const;
  std::string describe() const;
  // Parses "none", "every" (= every:1), "every:K", "sqrt", "selective"; ConfigError otherwise.
  static CheckpointPolicy parse(const std::string& text);
};

}  // namespace scalelab
