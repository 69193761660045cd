// Stage 01: gradient accumulation. k micro-batches of B/k rows give the gradient of the whole
// batch of B: each micro-batch's mean loss is scaled by 1/k before its backward, and the
// parameter gradients add up (+=) across micro-batches; the optimizer then steps once.
#pragma once

#include "model/train_model.hpp"

namespace scalelab {

// Runs forward+backward over inputs/targets (B,T) in k micro-batches, accumulating into the
// model's gradients (which the caller zeroed). loss_scale multiplies every backward (stage 03's
// dynamic loss scale; 1 otherwise). Returns the mean loss over the whole batch.
// Throws ConfigError when B is not divisible by k.
double accumulate_gradients(TrainModel& model, const int* inputs, const int* targets, int B, int T, int k,
                            double loss_scale = 1.0);

}  // namespace scalelab
