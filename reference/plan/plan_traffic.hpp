// The planner's traffic model: bytes each rank sends per optimizer step, by parallel group, and
// which link carries them. Ring collectives (comm/ring.hpp, nccl-tests' accounting): a
// reduce-scatter or all-gather of n elements over d ranks sends n - n_r of them from rank r
// (about (d-1)/d n), an all-reduce both (about 2 (d-1)/d n).
//
//   data parallel   DDP: all-reduce the gradients once per step         2 (d-1)/d psi_r
//                   ZeRO-1: reduce-scatter once, all-gather the params   (d-1)/d psi_r x 2
//                   ZeRO-2: reduce-scatter every micro-batch             (m + 1) (d-1)/d psi_r
//                   ZeRO-3: + all-gather the params in forward and again in backward, every
//                           micro-batch                                  3 m (d-1)/d psi_r
//   tensor parallel per block and micro-batch 2 all-reduces of N C forward and 2 backward (and 2
//                   more for each block whose forward checkpointing recomputes: all but the
//                   last segment's, model/block_walk.cpp), the embedding's 1 forward,
//                   ln_f's 1 backward, the cross-entropy's 3 of N fp32 (dist/tp_model.hpp);
//                   sequence parallelism moves the same bytes as all-gathers and reduce-scatters,
//                   plus once per step an all-reduce of the replicated tensors' gradients
//   pipeline        per micro-batch and chunk: the activations (N C) to the next stage, their
//                   gradient to the previous one; with tensor parallelism each rank sends its
//                   own rows to the same tp rank of the next stage: all N (every tp rank holds
//                   them), or N/t under sequence parallelism (Megatron-LM's scatter/gather of the
//                   non-sequence-parallel case is not built); once per step the tied embedding's
//                   gradient (V C, or the rank's V/t rows of it) between the first and last rank
// Placement, as Megatron-LM orders ranks: tensor-parallel ranks are neighbours (inside a node),
// then data-parallel, then pipeline; a group whose members span nodes runs at the inter-node
// bandwidth.
#pragma once

#include "model/config.hpp"
#include "plan/cluster.hpp"
#include "plan/plan_layout.hpp"

namespace scalelab {

struct PlanTraffic {
  double dp_bytes = 0, tp_bytes = 0, pp_bytes = 0;            // sent per rank per step
  bool dp_inter = false, tp_inter = false, pp_inter = false;  // over the inter-node links
  double total() const { return dp_bytes + tp_bytes + pp_bytes; }
};

// Sent by the first rank of the data-parallel group on pipeline rank `stage` (exact ring counts).
PlanTraffic plan_traffic(const GPTConfig& c, const PlanLayout& layout, const Cluster& cluster, int stage);

}  // namespace scalelab
