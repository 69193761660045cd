// Learning-rate schedules: constant, or linear warm-up then cosine decay to a floor (see the
// header for which step gets which lr, and why llm.c's convention).
#include "optim/lr_schedule.hpp"

#include <cmath>
#include <cstdio>
#include <numbers>

#include "core/error.hpp"

namespace scalelab {

namespace {

// The checks that do not need the run's length (parse() runs them before the trainer knows it).
void validate_fields(const LrSchedule& s) {
  const bool cosine = s.kind == LrSchedule::Kind::kCosine;
  require(s.warmup_steps >= 0, "--warmup-steps", "must be at least 0, got " + std::to_string(s.warmup_steps),
          "pass 0 for no warm-up or a positive step count");
  require(s.decay_steps >= 0, "--decay-steps", "must be at least 0, got " + std::to_string(s.decay_steps),
          "pass 0 to decay over the whole run or a positive step count");
  require(cosine || s.decay_steps == 0, "--decay-steps",
          "is " + std::to_string(s.decay_steps) + " but the constant schedule does not decay",
          "drop --decay-steps, or add --lr-schedule cosine");
  require(std::isfinite(s.min_lr_fraction) && s.min_lr_fraction >= 0 && s.min_lr_fraction <= 1, "--min-lr-fraction",
          "must be in [0, 1] (the floor as a fraction of the peak lr), got " + std::to_string(s.min_lr_fraction),
          "pass e.g. 0.1 (nanoGPT's and llm.c's choice) or 0 to decay to zero");
}

}  // namespace

double LrSchedule::lr_at(double peak_lr, long step, long total_steps) const {
  if (step < warmup_steps) return peak_lr * static_cast<double>(step + 1) / warmup_steps;
  if (kind == Kind::kConstant) return peak_lr;
  const long D = decay_length(total_steps);
  const double floor = peak_lr * min_lr_fraction;
  if (step >= D) return floor;
  // W <= step < D here, so the ratio is in [0, 1) and D - W > 0.
  const double ratio = static_cast<double>(step - warmup_steps) / static_cast<double>(D - warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));  // 1 at the peak, 0 at D
  return floor + coeff * (peak_lr - floor);
}

void LrSchedule::validate(long total_steps) const {
  validate_fields(*this);
  require(total_steps >= 1, "--steps",
          "the schedule needs a run of at least 1 step, got " + std::to_string(total_steps), "pass a positive --steps");
  const long D = decay_length(total_steps);
  if (kind == Kind::kCosine) {
    require(warmup_steps <= D, "--warmup-steps",
            std::to_string(warmup_steps) + " warm-up steps do not end before the cosine reaches its floor at step " +
                std::to_string(D) + (decay_steps > 0 ? " (--decay-steps)" : " (the run's total steps)"),
            "use fewer warm-up steps, or a larger --decay-steps");
  } else {
    require(warmup_steps <= total_steps, "--warmup-steps",
            std::to_string(warmup_steps) + " warm-up steps are more than the run's " + std::to_string(total_steps) +
                " steps, so the lr never reaches --lr",
            "use fewer warm-up steps or more --steps");
  }
}

const char* LrSchedule::kind_name(Kind kind) { return kind == Kind::kCosine ? "cosine" : "constant"; }

LrSchedule::Kind LrSchedule::parse_kind(const std::string& text) {
  if (text == "constant") return Kind::kConstant;
  if (text == "cosine") return Kind::kCosine;
  throw ConfigError("--lr-schedule: unknown schedule '" + text + "'; choose constant or cosine");
}

LrSchedule LrSchedule::parse(const std::string& kind, int warmup_steps, long decay_steps, double min_lr_fraction) {
  LrSchedule s;
  s.kind = parse_kind(kind);
  s.warmup_steps = warmup_steps;
  s.decay_steps = decay_steps;
  s.min_lr_fraction = min_lr_fraction;
  validate_fields(s);
  return s;
}

std::string LrSchedule::describe(long total_steps) const {
  std::string out = kind_name(kind);
  if (warmup_steps > 0) out += ", warm-up " + std::to_string(warmup_steps);
  if (kind == Kind::kCosine) {
    char frac[32];
    std::snprintf(frac, sizeof(frac), "%g", min_lr_fraction);
    out += ", decay to " + std::string(frac) + "x at step " + std::to_string(decay_length(total_steps));
  }
  return out;
}

}  // namespace scalelab
