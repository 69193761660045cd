// Builds the nanoGPT-ordered layout of the flat parameter buffer.
#include "model/params.hpp"

#include "core/error.hpp"

namespace scalelab {

ParamLayout::ParamLayout(const GPTConfig& config) {
  const std::size_t V = config.vocab_size, T = config.max_seq_len, C = config.channels;
  auto add = [&](const std::string& name, std::vector<std::size_t> shape, int layer) {
    ParamTensor t;
    t.name = name;
    t.shape = std::move(shape);
    t.numel = 1;
    for (auto d : t.shape) t.numel *= d;
    t.offset = total_;
    t.layer = layer;
    total_ += t.numel;
    tensors_.push_back(std::move(t));
  };
  add("transformer.wte.weight", {V, C}, -1);
  add("transformer.wpe.weight", {T, C}, -1);
  for (int l = 0; l < config.num_layers; ++l) {
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    add(p + "ln_1.weight", {C}, l);
    add(p + "ln_1.bias", {C}, l);
    add(p + "attn.c_attn.weight", {3 * C, C}, l);
    add(p + "attn.c_attn.bias", {3 * C}, l);
    add(p + "attn.c_proj.weight", {C, C}, l);
    add(p + "attn.c_proj.bias", {C}, l);
    add(p + "ln_2.weight", {C}, l);
    add(p + "ln_2.bias", {C}, l);
    add(p + "mlp.c_fc.weight", {4 * C, C}, l);
    add(p + "mlp.c_fc.bias", {4 * C}, l);
    add(p + "mlp.c_proj.weight", {C, 4 * C}, l);
    add(p + "mlp.c_proj.bias", {C}, l);
  }
  add("transformer.ln_f.weight", {C}, -1);
  add("transformer.ln_f.bias", {C}, -1);
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  throw ConfigError("parameter '" + name + "': no such tensor in this model; check the config");
}

template <typename F>
ParamView<F> make_param_view(const GPTConfig& config, F* base) {
  // The order below must match ParamLayout's; the sizes are recomputed rather than looked up
  // by name so that building a view costs nothing.
  const std::size_t V = config.vocab_size, T = config.max_seq_len, C = config.channels;
  F* p = base;
  auto take = [&p](std::size_t n) { F* r = p; p += n; return r; };
  ParamView<F> v;
  v.wte = take(V * C);
  v.wpe = take(T * C);
  for (int l = 0; l < config.num_layers; ++l) {
    BlockView<F> b;
    b.ln1_w = take(C); b.ln1_b = take(C);
    b.qkv_w = take(3 * C * C); b.qkv_b = take(3 * C);
    b.attproj_w = take(C * C); b.attproj_b = take(C);
    b.ln2_w = take(C); b.ln2_b = take(C);
    b.fc_w = take(4 * C * C); b.fc_b = take(4 * C);
    b.fcproj_w = take(4 * C * C); b.fcproj_b = take(C);
    v.blocks.push_back(b);
  }
  v.lnf_w = take(C);
  v.lnf_b = take(C);
  return v;
}

template ParamView<float> make_param_view<float>(const GPTConfig&, float*);
template ParamView<double> make_param_view<double>(const GPTConfig&, double*);

}  // namespace scalelab
