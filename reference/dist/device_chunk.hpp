// Stage 05 on a device: what a pipeline chunk that computes on a GPU shares with the stage that
// holds it (dist/pipeline_stage_model.hpp). The stage's flat host buffers stay the ones the
// optimizer, the collectives and the files use; the chunk keeps a copy of its range of them on
// the device (PipelineChunk::load_params, store_grads). The GPU chunk is
// kernels/dist/gpu_pipeline_chunk.hpp; tests/dist/test_pipeline.cpp runs the same stage code with
// a CPU twin whose "device" copy is a second host buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dist/pipeline_chunk.hpp"
#include "precision/half.hpp"

namespace scalelab {

// Where a device chunk's host copy lives: its range of the stage's flat buffers (fp32: params
// and grads; mixed precision: the half parameters and gradients, and the master weights held).
struct DeviceChunkStorage {
  ModelSlice slice;
  float* params = nullptr;
  float* grads = nullptr;
  MixedStorage mixed;  // bf16/fp16 (its slice unused)
};
// Makes a chunk that computes on a device, in `precision` (fp32, bf16, fp16), counting its device
// memory in `device` (the GPU's own tracker: the stage's counts host memory).
using DeviceChunkFactory = std::function<std::unique_ptr<PipelineChunk>(
    const GPTConfig& config, const std::string& precision, const DeviceChunkStorage& storage, MemoryTracker* device)>;

// GPT-2's initialisation of the chunk's tensors into its host copy, as the CPU chunks initialise
// theirs (each tensor what the whole model's initialisation gives it): fp32 (no half format) into
// params; mixed precision every value rounded into the half parameters and the master weights
// held kept in fp32.
void init_device_chunk_weights(const GPTConfig& config, const ParamLayout& layout, const DeviceChunkStorage& storage,
                               std::optional<HalfFormat> half, std::uint64_t seed);
// The host copy's parameters and gradients as bytes: fp32 values, or the half bits (bf16 and fp16
// have the same bits on the host and on a GPU).
const void* device_chunk_host_params(const DeviceChunkStorage& storage, bool mixed);
void* device_chunk_host_grads(const DeviceChunkStorage& storage, bool mixed);

}  // namespace scalelab
