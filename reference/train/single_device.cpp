// One device: the batch's micro-batches one after another (train/accumulate.cpp).
#include "train/single_device.hpp"

#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "train/accumulate.hpp"

namespace scalelab {

// The defaults of ParallelStrategy's file hooks: this rank holds everything and writes it.
void ParallelStrategy::save_weights(const TrainModel& model, const std::string& path) const {
  scalelab::save_weights(path, model.config(), model.master_params());
}

void ParallelStrategy::save_checkpoint(const TrainCheckpoint& checkpoint, const std::string& path) const {
  scalelab::save_checkpoint(path, checkpoint);
}

TrainCheckpoint ParallelStrategy::load_checkpoint(const std::string& path, const TrainModel& model) const {
  return held_checkpoint(model, scalelab::load_checkpoint(path, &model.config()));
}

TrainCheckpoint ParallelStrategy::held_checkpoint(const TrainModel& model, const TrainCheckpoint& whole) const {
  TrainCheckpoint c = whole;
  c.params = held_values(model, whole.params);
  c.adam_m = held_values(model, whole.adam_m);
  c.adam_v = held_values(model, whole.adam_v);
  return c;
}

std::vector<float> ParallelStrategy::held_values(const TrainModel& model, const std::vector<float>& whole) const {
  return held_by_name(model.config(), model.layout(), whole);
}

double SingleDevice::run_micro_batches(TrainModel& model, const GlobalBatch& batch, double loss_scale) {
  return accumulate_gradients(model, batch.inputs, batch.targets, batch.rows, batch.T, batch.micro_batches, loss_scale);
}

}  // namespace scalelab
