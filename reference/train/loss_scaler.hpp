// Stage 03: the dynamic loss scaler, with torch.cuda.amp.GradScaler's defaults. fp16's narrow
// range flushes small gradients to zero; multiplying the loss by a large scale moves them into
// range, and the optimizer divides it out again. On inf/NaN gradients the step is skipped and
// the scale halves; after `growth_interval` clean steps it doubles. bf16 and fp32 use none.
#pragma once

namespace scalelab {

struct LossScaler {
  bool enabled = false;
  double scale = 65536.0;  // 2^16, GradScaler's init_scale
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  long growth_interval = 2000;
  long clean_steps = 0;  // consecutive steps without inf/NaN since the last change

  // The factor the loss is multiplied by before backward (1 when disabled).
  double loss_scale() const { return enabled ? scale : 1.0; }
  // Call once per optimizer step with whether the gradients had inf/NaN.
  void update(bool found_inf);
};

}  // namespace scalelab
