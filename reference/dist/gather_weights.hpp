// Saving a model that is spread over ranks (pipeline slices, stage 05; tensor shards, stage 06;
// ZeRO's flat shards, stage 07, as tensors cut from them): every rank contributes the named
// tensors, or shards of tensors, that it holds; rank 0 assembles the whole nanoGPT state dict
// and writes it with save_weights (io/safetensors.hpp). The file is byte for byte the one the
// whole model on one rank would write, so PyTorch and `scalelab` read it unchanged.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "model/config.hpp"
#include "model/params.hpp"
#include "model/shard.hpp"

namespace scalelab {

struct TrainCheckpoint;

// One tensor, or one shard of it, that a rank contributes.
struct HeldTensor {
  TensorShard shard;            // which tensor and which part (whole_tensor() for an unsplit one)
  const float* data = nullptr;  // shard.numel() values, row-major in shard.shape()
};

// Every tensor of `layout` (a slice's, or the whole model's), whole, with values at params.
std::vector<HeldTensor> held_tensors(const ParamLayout& layout, const float* params);

// Collective over comm: every rank calls it with what it holds (possibly nothing). Rank 0
// builds ParamLayout(config) and writes save_weights(path, config, ...). An element held by
// several ranks (the head's copy of the tied wte on the last pipeline stage) is taken once, from
// the lowest rank. When a name is not the config's, a shard's shape disagrees with the tensor's,
// or some tensor is not fully covered, every rank throws the same ConfigError.
void gather_and_save_weights(Communicator& comm, const std::string& path, const GPTConfig& config,
                             const std::vector<HeldTensor>& held);
// The same assembly for any per-parameter array (the optimizer's m and v too): rank 0 gets the
// whole model's values in ParamLayout(config) order, after `use` (may be empty) ran on them; the
// other ranks get an empty vector. `what` names the array in the error every rank throws.
std::vector<float> gather_whole_model(Communicator& comm, const GPTConfig& config, const std::vector<HeldTensor>& held,
                                      const std::string& what, const std::function<void(const float*)>& use = {});

// A training checkpoint of a model spread over comm, written by rank 0 as one whole-model file
// that any layout resumes from: params, AdamW m and v assembled as above (held_of(values) is this
// rank's contribution of an array laid out like its parameters), the rest as `mine` has it
// (the step, the data position: the same on every rank). Collective over comm.
void gather_and_save_checkpoint(Communicator& comm, const TrainCheckpoint& mine, const std::string& path,
                                const std::function<std::vector<HeldTensor>(const float*)>& held_of);

}  // namespace scalelab
