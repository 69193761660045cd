// One way to run a training step on a cluster: the planner's unit of search and of report.
#pragma once

#include <string>

#include "model/checkpoint_policy.hpp"
#include "model/layers/attention_kind.hpp"
#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

// How many bytes each element of the model's state takes.
//   fp32             4 param + 4 grad + 8 (AdamW m, v)                     = 16 (stages 00-02)
//   bf16             2 param + 2 grad + 4 master + 8 (m, v)                = 16 (stage 03; ZeRO's paper)
//   bf16-fp32-grads  2 param + 4 grad + 4 master + 8 (m, v)                = 18 (Megatron-LM's default)
// Saved activations take `activation` bytes per element (4 in fp32, 2 in half), except the lse
// (B,NH,T) of chunked and flash attention (stage 08), 4 in every precision: its exponential
// recomputes every probability, and a half lse would put a 3% error on them (bf16; see
// precision/mixed_block.cpp). FlashAttention and this project's models keep it in fp32.
struct StateBytes {
  double param = 4, grad = 4, optimizer = 8, activation = 4, lse = 4;
};
// "fp32", "bf16", "bf16-fp32-grads"; ConfigError naming --precision otherwise.
StateBytes state_bytes(const std::string& precision);

struct PlanLayout {
  int dp = 1, tp = 1, pp = 1;
  std::string schedule = "1f1b";   // the pipeline schedule when pp > 1 (stage 05's names)
  int micro_batches = 1;           // m per optimizer step and data-parallel replica (accumulation when pp = 1)
  int micro_rows = 1;              // sequences per micro-batch
  int zero = 0;                    // ZeRO stage over the data-parallel group (stage 07)
  bool sequence_parallel = false;  // stage 06
  CheckpointPolicy checkpoint;     // stage 02
  AttentionKind attention = AttentionKind::kNaive;  // stage 08: naive saves B NH T^2, chunked/flash B NH T
  std::string precision = "bf16";

  int world() const { return dp * tp * pp; }
  // The pipeline this layout runs (stage 05's shape); without one, a single stage whose m
  // micro-batches are gradient accumulation.
  PipelineShape pipeline_shape() const;
  // "dp8 tp2 pp4 1f1b m16x2 zero1 sp ckpt:sqrt bf16"
  std::string describe() const;
};

}  // namespace scalelab
