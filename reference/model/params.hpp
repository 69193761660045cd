// The flat parameter buffer's layout: every tensor is a named view (offset, shape) into one
// contiguous array. Names and shapes follow nanoGPT's GPT state dict, in its order, so weights
// travel to and from PyTorch as safetensors files. Gradients and optimizer state mirror the
// same layout, which turns bucketing, sharding and casting into operations on ranges.
// The LM head is tied to transformer.wte.weight, so there is no separate lm_head tensor.
// A layout can also describe a slice of the model (model/slice.hpp, for pipeline stages): the
// tensors it holds, under their global names, in the same order, packed into its own buffer.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/slice.hpp"

namespace scalelab {

struct ParamTensor {
  std::string name;                // e.g. "transformer.h.0.attn.c_attn.weight"
  std::vector<std::size_t> shape;  // e.g. {3C, C}: nn.Linear stores (out, in)
  std::size_t offset = 0;          // in elements, into the flat buffer
  std::size_t numel = 0;
  int layer = -1;  // the block it belongs to, -1 for embeddings and ln_f
};

class ParamLayout {
 public:
  // The whole model.
  explicit ParamLayout(const GPTConfig& config) : ParamLayout(config, ModelSlice{}) {}
  // The tensors `slice` holds, in nanoGPT order, with offsets into the slice's own buffer:
  // transformer.wte.weight when it has the embeddings or the head (a slice with the head but not
  // the embeddings holds its own copy of the tied weight, under the same name), wpe with the
  // embeddings, its blocks under their global numbers (transformer.h.5...), ln_f with the head.
  ParamLayout(const GPTConfig& config, const ModelSlice& slice);
  // The tensors of several layouts one after the other, offsets shifted to one flat buffer (a
  // pipeline rank's model chunks, stage 05). Throws ConfigError when a name repeats.
  static ParamLayout concatenate(const std::vector<ParamLayout>& parts);
  // Tensors of any shapes (a tensor-parallel shard's, stage 06), packed in the order given: each
  // tensor's offset is recomputed and numel is the product of its shape.
  static ParamLayout packed(std::vector<ParamTensor> tensors);
  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  std::size_t num_params() const { return total_; }
  // The tensor with this name; throws ConfigError naming it when absent.
  const ParamTensor& find(const std::string& name) const;
  // The same, or nullptr when the layout does not hold it.
  const ParamTensor* find_if_held(const std::string& name) const;

 private:
  ParamLayout() = default;
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

// For a slice, the tensors it does not hold are null: wte without embeddings and head, wpe
// without embeddings, lnf without the head; blocks[i] is the slice's i-th block.
template <typename F>
struct ParamView {
  F* wte = nullptr;                  // (V, C) token embedding, also the LM head
  F* wpe = nullptr;                  // (T, C) position embedding
  std::vector<BlockView<F>> blocks;  // L of them (the slice's count)
  F* lnf_w = nullptr;                // (C)
  F* lnf_b = nullptr;                // (C)
};

// Views into a flat buffer laid out by ParamLayout(config) or ParamLayout(config, slice).
template <typename F>
ParamView<F> make_param_view(const GPTConfig& config, F* base);
template <typename F>
ParamView<F> make_param_view(const GPTConfig& config, const ModelSlice& slice, F* base);

}  // namespace scalelab
