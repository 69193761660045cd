// The planner's traffic model (formulas in plan_traffic.hpp).
#include "plan/plan_traffic.hpp"

#include <cstddef>

#include "comm/partition.hpp"
#include "model/block_walk.hpp"
#include "plan/plan_model.hpp"
#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

namespace {

// Elements rank 0 of a ring of d ranks sends in a reduce-scatter of n (all pieces but its own)
// and in an all-gather of n (all but the next rank's), the pieces cut as comm/partition.hpp cuts
// them (comm/ring.hpp).
struct RingSent {
  double reduce_scatter = 0, all_gather = 0;
};
RingSent ring_sent(std::size_t n, int d) {
  if (d == 1) return {};
  const BlockPartition cut{n, d};
  return {static_cast<double>(n - cut.size(0)), static_cast<double>(n - cut.size(1))};
}

// Blocks whose forward a backward runs again under segment checkpointing (stage 02): all but
// the last segment's, whose activations are still in place (model/block_walk.cpp).
int recomputed_blocks(const CheckpointPolicy& policy, int L) {
  if (!has_segments(policy)) return 0;
  const int k = activation_slots(policy, L);
  return (segment_count(policy, L) - 1) * k;
}

}  // namespace

PlanTraffic plan_traffic(const GPTConfig& c, const PlanLayout& l, const Cluster& cluster, int stage) {
  const PipelineShape shape = l.pipeline_shape();
  const StateBytes bytes = state_bytes(l.precision);
  const int S = shape.model_stages();
  std::size_t psi = 0, blocks = 0, recomputed = 0;
  bool first = false, last = false;
  int messages = 0;  // point-to-point messages per micro-batch
  for (int chunk = 0; chunk < shape.chunks; ++chunk) {
    const int s = model_stage(shape, stage, chunk);
    psi += rank_params(c, l.tp, S, s);
    const int chunk_blocks = stage_blocks(c, S, s);
    blocks += static_cast<std::size_t>(chunk_blocks);
    recomputed += static_cast<std::size_t>(recomputed_blocks(l.checkpoint, chunk_blocks));
    first = first || s == 0;
    last = last || s == S - 1;
    messages += (s < S - 1 ? 1 : 0) + (s > 0 ? 1 : 0);
  }
  PlanTraffic t;
  const double m = l.micro_batches;
  // Data parallel, rank 0 of the group.
  const RingSent dp = ring_sent(psi, l.dp);
  const double rs = dp.reduce_scatter, ag = dp.all_gather;
  switch (l.zero) {
    case 0: t.dp_bytes = bytes.grad * (rs + ag); break;
    case 1: t.dp_bytes = bytes.grad * rs + bytes.param * ag; break;
    case 2: t.dp_bytes = m * bytes.grad * rs + bytes.param * ag; break;
    default: t.dp_bytes = m * (bytes.grad * rs + 2 * bytes.param * ag); break;
  }
  // Tensor parallel: all-reduces of N C activations (or their gradients) over t ranks.
  const double tp = l.tp, N = static_cast<double>(l.micro_rows) * c.max_seq_len;
  const double per_all_reduce = tp > 1 ? 2 * (tp - 1) / tp * N * c.channels * bytes.activation : 0;
  // Per block 2 forward and 2 backward, and 2 more for each block whose forward is recomputed.
  const double block_reductions = 4 * static_cast<double>(blocks) + 2 * static_cast<double>(recomputed);
  // The embedding's reduction (forward), ln_f's (backward) and the cross-entropy's 3 of N fp32.
  const double ends = (first ? 1 : 0) + (last ? 1 : 0);
  const double cross_entropy = last && tp > 1 ? 3 * 2 * (tp - 1) / tp * N * 4 : 0;
  t.tp_bytes = m * (per_all_reduce * (block_reductions + ends) + cross_entropy);
  // Sequence parallelism: once per step, the replicated tensors' gradients (LayerNorms, the
  // c_proj biases, wpe, ln_f), which each rank computed from its rows only, are all-reduced.
  if (l.sequence_parallel && tp > 1) {
    const std::size_t C = static_cast<std::size_t>(c.channels);
    const std::size_t replicated = blocks * 6 * C + (first ? static_cast<std::size_t>(c.max_seq_len) * C : 0) +
                                   (last ? 2 * C : 0);
    const RingSent ring = ring_sent(replicated, l.tp);
    t.tp_bytes += bytes.grad * (ring.reduce_scatter + ring.all_gather);
  }
  // Pipeline: one micro-batch's activations (or gradient) per message, and once per step the
  // tied embedding's gradient between the first and the last rank, whole each way (this rank's
  // vocabulary rows of it with tensor parallelism). A tensor-parallel rank sends its own rows
  // of the activations: all N of them (every tp rank holds the same), or N/t under sequence
  // parallelism (Megatron's scatter-gather of the non-sequence-parallel case is not built).
  const double rows_sent = l.sequence_parallel ? N / tp : N;
  t.pp_bytes = m * messages * rows_sent * c.channels * bytes.activation;
  if (l.pp > 1 && (first || last))
    t.pp_bytes += bytes.grad * static_cast<double>((static_cast<std::size_t>(c.vocab_size) + l.tp - 1) / l.tp) *
                  c.channels;
  // Links (ranks ordered tp, dp, pp from the fastest-varying).
  const int gpn = cluster.gpus_per_node;
  t.tp_inter = l.tp > gpn;
  t.dp_inter = l.dp > 1 && l.tp * l.dp > gpn;
  t.pp_inter = l.pp > 1 && l.tp * l.dp >= gpn;
  return t;
}

}  // namespace scalelab
