// The planner's step-time model. Compute: FLOPs over the compute each rank sustains (the
// cluster's peak times its efficiency); communication: bytes over the link's bandwidth, less
// what the stage's overlap hides. A model, not a measurement: it ranks layouts and shows which
// term dominates.
//
//   model FLOPs per token      6 psi + 12 L C T   (DESIGN.md's MFU convention: the matrix
//                                                  products forward and backward, attention's included)
//   recompute                  + 1/3 of that with segment checkpointing (one more forward),
//                              + 4 L C T with the selective policy (attention's forward again)
//   compute time               FLOPs / world / (peak x efficiency), divided by (1 - bubble) on a
//                              pipeline (the schedule's bubble for costs F = 1, B = 2, or B = W = 1 for ZB-H1)
//   tensor parallel            exposed: it sits between the layers that need its result
//   pipeline                   exposed: the first micro-batch's trip through the stages and back
//   data parallel              DDP, ZeRO-1, -2: the reduction overlaps the last backward (2/3 of
//                              one micro-batch's compute); ZeRO-1/-2's all-gather after the
//                              step does not; ZeRO-3's gathers and reductions overlap the whole
//                              compute (prefetch), the rest is exposed
//   MFU                        model FLOPs / (step time x world x peak)
#pragma once

#include "model/config.hpp"
#include "plan/cluster.hpp"
#include "plan/plan_layout.hpp"
#include "plan/plan_traffic.hpp"

namespace scalelab {

struct PlanTime {
  double compute_s = 0;                 // per rank, bubble included
  double bubble = 0;                    // fraction of the pipeline's time idle
  double tp_s = 0, pp_s = 0, dp_s = 0;  // exposed communication
  double step_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
};

// Model FLOPs of one step of `global_rows` sequences of T tokens (no recompute).
double model_flops(const GPTConfig& c, double global_rows);
PlanTime plan_time(const GPTConfig& c, const PlanLayout& layout, const Cluster& cluster, const PlanTraffic& traffic);

}  // namespace scalelab
