// The loss scaler's update rule.
#include "train/loss_scaler.hpp"

namespace scalelab {

void LossScaler::update(bool found_inf) {
  if (!enabled) return;
  // LAB 03 BEGIN loss_scaler_update: section 4
  if (found_inf) {
    scale *= backoff_factor;
    clean_steps = 0;
  } else if (++clean_steps >= growth_interval) {
    scale *= growth_factor;
    clean_steps = 0;
  }
  // LAB 03 END
}

}  // namespace scalelab
