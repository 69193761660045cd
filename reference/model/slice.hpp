// Which part of the GPT a model object holds. Pipeline parallelism (stage 05) gives each rank a
// contiguous range of blocks; the first stage also holds the embeddings, the last the final
// LayerNorm and the LM head. The default is the whole model. Stages 00-04 use only the default.
#pragma once

#include <string>

#include "model/config.hpp"

namespace scalelab {

struct ModelSlice {
  int first_layer = 0;     // global number of the slice's first block
  int num_layers = -1;     // blocks held; -1: all from first_layer to the last
  bool embeddings = true;  // wte and wpe: the slice starts from tokens
  bool head = true;        // ln_f and the LM head (tied to wte): the slice ends in the loss

  // The slice of blocks [first, first + n) of a model with L layers, with the embeddings when it
  // starts at 0 and the head when it ends at L: what pipeline stage s of p holds.
  static ModelSlice layers(const GPTConfig& config, int first, int n) {
    return {first, n, first == 0, first + n == config.num_layers};
  }

  // num_layers with -1 resolved.
  int count(const GPTConfig& config) const { return num_layers < 0 ? config.num_layers - first_layer : num_layers; }
  // Default-constructed: the whole model, whatever its config.
  bool is_default() const { return first_layer == 0 && num_layers < 0 && embeddings && head; }
  bool is_whole(const GPTConfig& config) const {
    return first_layer == 0 && count(config) == config.num_layers && embeddings && head;
  }
  // Throws ConfigError unless the blocks lie inside the model, there is at least one, and the
  // embeddings (head) come only with the first (last) block.
  void validate(const GPTConfig& config) const;
  // "layers [2, 4) + head", for messages.
  std::string describe(const GPTConfig& config) const;
  // A model's own copy: the config and the slice validated (ConfigError otherwise), num_layers
  // with -1 resolved.
  ModelSlice resolved(const GPTConfig& config) const;
};

}  // namespace scalelab
