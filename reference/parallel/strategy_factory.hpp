// Which ParallelStrategy a run gets: the one place where the parallel stages are registered.
// It sits above train/ (the seam) and dist/ (the strategies), so neither includes the other's
// way around: train/ knows only the interface, each stage only its own strategy.
#pragma once

#include "comm/communicator.hpp"
#include "dist/ddp_strategy.hpp"
#include "dist/device_chunk.hpp"
#include "dist/device_tp_shard.hpp"
#include "dist/pipeline_strategy.hpp"
#include "dist/zero_train_model.hpp"
#include "train/parallel_strategy.hpp"

namespace scalelab {

// The library's strategies for jobs over `world` (null: one process without a communicator).
// For each run it validates the options against the world's size (every rank alike, so every
// rank throws the same ConfigError), then builds:
//   nothing parallel asked for                 SingleDevice
//   dp > 1, or --ddp naive|bucketed            DdpStrategy over the world (stage 04)
// and refuses, by flag, the stages this build does not have yet. `device` holds what the GPU
// paths need (below).
// The checks the factory makes before building anything: the options against a job of
// world_size ranks, and the stages this build has. A program calls it on every rank before it
// loads data or builds a model, so a bad layout fails at once, alike everywhere.
void check_parallel_options(const TrainOptions& options, int world_size);

// What a program built with CUDA hands the strategies for --device cuda (the library cannot see
// CUDA: apps/scalelab/device_models.hpp makes them). Empty: the CPU only.
struct DeviceFactories {
  GradCommFactory grad_comm;                  // DDP: the gradients' communicator for GPU models
  ZeroModelFactory zero_model;                // stage 07: ZeRO's model on a GPU
  DeviceChunkFactory pipeline_chunks;         // stage 05: a pipeline stage's chunks on a GPU
  DeviceTpChunkFactory tp_chunks;             // stage 06: a tensor-parallel shard's GPU half
  PipelineMessagesFactory pipeline_messages;  // stage 05: the messages between a pipeline's GPU chunks
};

StrategyFactory make_strategy_factory(Communicator* world, DeviceFactories device = {});

}  // namespace scalelab
