// Full training-state checkpoints: everything needed to continue a run on the exact same
// trajectory (parameters, both Adam moments, the step count, the data loader's position and RNG
// state, the learning-rate schedule). Stored as a safetensors file: tensors "params", "adam.m",
// "adam.v" (flat F32) and the rest as metadata, so any safetensors reader can inspect one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/params.hpp"
#include "optim/lr_schedule.hpp"

namespace scalelab {

struct TrainCheckpoint {
  GPTConfig config;
  std::vector<float> params, adam_m, adam_v;  // each num_params long, in ParamLayout order
  long step = 0;                              // optimizer steps taken
  std::uint64_t data_rng_state = 0;           // DataLoader::rng_state()
  std::uint64_t batches_served = 0;           // DataLoader::batches_served()
  double loss_scale = 0;                      // mixed precision's dynamic loss scale (0: not used)
  long loss_scale_clean_steps = 0;            // steps since the scale last changed
  // The run's lr schedule and the step count it spans (LrSchedule::lr_at's total_steps: the
  // first run's --steps), so that a resumed run follows the same lr curve. Checkpoints written
  // before these were stored load as constant with total_steps 0.
  LrSchedule lr_schedule;
  long total_steps = 0;
};

// ZeRO (stage 07): a checkpoint file may hold one rank's shard, [begin, end) of the flat
// buffer, of a state sharded over `ranks` ranks; its params, adam.m and adam.v then hold
// end - begin values.
struct CheckpointShard {
  int rank = 0, ranks = 1;
  std::size_t begin = 0, end = 0;
};

void save_checkpoint(const std::string& path, const TrainCheckpoint& ckpt);
// One rank's shard (ckpt's vectors hold shard.end - shard.begin values).
void save_checkpoint_shard(const std::string& path, const TrainCheckpoint& ckpt, const CheckpointShard& shard);
// Strict load; when `expected` is given its shape must match the checkpoint's, else ConfigError
// names the differing field ("checkpoint 'x' was saved for config mini (C=256) but ...").
// A shard file is refused with a message that says how to resume it, unless `shard` is given:
// it then receives the file's shard description (whole files: rank 0 of 1, all of the buffer).
TrainCheckpoint load_checkpoint(const std::string& path, const GPTConfig* expected = nullptr,
                                CheckpointShard* shard = nullptr);
// The values of the tensors of `held` (a pipeline stage's, stage 05) by name, in held's order,
// from whole-model values in ParamLayout(config) order (a checkpoint's params, m or v, or a weights
// file's). ConfigError when whole is not the config's size or a name is not the config's.
std::vector<float> held_by_name(const GPTConfig& config, const ParamLayout& held, const std::vector<float>& whole);

}  // namespace scalelab
