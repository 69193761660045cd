// Which device a training run uses (--device cpu|cuda). The library (reference/) cannot see
// CUDA, so the program chooses: for cuda it hands the trainer a factory of the GPU models
// (kernels/model), when it was built with them (SCALELAB_HAVE_CUDA) and a GPU is present.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.hpp"
#include "dist/ddp_strategy.hpp"
#include "dist/device_chunk.hpp"
#include "dist/zero_train_model.hpp"
#include "parallel/strategy_factory.hpp"
#include "train/trainer.hpp"

namespace scalelab::cli {

// An empty factory for "cpu" (the trainer builds the CPU models); the GPU models for "cuda".
// Throws ConfigError naming --device and the fix when cuda is not available here.
TrainModelFactory model_factory_for(const std::string& device);
// Stage 04: the communicator DDP all-reduces the model's gradients through. cpu: none (null; the
// host communicator serves). cuda: NCCL when nccl is set, else the host-staging adapter over
// `host` (kernels/dist), which copies on the model's stream. Either spans host's ranks.
// timeout_seconds: NCCL's limit on a stuck call (--comm-timeout; 0: none).
std::unique_ptr<Communicator> gradient_communicator_for(const std::string& device, bool nccl, Communicator& host,
                                                        TrainModel& model, double timeout_seconds);
// The same as a factory for the DDP strategy (dist/ddp_strategy.hpp): empty for cpu.
GradCommFactory gradient_communicator_factory(const std::string& device, bool nccl, double timeout_seconds);
// Stage 07 on the GPU: builds GpuZeroModel (kernels/dist/gpu_zero_model.hpp) over the
// data-parallel group, its gradients and parameters moving through NCCL (nccl set) or the
// host-staging adapter. Empty for cpu.
ZeroModelFactory zero_model_factory(const std::string& device, bool nccl, double timeout_seconds);
// Stage 05 on the GPU: a pipeline stage's chunks as GPU slices (kernels/dist/gpu_pipeline_chunk.hpp).
// Empty for cpu.
DeviceChunkFactory pipeline_chunk_factory(const std::string& device);
// Stage 06 on the GPU: a tensor-parallel shard's device half (kernels/dist/gpu_tp_chunk.hpp),
// its collectives over NCCL (nccl set) or the host-staging adapter. Empty for cpu.
DeviceTpChunkFactory tp_chunk_factory(const std::string& device, bool nccl, double timeout_seconds);
PipelineMessagesFactory pipeline_messages_factory(const std::string& device, bool nccl, double timeout_seconds);
// All of the above for the strategies (parallel/strategy_factory.hpp): empty for cpu.
DeviceFactories device_factories_for(const std::string& device, bool nccl, double timeout_seconds);
// --backend nccl: throws ConfigError unless the device is cuda and this build has NCCL. Called
// before MPI starts, so every rank fails alike with one message.
void require_nccl_backend(const std::string& device);
// --device cuda in a job of several ranks: each rank takes GPU (local rank on its host) mod (the
// host's GPUs), before anything is allocated on one (kernels/core/device.hpp). Collective over
// world; nothing for cpu or without a world.
void select_rank_gpu(const std::string& device, Communicator* world);
// "cpu", or the GPU's description ("NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)").
std::string device_label(const std::string& device);

}  // namespace scalelab::cli
