// Precision byte counts and layout names for the planner.
#include "plan/plan_layout.hpp"

#include "core/error.hpp"

namespace scalelab {

StateBytes state_bytes(const std::string& precision) {
  if (precision == "fp32") return {4, 4, 8, 4};
  if (precision == "bf16") return {2, 2, 12, 2};
  if (precision == "bf16-fp32-grads") return {2, 4, 12, 2};
  throw ConfigError("precision: unknown precision '" + precision +
                    "' for the planner; use fp32, bf16 (2+2+12 bytes per parameter, as stage 03 and the ZeRO "
                    "paper) or bf16-fp32-grads (2+4+12, Megatron-LM's default)");
}

PipelineShape PlanLayout::pipeline_shape() const {
  if (pp == 1) return PipelineShape{PipeScheduleKind::k1F1B, 1, micro_batches, 1};
  return parse_pipeline_schedule(schedule, pp, micro_batches);
}

std::string PlanLayout::describe() const {
  std::string s = "dp" + std::to_string(dp) + " tp" + std::to_string(tp) + " pp" + std::to_string(pp);
  if (pp > 1) s += " " + schedule;
  s += " m" + std::to_string(micro_batches) + "x" + std::to_string(micro_rows);
  if (zero > 0) s += " zero" + std::to_string(zero);
  if (sequence_parallel) s += " sp";
  if (checkpoint.kind != CheckpointPolicy::Kind::kNone) s += " ckpt:" + checkpoint.describe();
  if (attention != AttentionKind::kNaive) s += std::string(" ") + attention_kind_name(attention);
  return s + " " + precision;
}

}  // namespace scalelab
