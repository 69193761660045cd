// Stage 03: the dynamic loss scaler against torch.cuda.amp.GradScaler's documented defaults
// (init_scale 2^16, growth_factor 2, backoff_factor 0.5, growth_interval 2000).
#include <catch2/catch.hpp>

#include "train/loss_scaler.hpp"

using namespace scalelab;

TEST_CASE("the loss scaler follows GradScaler's rule and defaults", "[graded][loss_scaler]") {
  LossScaler s;
  s.enabled = true;
  CHECK(s.loss_scale() == 65536.0);

  // 1999 clean steps: unchanged; the 2000th doubles the scale and restarts the count.
  for (int i = 0; i < 1999; ++i) s.update(false);
  INFO("after 1999 clean steps: scale " << s.scale << ", clean_steps " << s.clean_steps);
  CHECK(s.scale == 65536.0);
  CHECK(s.clean_steps == 1999);
  s.update(false);
  INFO("after 2000 clean steps: scale " << s.scale << " (expected 131072), clean_steps " << s.clean_steps);
  CHECK(s.scale == 131072.0);
  CHECK(s.clean_steps == 0);

  // inf/NaN: halve, and the count of clean steps starts again.
  for (int i = 0; i < 1500; ++i) s.update(false);
  s.update(true);
  INFO("after an overflow: scale " << s.scale << " (expected 65536), clean_steps " << s.clean_steps);
  CHECK(s.scale == 65536.0);
  CHECK(s.clean_steps == 0);
  s.update(true);
  CHECK(s.scale == 32768.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  CHECK(s.scale == 32768.0);  // 1500 clean steps before the overflow do not count
  s.update(false);
  CHECK(s.scale == 65536.0);
  CHECK(s.loss_scale() == 65536.0);

  // bf16 and fp32 run without a scaler: the scale is 1 and update changes nothing.
  LossScaler off;
  off.update(true);
  CHECK(off.loss_scale() == 1.0);
  CHECK(off.scale == 65536.0);
}
