// One device: the batch's micro-batches one after another (train/accumulate.cpp).
#include "train/single_device.hpp"

#include "train/accumulate.hpp"

namespace scalelab {

double SingleDevice::run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) {
  return accumulate_gradients(model, batch.inputs, batch.targets, batch.rows, batch.T, batch.micro_batches,
                              loss_scale);
}

}  // namespace scalelab
