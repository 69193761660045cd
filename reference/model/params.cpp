// Builds the nanoGPT-ordered layout of the flat parameter buffer (of the whole model or of a
// slice) and the typed views into it.
#include "model/params.hpp"

#include "core/carve.hpp"
#include "core/error.hpp"

namespace scalelab {

void ModelSlice::validate(const GPTConfig& config) const {
  const int L = config.num_layers, n = count(config);
  const std::string fix = "give a slice of blocks [first, first + n) with n >= 1 inside the model's " +
                          std::to_string(L) +
                          " layers; only the first block's slice may hold the embeddings, "
                          "only the last block's the head";
  require(first_layer >= 0 && n >= 1 && first_layer + n <= L, "slice",
          "layers [" + std::to_string(first_layer) + ", " + std::to_string(first_layer + n) + ") are not inside [0, " +
              std::to_string(L) + ")",
          fix);
  require(!embeddings || first_layer == 0, "slice",
          "holds the embeddings but starts at layer " + std::to_string(first_layer), fix);
  require(!head || first_layer + n == L, "slice",
          "holds the head but ends at layer " + std::to_string(first_layer + n) + " of " + std::to_string(L), fix);
}

std::string ModelSlice::describe(const GPTConfig& config) const {
  return std::string(embeddings ? "embeddings + " : "") + "layers [" + std::to_string(first_layer) + ", " +
         std::to_string(first_layer + count(config)) + ")" + (head ? " + head" : "");
}

ModelSlice ModelSlice::resolved(const GPTConfig& config) const {
  config.validate();
  validate(config);
  ModelSlice s = *this;
  s.num_layers = count(config);
  return s;
}

ParamLayout::ParamLayout(const GPTConfig& config, const ModelSlice& slice) {
  // The whole model's layout is built as before, also for a config not validated yet (a
  // checkpoint being read); only a real slice is checked against the config.
  if (!slice.is_default()) slice.validate(config);
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
  // The head's weight is wte (tied): a slice with the head holds wte even without the embeddings.
  if (slice.embeddings || slice.head) add("transformer.wte.weight", {V, C}, -1);
  if (slice.embeddings) add("transformer.wpe.weight", {T, C}, -1);
  const int first = slice.first_layer, last = first + slice.count(config);
  for (int l = first; l < last; ++l) {
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
  if (slice.head) {
    add("transformer.ln_f.weight", {C}, -1);
    add("transformer.ln_f.bias", {C}, -1);
  }
}

ParamLayout ParamLayout::concatenate(const std::vector<ParamLayout>& parts) {
  ParamLayout all;
  for (const ParamLayout& part : parts) {
    for (ParamTensor t : part.tensors()) {
      require(all.find_if_held(t.name) == nullptr, "layout",
              "tensor '" + t.name + "' is held twice by the layouts being joined",
              "give each model chunk its own blocks (a rank cannot hold both copies of the tied wte)");
      t.offset += all.total_;
      all.tensors_.push_back(std::move(t));
    }
    all.total_ += part.total_;
  }
  return all;
}

ParamLayout ParamLayout::packed(std::vector<ParamTensor> tensors) {
  ParamLayout all;
  for (ParamTensor& t : tensors) {
    t.numel = 1;
    for (std::size_t d : t.shape) t.numel *= d;
    t.offset = all.total_;
    all.total_ += t.numel;
  }
  all.tensors_ = std::move(tensors);
  return all;
}

const ParamTensor* ParamLayout::find_if_held(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  if (const ParamTensor* t = find_if_held(name)) return *t;
  throw ConfigError("parameter '" + name + "': no such tensor in this model; check the config");
}

template <typename F>
ParamView<F> make_param_view(const GPTConfig& config, F* base) {
  return make_param_view(config, ModelSlice{}, base);
}

template <typename F>
ParamView<F> make_param_view(const GPTConfig& config, const ModelSlice& slice, F* base) {
  // The order below must match ParamLayout's; the sizes are recomputed rather than looked up
  // by name so that building a view costs nothing.
  const std::size_t V = config.vocab_size, T = config.max_seq_len, C = config.channels;
  Carver<F> p(base);
  ParamView<F> v;
  if (slice.embeddings || slice.head) v.wte = p.take(V * C);
  if (slice.embeddings) v.wpe = p.take(T * C);
  for (int i = 0, n = slice.count(config); i < n; ++i) {
    BlockView<F> b;
    b.ln1_w = p.take(C);
    b.ln1_b = p.take(C);
    b.qkv_w = p.take(3 * C * C);
    b.qkv_b = p.take(3 * C);
    b.attproj_w = p.take(C * C);
    b.attproj_b = p.take(C);
    b.ln2_w = p.take(C);
    b.ln2_b = p.take(C);
    b.fc_w = p.take(4 * C * C);
    b.fc_b = p.take(4 * C);
    b.fcproj_w = p.take(4 * C * C);
    b.fcproj_b = p.take(C);
    v.blocks.push_back(b);
  }
  if (slice.head) {
    v.lnf_w = p.take(C);
    v.lnf_b = p.take(C);
  }
  return v;
}

template ParamView<float> make_param_view<float>(const GPTConfig&, float*);
template ParamView<double> make_param_view<double>(const GPTConfig&, double*);
template ParamView<float> make_param_view<float>(const GPTConfig&, const ModelSlice&, float*);
template ParamView<double> make_param_view<double>(const GPTConfig&, const ModelSlice&, double*);

}  // namespace scalelab
