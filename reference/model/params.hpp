// The flat parameter buffer's layout: every tensor is a named view (offset, shape) into one
// contiguous array. Names and shapes follow nanoGPT's GPT state dict, in its order, so weights
// travel to and from PyTorch as safetensors files. Gradients and optimizer state mirror the
// same layout, which turns bucketing, sharding and casting into operations on ranges.
// The LM head is tied to transformer.wte.weight, so there is no separate lm_head tensor.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace scalelab {

struct ParamTensor {
  std::string name;                // e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<std::size_t> shape;  // e.g. {3C, C}: nn.Linear stores (out, in)
  std::size_t offset = 0;          // in elements, into the flat buffer
  std::size_t numel = 0;
  int layer = -1;                  // the block it belongs to, -1 for embeddings and ln_f
};

class ParamLayout {
 public:
  explicit ParamLayout(const GPTConfig& config);
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  std::size_t num_params() const { return total_; }
  // The tensor with this name; throws ConfigError naming it when absent.
  const ParamTensor& find(const std::string& name) const;

 private:
  std::vector<ParamTensor> tensors_;
  std::size_t total_ = 0;
};

// Typed pointers into a flat buffer laid out by ParamLayout (used for parameters and, with the
// same code, for their gradients). F is float for training and double for gradient checks.
template <typename F>
struct BlockView {
  F* ln1_w;      // (C)
  F* ln1_b;      // (C)
  F* qkv_w;      // (3C, C)  attn.c_attn.weight
  F* qkv_b;      // (3C)
  F* attproj_w;  // (C, C)   attn.c_proj.weight
  F* attproj_b;  // (C)
  F* ln2_w;      // (C)
  F* ln2_b;      // (C)
  F* fc_w;       // (4C, C)  mlp.c_fc.weight
  F* fc_b;       // (4C)
  F* fcproj_w;   // (C, 4C)  mlp.c_proj.weight
  F* fcproj_b;   // (C)
};

template <typename F>
struct ParamView {
  F* wte;  // (V, C) token embedding, also the LM head
  F* wpe;  // (T, C) position embedding
  std::vector<BlockView<F>> blocks;  // L of them
  F* lnf_w;  // (C)
  F* lnf_b;  // (C)
};

template <typename F>
ParamView<F> make_param_view(const GPTConfig& config, F* base);

}  // namespace scalelab
