// Named views of a flat parameter (or gradient) buffer on the device: the ParamView of
// model/params.hpp for any element type, float, bf16 or fp16. The reference builds its views
// for float and double only (it cannot see the CUDA types), so this builds them from the
// ParamLayout's offsets instead, and checks the names on the way: a layout whose order ever
// drifted from BlockView's fields would fail here, not give silently wrong gradients.
#pragma once

#include <string>

#include "core/error.hpp"
#include "model/params.hpp"
#include "model/slice.hpp"

namespace scalelab::cuda {

// The fields of a BlockView in ParamLayout order, with the name each tensor ends in.
template <typename F>
struct BlockField {
  F* BlockView<F>::*field;
  const char* suffix;
};
template <typename F>
inline constexpr BlockField<F> kBlockFields[] = {{&BlockView<F>::ln1_w, "ln_1.weight"},
                                                 {&BlockView<F>::ln1_b, "ln_1.bias"},
                                                 {&BlockView<F>::qkv_w, "attn.c_attn.weight"},
                                                 {&BlockView<F>::qkv_b, "attn.c_attn.bias"},
                                                 {&BlockView<F>::attproj_w, "attn.c_proj.weight"},
                                                 {&BlockView<F>::attproj_b, "attn.c_proj.bias"},
                                                 {&BlockView<F>::ln2_w, "ln_2.weight"},
                                                 {&BlockView<F>::ln2_b, "ln_2.bias"},
                                                 {&BlockView<F>::fc_w, "mlp.c_fc.weight"},
                                                 {&BlockView<F>::fc_b, "mlp.c_fc.bias"},
                                                 {&BlockView<F>::fcproj_w, "mlp.c_proj.weight"},
                                                 {&BlockView<F>::fcproj_b, "mlp.c_proj.bias"}};
inline constexpr int kTensorsPerBlock = 12;

// base points at num_params() elements on the device, laid out by ParamLayout(config, slice) with
// the slice resolved (model/slice.hpp): wte (with the embeddings or the head), wpe (with the
// embeddings), the slice's blocks numbered from 0, ln_f (with the head). The view only does
// pointer arithmetic; the tensors a slice lacks stay null.
template <typename F>
ParamView<F> device_param_view(const ParamLayout& layout, const ModelSlice& slice, F* base) {
  const auto& t = layout.tensors();
  std::size_t i = 0;
  auto next = [&](const std::string& name) {
    SCALELAB_CHECK(i < t.size() && t[i].name == name, "layout tensor ", i, " is ",
                   i < t.size() ? t[i].name : std::string("past the end"), ", expected ", name);
    return base + t[i++].offset;
  };
  ParamView<F> v;
  if (slice.embeddings || slice.head) v.wte = next("transformer.wte.weight");  // the head's weight is wte (tied)
  if (slice.embeddings) v.wpe = next("transformer.wpe.weight");
  for (int l = 0; l < slice.num_layers; ++l) {
    BlockView<F> b{};
    const std::string prefix = "transformer.h." + std::to_string(slice.first_layer + l) + ".";
    for (int j = 0; j < kTensorsPerBlock; ++j) b.*(kBlockFields<F>[j].field) = next(prefix + kBlockFields<F>[j].suffix);
    v.blocks.push_back(b);
  }
  if (slice.head) {
    v.lnf_w = next("transformer.ln_f.weight");
    v.lnf_b = next("transformer.ln_f.bias");
  }
  SCALELAB_CHECK(i == t.size(), "layout has ", t.size(), " tensors, the slice's view took ", i);
  return v;
}

}  // namespace scalelab::cuda
