// Learning-rate schedules (every stage; the trainer asks for the lr of each optimizer step):
// constant (the default), or a linear warm-up followed by a cosine decay to a floor, as nanoGPT
// and llm.c train GPT-2. The schedule is a pure function of the step index, so a run resumed
// from a checkpoint (which stores the schedule and the step count it decays over) follows the
// same lr curve bit for bit.
#pragma once

#include <string>

namespace scalelab {

struct LrSchedule {
  enum class Kind {
    kConstant,  // the peak lr every step (after the warm-up, if any)
    kCosine,    // warm-up, then cosine from the peak down to min_lr_fraction * peak
  };
  Kind kind = Kind::kConstant;
  int warmup_steps = 0;          // W, --warmup-steps
  long decay_steps = 0;          // D, --decay-steps: the step where the floor is reached; 0: total_steps
  double min_lr_fraction = 0.1;  // --min-lr-fraction: the floor as a fraction of the peak (cosine only)

  // The lr of the optimizer step with 0-based index `step` (the steps already taken before it:
  // the first step of a run is 0), in llm.c's convention (llmc/schedulers.h):
  //   step < W            peak * (step + 1) / W        (1/W of the peak first; the peak at W-1)
  //   constant            peak
  //   cosine, step >= D   peak * min_lr_fraction       (the floor, also past the end)
  //   cosine, otherwise   floor + (peak - floor) * (1 + cos(pi * (step - W) / (D - W))) / 2
  // where D = decay_steps, or total_steps when decay_steps is 0. With D = total_steps the last
  // step (total_steps - 1) is just above the floor, as in llm.c. (nanoGPT's warm-up divides by
  // W + 1 instead; we follow llm.c so that the peak is reached exactly.)
  double lr_at(double peak_lr, long step, long total_steps) const;
  // The decay length D this schedule uses in a run of `total_steps` steps.
  long decay_length(long total_steps) const { return decay_steps > 0 ? decay_steps : total_steps; }

  // Throws ConfigError naming the flag (--lr-schedule, --warmup-steps, --decay-steps,
  // --min-lr-fraction) and the fix. `total_steps` is the step count the run's schedule spans.
  void validate(long total_steps) const;

  // "constant" or "cosine".
  static const char* kind_name(Kind kind);
  // Parses "constant" or "cosine"; ConfigError naming --lr-schedule otherwise.
  static Kind parse_kind(const std::string& text);
  // The schedule from the four flags (validated, except against the run's total steps).
  static LrSchedule parse(const std::string& kind, int warmup_steps, long decay_steps, double min_lr_fraction);
  // One line for logs: "constant", "constant, warm-up 10", "cosine, warm-up 10, decay to 0.1x at step 100".
  std::string describe(long total_steps) const;

  bool operator==(const LrSchedule&) const = default;
};

}  // namespace scalelab
