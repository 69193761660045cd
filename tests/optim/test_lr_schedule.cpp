// LrSchedule (optim/lr_schedule.hpp) against the closed-form values of llm.c's schedule, worked
// out by hand below: linear warm-up (step + 1) / W, cosine from the peak at W to the floor at D,
// the floor past D; and every ConfigError names its flag.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "core/error.hpp"
#include "optim/lr_schedule.hpp"

using scalelab::ConfigError;
using scalelab::LrSchedule;

namespace {

// Relative difference, reported on failure (lr values are around 1e-3, so an absolute margin
// would hide a wrong floor).
void check_lr(const LrSchedule& s, long step, long total, double want) {
  const double peak = 1e-3;
  const double got = s.lr_at(peak, step, total);
  const double rel = std::fabs(got - want) / want;
  INFO(s.describe(total) << ": lr at step " << step << " of " << total << " is " << got << ", expected " << want
                         << " (relative difference " << rel << ")");
  CHECK(rel <= 1e-14);
}

LrSchedule cosine(int warmup, long decay = 0, double floor = 0.1) {
  return LrSchedule::parse("cosine", warmup, decay, floor);
}

std::string message_of(const LrSchedule& s, long total) {
  try {
    s.validate(total);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("cosine with warm-up: warm-up start and end, mid-decay, end of decay, past the end", "[lr_schedule]") {
  // peak 1e-3, W = 10, D = total = 110, floor 1e-4: the cosine spans steps 10..110.
  const LrSchedule s = cosine(10);
  s.validate(110);
  check_lr(s, 0, 110, 1e-4);   // first step: peak / W
  check_lr(s, 4, 110, 5e-4);   // (4 + 1) / 10 of the peak
  check_lr(s, 9, 110, 1e-3);   // the last warm-up step reaches the peak
  check_lr(s, 10, 110, 1e-3);  // the cosine starts at the peak
  // a quarter of the way: floor + (peak - floor) * (1 + cos(pi/4)) / 2 = 1e-4 + 9e-4 * (2 + sqrt 2) / 4
  check_lr(s, 35, 110, 1e-4 + 9e-4 * (2 + std::sqrt(2.0)) / 4);
  check_lr(s, 60, 110, 5.5e-4);  // half way: the mean of peak and floor
  // the last step of the run, 99/100 of the way: 1e-4 + 9e-4 * (1 - cos(pi/100)) / 2
  check_lr(s, 109, 110, 1.0022204783542078e-4);
  check_lr(s, 110, 110, 1e-4);  // the end of the decay: the floor
  check_lr(s, 500, 110, 1e-4);  // past the end: still the floor
}

TEST_CASE("cosine: --decay-steps sets the end independently of the run's length", "[lr_schedule]") {
  const LrSchedule s = cosine(0, 20, 0.0);
  s.validate(100);
  check_lr(s, 0, 100, 1e-3);             // no warm-up: the peak at once
  check_lr(s, 10, 100, 5e-4);            // half of 20 steps: half of the peak (floor 0)
  CHECK(s.lr_at(1e-3, 20, 100) == 0.0);  // floor 0 from step 20 on, although the run is 100 steps
  CHECK(s.lr_at(1e-3, 99, 100) == 0.0);
  // A decay as long as the warm-up: straight from the peak to the floor.
  const LrSchedule cliff = cosine(5, 5);
  cliff.validate(10);
  check_lr(cliff, 4, 10, 1e-3);
  check_lr(cliff, 5, 10, 1e-4);
}

TEST_CASE("constant: the peak every step, after an optional warm-up", "[lr_schedule]") {
  const LrSchedule plain;  // the default
  CHECK(plain.kind == LrSchedule::Kind::kConstant);
  plain.validate(1);
  for (long step : {0L, 1L, 99L, 1000000L}) CHECK(plain.lr_at(1e-3, step, 100) == 1e-3);
  const LrSchedule warm = LrSchedule::parse("constant", 4, 0, 0.1);
  check_lr(warm, 0, 100, 2.5e-4);
  check_lr(warm, 3, 100, 1e-3);
  check_lr(warm, 50, 100, 1e-3);
  CHECK(plain.describe(100) == "constant");
  CHECK(warm.describe(100) == "constant, warm-up 4");
  CHECK(cosine(10).describe(100) == "cosine, warm-up 10, decay to 0.1x at step 100");
}

TEST_CASE("lr schedule errors name the flag and the fix", "[lr_schedule]") {
  CHECK_THROWS_WITH(LrSchedule::parse("linear", 0, 0, 0.1),
                    "--lr-schedule: unknown schedule 'linear'; choose constant or cosine");
  CHECK_THROWS_WITH(LrSchedule::parse("cosine", -1, 0, 0.1),
                    "--warmup-steps: must be at least 0, got -1; pass 0 for no warm-up or a positive step count");
  CHECK_THROWS_WITH(LrSchedule::parse("cosine", 0, -5, 0.1),
                    "--decay-steps: must be at least 0, got -5; pass 0 to decay over the whole run or a positive "
                    "step count");
  CHECK_THROWS_WITH(LrSchedule::parse("constant", 0, 50, 0.1),
                    "--decay-steps: is 50 but the constant schedule does not decay; drop --decay-steps, or add "
                    "--lr-schedule cosine");
  CHECK_THROWS_WITH(LrSchedule::parse("cosine", 0, 0, 1.5),
                    "--min-lr-fraction: must be in [0, 1] (the floor as a fraction of the peak lr), got 1.500000; "
                    "pass e.g. 0.1 (nanoGPT's and llm.c's choice) or 0 to decay to zero");
  CHECK_THROWS_WITH(LrSchedule::parse("cosine", 0, 0, NAN), Catch::Contains("--min-lr-fraction: must be in [0, 1]"));
  CHECK(message_of(cosine(0), 0) ==
        "--steps: the schedule needs a run of at least 1 step, got 0; pass a positive --steps");
  CHECK(message_of(cosine(200), 100) ==
        "--warmup-steps: 200 warm-up steps do not end before the cosine reaches its floor at step 100 (the run's "
        "total steps); use fewer warm-up steps, or a larger --decay-steps");
  CHECK(message_of(cosine(30, 20), 100) ==
        "--warmup-steps: 30 warm-up steps do not end before the cosine reaches its floor at step 20 "
        "(--decay-steps); use fewer warm-up steps, or a larger --decay-steps");
  CHECK(message_of(LrSchedule::parse("constant", 101, 0, 0.1), 100) ==
        "--warmup-steps: 101 warm-up steps are more than the run's 100 steps, so the lr never reaches --lr; use "
        "fewer warm-up steps or more --steps");
}
