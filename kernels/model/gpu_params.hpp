// Named views of a flat parameter (or gradient) buffer on the device: the ParamView of
// model/params.hpp for any element type, float, bf16 or fp16. The reference builds its views
// for float and double only (it cannot see the CUDA types), so this builds them from the
// ParamLayout's offsets instead, and checks the names on the way: a layout whose order ever
// drifted from BlockView's fields would fail here, not give silently wrong gradients.
#pragma once

#include <string>

#include "core/error.hpp"
#include "model/params.hpp"

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

// base points at num_params() elements on the device; the view only does pointer arithmetic.
template <typename F>
ParamView<F> device_param_view(const ParamLayout& layout, int num_layers, F* base) {
  const auto& t = layout.tensors();
  const std::size_t expected = 2 + static_cast<std::size_t>(kTensorsPerBlock) * num_layers + 2;
  SCALELAB_CHECK(t.size() == expected, "layout has ", t.size(), " tensors, expected ", expected);
  auto at = [&](std::size_t i, const std::string& name) {
    SCALELAB_CHECK(t[i].name == name, "layout tensor ", i, " is ", t[i].name, ", expected ", name);
    return base + t[i].offset;
  };
  ParamView<F> v;
  v.wte = at(0, "transformer.wte.weight");
  v.wpe = at(1, "transformer.wpe.weight");
  for (int l = 0; l < num_layers; ++l) {
    BlockView<F> b{};
    const std::string prefix = "transformer.h." + std::to_string(l) + ".";
    for (int j = 0; j < kTensorsPerBlock; ++j)
      b.*(kBlockFields<F>[j].field) = at(2 + static_cast<std::size_t>(kTensorsPerBlock) * l + j,
                                         prefix + kBlockFields<F>[j].suffix);
    v.blocks.push_back(b);
  }
  v.lnf_w = at(expected - 2, "transformer.ln_f.weight");
  v.lnf_b = at(expected - 1, "transformer.ln_f.bias");
  return v;
}

}  // namespace scalelab::cuda
