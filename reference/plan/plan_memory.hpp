// The planner's memory model: bytes per rank by category, for one layout, at the peak of a step.
//
// Model states (exact for this project's stages; tests/plan checks them against the trackers of
// real runs): psi_r, the parameters a rank holds (plan_model.hpp), times the bytes per element
// of its precision (plan_layout.hpp), where ZeRO stage z over d data-parallel ranks keeps only a
// shard of ceil(psi_r / d) elements of the optimizer state (z >= 1), the gradients (z >= 2) and
// the parameters (z = 3):
//   z = 0  (p + g + o) psi_r      z = 1  (p + g) psi_r + o s      z = 2  p psi_r + (g + o) s
//   z = 3  (p + g + o) s          (p, g, o bytes per element; s the shard)
//
// Activations: the saved tensors of this project's layers (docs/stages/00-naive.md, 02, 06),
// per micro-batch of b sequences of T tokens, N = b T rows, tensor-parallel width Cl = C / t and
// sequence-parallel rows Nl = N / t (N without sequence parallelism):
//   one block    2 N C + 2 Nl C + 12 N Cl + 4 Nl + (NH / t) b T^2     (t = 1: 16 N C + 4 N + NH b T^2)
//                with stage 08's chunked or flash attention (NH / t) b T instead of (NH / t) b T^2,
//                the lse, at 4 bytes in every precision (StateBytes::lse; the rest at `activation`)
//   outside      Nl C (the blocks' input) + with the head: N C + 2 Nl + N ceil(V / t) + N
// with checkpointing (stage 02) the blocks keep one segment of k blocks plus a boundary per
// segment. A pipeline rank's peak is found by walking its schedule (stage 05's action lists): a
// forward adds one micro-batch's set, a backward frees it, so GPipe peaks at m sets and 1F1B at
// min(p - r, m); ZB-H1's input backward also keeps the output gradients of the block's four
// linear layers for the deferred weight backward, 9 N C per block (model/split_backward.hpp).
// The rank reported is the pipeline rank with the largest total.
#pragma once

#include <cstddef>

#include "model/config.hpp"
#include "plan/plan_layout.hpp"

namespace scalelab {

struct PlanMemory {
  int stage = 0;  // the pipeline rank these bytes are for
  double params = 0, grads = 0, optimizer = 0, activations = 0;
  double model_states() const { return params + grads + optimizer; }
  double total() const { return model_states() + activations; }
};

// Model states of a rank holding psi parameters under ZeRO stage `zero` over d ranks (activations 0).
PlanMemory model_state_memory(const StateBytes& bytes, int zero, std::size_t psi, int d);
// Saved activation elements of one micro-batch on pipeline rank `stage` (chunk 0), tensor-parallel width tp.
std::size_t plan_activation_elements(const GPTConfig& c, const PlanLayout& layout, int stage);
// The memory of pipeline rank `stage`.
PlanMemory plan_memory(const GPTConfig& c, const PlanLayout& layout, int stage);

}  // namespace scalelab
