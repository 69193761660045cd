// The planner's step-time model (formulas in plan_time.hpp).
#include "plan/plan_time.hpp"

#include <algorithm>

#include "plan/plan_model.hpp"
#include "schedule/pipeline_schedule.hpp"
#include "schedule/pipeline_sim.hpp"

namespace scalelab {

double model_flops(const GPTConfig& c, double global_rows) {
  const double T = c.max_seq_len, L = c.num_layers, C = c.channels;
  return global_rows * T * (6.0 * static_cast<double>(model_params(c)) + 12.0 * L * C * T);
}

PlanTime plan_time(const GPTConfig& c, const PlanLayout& l, const Cluster& cluster, const PlanTraffic& traffic) {
  PlanTime t;
  const double rows = static_cast<double>(l.dp) * l.micro_batches * l.micro_rows;
  const double flops = model_flops(c, rows);
  double hardware = flops;
  const double attention = rows * c.max_seq_len * 4.0 * c.num_layers * c.channels * c.max_seq_len;
  if (l.checkpoint.kind == CheckpointPolicy::Kind::kEveryK || l.checkpoint.kind == CheckpointPolicy::Kind::kSqrtL)
    hardware += flops / 3;
  else if (l.checkpoint.kind == CheckpointPolicy::Kind::kSelective)
    hardware += attention;
  const double rate = cluster.peak_tflops * 1e12 * cluster.efficiency;
  const double compute = hardware / l.world() / rate;
  if (l.pp > 1) {
    const PipelineShape shape = l.pipeline_shape();
    const bool zb = shape.kind == PipeScheduleKind::kZbH1;
    t.bubble = bubble_fraction_formula(shape, zb ? ActionCosts{1, 1, 1, 0} : ActionCosts{1, 2, 0, 0});
  }
  t.compute_s = compute / (1 - t.bubble);
  auto seconds = [&](double bytes, bool inter) {
    return bytes / ((inter ? cluster.inter_gbps : cluster.intra_gbps) * 1e9);
  };
  t.tp_s = seconds(traffic.tp_bytes, traffic.tp_inter);
  // The pipeline's exposed transfers: one message per stage boundary, there and back.
  const double messages = l.pp > 1 ? traffic.pp_bytes / (l.micro_batches * 2.0) : 0;
  t.pp_s = seconds(2.0 * (l.pp - 1) * messages, traffic.pp_inter);
  const double dp = seconds(traffic.dp_bytes, traffic.dp_inter);
  if (l.zero >= 3) {
    t.dp_s = std::max(0.0, dp - compute);
  } else {
    // The all-gather of ZeRO-1/-2 (a third or so of their bytes) runs after the step.
    const double after = l.zero >= 1 ? dp / (l.zero == 1 ? 2.0 : l.micro_batches + 1.0) : 0;
    const double window = 2.0 / 3.0 * compute / l.micro_batches;
    t.dp_s = std::max(0.0, dp - after - window) + after;
  }
  t.step_s = t.compute_s + t.tp_s + t.pp_s + t.dp_s;
  t.tokens_per_s = rows * c.max_seq_len / t.step_s;
  t.mfu = flops / (t.step_s * l.world() * cluster.peak_tflops * 1e12);
  return t;
}

}  // namespace scalelab
