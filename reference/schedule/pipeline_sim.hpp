// Stage 05: a pipeline schedule run on paper. Every rank works through its action list in order;
// a compute action takes its cost, a send is posted and costs the sender nothing, a receive waits
// for its matching send (plus the transfer time). The result is when every action ran, the
// bubble (the idle share of the ranks' time), and a text Gantt chart.
//
// It is also the schedule's deadlock check. The executor's sends never block, so a rank can only
// stop at a receive; if the simulation of every list completes, every receive has its send and
// the real run cannot hang either (whatever the actual durations). A schedule whose lists post
// messages between two ranks in different orders is refused too: the executor matches messages
// in posting order, as Megatron's batched exchanges do.
#pragma once

#include <string>
#include <vector>

#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

// Per action of one model stage (interleaved: one chunk, so pass a v-th of a whole rank's costs).
// kBackward costs backward_input + backward_weight. A send costs its sender 0; its message
// arrives `transfer` after it was posted.
struct ActionCosts {
  double forward = 1, backward_input = 1, backward_weight = 1, transfer = 0;
};

struct TimedAction {
  Action action;
  double start = 0, end = 0;  // a send: start == end, when it was posted
};

struct PipelineTimeline {
  std::vector<std::vector<TimedAction>> ranks;  // every action of every rank, in list order
  double makespan = 0;                          // earliest compute start to latest compute end
  double busy = 0;                              // compute time summed over the ranks
  double bubble_fraction = 0;                   // 1 - busy / (p * makespan)
};

bool is_compute(ActionKind kind);
// How long a compute action takes (0 for a message).
double action_cost(const ActionCosts& costs, ActionKind kind);

// Runs the lists (one per rank, as build_schedules gives them). Throws Error naming each blocked
// rank and the receive it waits on if the lists deadlock, or the two actions if a receive
// matches a send of another micro-batch or model stage.
PipelineTimeline simulate_pipeline(const PipelineShape& shape, const std::vector<RankSchedule>& schedules,
                                   const ActionCosts& costs);

// Of p * makespan, the share during which a rank computed nothing (compute actions only; the
// makespan runs from the earliest start to the latest end over all ranks). Works on measured
// times as well as simulated ones.
double bubble_fraction(const std::vector<std::vector<TimedAction>>& ranks);

// The textbook bubble as a fraction of the TOTAL time, idle / (p * makespan) -- the
// (p - 1) / (m + p - 1) convention, not (p - 1) / m of the ideal time. Transfers cost 0.
//   afab, 1f1b     (p - 1) / (m + p - 1)        any F and B, the same on every stage
//   interleaved:V  (p - 1) / (v * m + p - 1)    costs per chunk, each a v-th of a stage's
//   zb-h1          (p - 1)(F + B - W) / (m (F + B + W) + (p - 1)(F + B - W))   (Qi et al. 2024)
// The simulation gives exactly these for afab, 1f1b and interleaved (any m, F and B), and for
// zb-h1 when m >= p and W <= F. With m < p, zb-h1's W's have no forwards to hide behind: the
// makespan is (m + p - 1)(F + B) + W (rank 0's last W after the last B); with W > F a W run
// before a forward delays the forwards, and the bubble is larger than the formula.
double bubble_fraction_formula(const PipelineShape& shape, const ActionCosts& costs);
// The formula in words, e.g. "(p-1)/(m+p-1)".
std::string bubble_formula_text(const PipelineShape& shape);

// One row per rank, `width` columns over the makespan: a compute action is its letter (F
// forward, B backward or input backward, W weight backward) followed by its micro-batch's last
// digit while it lasts, '.' where the rank is idle; then the column's length in time and the
// bubble, simulated and by the formula (with `costs`, which zb-h1's formula depends on).
std::string gantt_chart(const PipelineShape& shape, const PipelineTimeline& timeline, int width,
                        const ActionCosts& costs = ActionCosts{});

}  // namespace scalelab
