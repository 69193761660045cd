// scalelab plan: every layout of a model on a cluster (data x tensor x pipeline parallel sizes,
// schedule, micro-batches, ZeRO stage, sequence parallelism, checkpointing) that the stages of
// this kit can express, with its memory per rank (plan_memory.hpp), bytes moved per rank
// (plan_traffic.hpp) and step time (plan_time.hpp); ranked by step time among those that fit.
//
// The rules, as real systems have them: t divides the heads and the channels and stays inside a
// node; p <= L; d = world / (t p) divides the global batch; the micro-batch rows b divide the
// rows of a replica (m = rows / b micro-batches); schedules 1f1b, zb-h1 and interleaved:2 (GPipe,
// afab, only when asked for: it has 1F1B's bubble and more memory), interleaving needing m a
// multiple of p and v p <= L; ZeRO needs d > 1, and only stage 1 goes with a pipeline (Megatron-LM's
// distributed optimizer; DeepSpeed refuses stages 2 and 3 with pipelining: the gradients are
// needed whole across the micro-batches of a step).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "plan/cluster.hpp"
#include "plan/plan_layout.hpp"
#include "plan/plan_memory.hpp"
#include "plan/plan_model.hpp"
#include "plan/plan_time.hpp"
#include "plan/plan_traffic.hpp"

namespace scalelab {

struct PlanRequest {
  PlanModel model;
  Cluster cluster;
  int global_batch = 512;  // sequences per optimizer step
  std::string precision = "bf16";
  // Stage 08: "flash" (what large runs use; the attention saves B NH T), "chunked" or "naive"
  // (this kit's default for training, B NH T^2).
  std::string attention = "flash";
  // Restrictions (0, or empty: any).
  int dp = 0, tp = 0, pp = 0, zero = -1, micro_batches = 0;
  std::string schedule, checkpoint;
};

struct PlanResult {
  PlanLayout layout;
  PlanMemory memory;    // the pipeline rank with the most
  PlanTraffic traffic;  // that rank's
  // Every pipeline rank's (one entry without a pipeline), for comparisons with a run's ranks.
  std::vector<PlanMemory> stage_memory;
  std::vector<PlanTraffic> stage_traffic;
  PlanTime time;
  bool fits = false;
  std::string overflow;  // what does not fit, when it does not
};

// Every layout the rules allow, evaluated; those that fit first, fastest first, then the others
// by how far they overflow. ConfigError when the request itself is impossible (naming the flag).
std::vector<PlanResult> plan_layouts(const PlanRequest& request);

// The table the CLI prints (the first `top` rows that fit, then up to 3 that do not) and the JSON
// it writes (every result).
std::string plan_table(const PlanRequest& request, const std::vector<PlanResult>& results, int top);
nlohmann::json plan_json(const PlanRequest& request, const std::vector<PlanResult>& results);

}  // namespace scalelab
