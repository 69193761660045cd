// The planner's memory model (formulas in plan_memory.hpp).
#include "plan/plan_memory.hpp"

#include <algorithm>

#include "model/block_walk.hpp"
#include "plan/plan_model.hpp"
#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

namespace {

// Elements saved by one micro-batch on model stage `s` of S (a pipeline chunk): all of them, and
// among them the lse of chunked and flash attention, which every precision keeps in fp32.
struct ChunkElements {
  std::size_t all = 0, lse = 0;
  double bytes(const StateBytes& b) const {
    return b.activation * static_cast<double>(all - lse) + b.lse * static_cast<double>(lse);
  }
};

ChunkElements chunk_activation_elements(const GPTConfig& c, const PlanLayout& l, int s, int S) {
  const std::size_t t = static_cast<std::size_t>(l.tp), b = static_cast<std::size_t>(l.micro_rows);
  const std::size_t T = static_cast<std::size_t>(c.max_seq_len), C = static_cast<std::size_t>(c.channels);
  const std::size_t N = b * T, rows = l.sequence_parallel ? N / t : N, Cl = C / t;
  const std::size_t heads = static_cast<std::size_t>(c.num_heads) / t;
  const std::size_t att = static_cast<std::size_t>(attention_activation_elems(
      l.attention, static_cast<std::int64_t>(b), static_cast<std::int64_t>(heads), static_cast<std::int64_t>(T)));
  const std::size_t block = 2 * N * C + 2 * rows * C + 12 * N * Cl + 4 * rows + att;
  const std::size_t Vl = (static_cast<std::size_t>(c.vocab_size) + t - 1) / t;
  const bool head = s == S - 1;
  const std::size_t outside = rows * C + (head ? N * C + 2 * rows + N * Vl + N : 0);
  const int L = stage_blocks(c, S, s);
  const std::size_t Ls = static_cast<std::size_t>(L);
  // The saved attention tensors (att or lse) in the set: one per block slot, one shared (selective).
  const auto with = [&](std::size_t all, std::size_t att_copies) {
    return ChunkElements{all, l.attention == AttentionKind::kNaive ? 0 : att_copies * att};
  };
  switch (l.checkpoint.kind) {
    case CheckpointPolicy::Kind::kNone: return with(outside + Ls * block, Ls);
    case CheckpointPolicy::Kind::kSelective: return with(outside + Ls * (block - att) + att, 1);
    case CheckpointPolicy::Kind::kEveryK:
    case CheckpointPolicy::Kind::kSqrtL: {
      const std::size_t k = static_cast<std::size_t>(activation_slots(l.checkpoint, L));
      const std::size_t segments = static_cast<std::size_t>(segment_count(l.checkpoint, L));
      return with(outside + segments * rows * C + k * block, k);  // boundaries (and the output), one segment
    }
  }
  return {};
}

// The output gradients ZB-H1's input backward (B) keeps for the deferred weight backward (W), per
// micro-batch: for each block the dout of its four linear layers, qkv (3 C wide), attn.c_proj
// (C), c_fc (4 C) and mlp.c_proj (C), N rows each (model/split_backward.hpp).
std::size_t weight_tape_elements(const GPTConfig& c, const PlanLayout& l, int s, int S) {
  const std::size_t N = static_cast<std::size_t>(l.micro_rows) * c.max_seq_len;
  const std::size_t Cl = static_cast<std::size_t>(c.channels) / static_cast<std::size_t>(l.tp);
  return static_cast<std::size_t>(stage_blocks(c, S, s)) * N * (3 * Cl + c.channels + 4 * Cl + c.channels);
}

// The peak bytes of one pipeline rank's saved activations over its schedule (stage 05): a forward
// saves one micro-batch's set of its chunk, a backward frees it; ZB-H1's B keeps the set and adds
// the weight tape, its W frees both. Without a pipeline the micro-batches run one at a time.
// (Whole numbers of bytes, far below 2^53: the sums are exact in double.)
double peak_activation_bytes(const GPTConfig& c, const PlanLayout& l, const PipelineShape& shape, int rank,
                             const StateBytes& bytes) {
  const int S = shape.model_stages();
  if (l.pp == 1) return chunk_activation_elements(c, l, 0, 1).bytes(bytes);
  double now = 0, peak = 0;
  for (const Action& a : compute_order(shape, rank)) {
    const int s = model_stage(shape, rank, a.chunk);
    const double set = chunk_activation_elements(c, l, s, S).bytes(bytes);
    const double tape = bytes.activation * static_cast<double>(weight_tape_elements(c, l, s, S));
    switch (a.kind) {
      case ActionKind::kForward: now += set; break;
      case ActionKind::kBackward: now -= set; break;
      case ActionKind::kBackwardInput: now += tape; break;
      case ActionKind::kBackwardWeight: now -= set + tape; break;
      default: break;
    }
    peak = std::max(peak, now);
  }
  return peak;
}

}  // namespace

std::size_t plan_activation_elements(const GPTConfig& c, const PlanLayout& layout, int stage) {
  const PipelineShape shape = layout.pipeline_shape();
  return chunk_activation_elements(c, layout, model_stage(shape, stage, 0), shape.model_stages()).all;
}

PlanMemory model_state_memory(const StateBytes& bytes, int zero, std::size_t psi, int d) {
  // ZeRO's shard: the first psi mod d ranks hold one element more (comm/partition.hpp).
  const double all = static_cast<double>(psi);
  const double shard = static_cast<double>((psi + static_cast<std::size_t>(d) - 1) / static_cast<std::size_t>(d));
  PlanMemory m;
  m.params = bytes.param * (zero >= 3 ? shard : all);
  m.grads = bytes.grad * (zero >= 2 ? shard : all);
  m.optimizer = bytes.optimizer * (zero >= 1 ? shard : all);
  return m;
}

PlanMemory plan_memory(const GPTConfig& c, const PlanLayout& l, int stage) {
  const PipelineShape shape = l.pipeline_shape();
  const StateBytes bytes = state_bytes(l.precision);
  const int S = shape.model_stages();
  std::size_t psi = 0;
  for (int chunk = 0; chunk < shape.chunks; ++chunk) psi += rank_params(c, l.tp, S, model_stage(shape, stage, chunk));
  PlanMemory m = model_state_memory(bytes, l.zero, psi, l.dp);
  m.stage = stage;
  m.activations = peak_activation_bytes(c, l, shape, stage, bytes);
  return m;
}

}  // namespace scalelab
