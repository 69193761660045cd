// `scalelab schedule`: a pipeline schedule on paper (stage 05). Builds every rank's action list,
// simulates it with the given costs and prints a Gantt chart, each rank's warm-up forwards and
// peak micro-batches in flight against their formulas, the bubble simulated and by formula, and
// whether the lists run over NCCL.
//
//   scalelab schedule --pp 4 --micro-batches 8 --schedule 1f1b
//   scalelab schedule --pp 4 --micro-batches 8 --schedule zb-h1 --forward-cost 1 --backward-cost 1 --weight-cost 1
//
// The costs are those of one pipeline rank's whole slice of the model; interleaved:V runs V
// chunks of a V-th of that, so its actions cost a V-th each and the runs compare like for like.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "commands.hpp"
#include "core/error.hpp"
#include "schedule/pipeline_schedule.hpp"
#include "schedule/pipeline_sim.hpp"
#include "schedule/rendezvous.hpp"

namespace scalelab::cli {

namespace {

struct ScheduleFlags {
  int pp = 4;
  int micro_batches = 8;
  std::string schedule = "1f1b";
  ActionCosts costs;
  int width = 0;  // 0: two columns per the smallest cost, at most kMaxWidth
};

constexpr int kMaxWidth = 200;

void run_schedule(const ScheduleFlags& f) {
  const PipelineShape shape = parse_pipeline_schedule(f.schedule, f.pp, f.micro_batches);
  require(f.costs.forward > 0 && f.costs.backward_input > 0 && f.costs.backward_weight >= 0 && f.costs.transfer >= 0,
          "costs", "forward and backward costs must be positive, weight and transfer costs non-negative",
          "pass e.g. --forward-cost 1 --backward-cost 1 --weight-cost 1");
  require(f.width >= 0, "width", "must be >= 0, got " + std::to_string(f.width),
          "pass e.g. --width 80, or 0 to size it to the schedule");
  ActionCosts costs = f.costs;
  const double v = shape.chunks;
  costs.forward /= v;
  costs.backward_input /= v;
  costs.backward_weight /= v;

  const PipelineTimeline timeline = simulate_pipeline(shape, build_schedules(shape), costs);
  int width = f.width;
  if (width == 0) {
    double unit = std::min(costs.forward, costs.backward_input);
    if (costs.backward_weight > 0) unit = std::min(unit, costs.backward_weight);
    width = std::clamp(static_cast<int>(std::ceil(2 * timeline.makespan / unit - 1e-9)), 1, kMaxWidth);
  }
  std::printf("schedule %s: p=%d pipeline ranks, m=%d micro-batches, v=%d chunk(s) per rank\n",
              schedule_name(shape).c_str(), shape.stages, shape.micro_batches, shape.chunks);
  std::printf("costs per action: F=%g B=%g W=%g (a whole backward is B+W), transfer %g\n", costs.forward,
              costs.backward_input, costs.backward_weight, costs.transfer);
  std::printf("%s", gantt_chart(shape, timeline, width, costs).c_str());
  std::printf("\n%-6s %-40s %-26s\n", "rank", "forwards before 1st backward (formula)", "peak in flight (formula)");
  for (int r = 0; r < shape.stages; ++r) {
    const RankSchedule compute = compute_order(shape, r);
    std::printf(
        "%-6d %-40s %-26s\n", r,
        (std::to_string(warmup_forwards(compute)) + " (" + std::to_string(warmup_forwards_formula(shape, r)) + ")")
            .c_str(),
        (std::to_string(peak_in_flight(compute)) + " (" + std::to_string(peak_in_flight_formula(shape, r)) + ")")
            .c_str());
  }
  std::printf("makespan %.6g, busy %.6g of %d x %.6g; bubble simulated %.6f, formula %.6f\n", timeline.makespan,
              timeline.busy, shape.stages, timeline.makespan, timeline.bubble_fraction,
              bubble_fraction_formula(shape, costs));
  // The same lists under NCCL's rules (scalelab train --backend nccl): no tags, and a send
  // finishes only while its receive runs (schedule/rendezvous.hpp).
  if (shape.stages < 2) return;
  const char* rules = "over NCCL (no tags, sends wait for their receive)";
  try {
    std::printf("%s: the lists run as built, in %d groups of messages\n", rules,
                check_rendezvous(shape, build_schedules(shape)));
  } catch (const Error& e) {
    // What scalelab train --backend nccl runs instead: the stuck sends delayed into the next group.
    const int groups = check_rendezvous(shape, rendezvous_schedules(shape));
    std::printf(
        "%s: as built, %s\nwith the stuck sends delayed into the next group (scalelab train --backend nccl) "
        "they run, in %d groups of messages\n",
        rules, e.what(), groups);
  }
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto f = std::make_shared<ScheduleFlags>();
  CLI::App* cmd = app.add_subcommand("schedule", "Simulate a pipeline schedule: Gantt chart, warm-up, memory, bubble");
  cmd->add_option("--pp", f->pp, "Pipeline ranks p")->capture_default_str();
  cmd->add_option("--micro-batches", f->micro_batches, "Micro-batches m per step")->capture_default_str();
  cmd->add_option("--schedule", f->schedule, "afab (or gpipe), 1f1b, interleaved:V or zb-h1")->capture_default_str();
  cmd->add_option("--forward-cost", f->costs.forward, "Forward time of one rank's slice")->capture_default_str();
  cmd->add_option("--backward-cost", f->costs.backward_input, "Input-gradient backward time (B)")
      ->capture_default_str();
  cmd->add_option("--weight-cost", f->costs.backward_weight, "Weight-gradient backward time (W)")
      ->capture_default_str();
  cmd->add_option("--transfer-cost", f->costs.transfer, "Time from a send to its arrival")->capture_default_str();
  cmd->add_option("--width", f->width, "Chart columns (0: sized to the schedule)")->capture_default_str();
  cmd->callback([f] { run_schedule(*f); });
}

}  // namespace scalelab::cli
