// The tensor-parallel splits of the GPT's tensors, and moving values between whole and shard.
#include "dist/tp_layout.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace scalelab {

namespace {

bool ends_with(const std::string& s, const char* suffix) {
  const std::string suf(suffix);
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// A row range [begin, end) of a tensor: a TensorShard along dim 0.
TensorShard row_range(const ParamTensor& tensor, std::size_t begin, std::size_t end) {
  return TensorShard{tensor.name, tensor.shape, 0, begin, end};
}

// The pieces of `whole` that rank `rank` of t holds, with their offsets inside the rank's tensor
// (row-major in the local shape).
std::vector<std::pair<TensorShard, std::size_t>> pieces_of(const ParamTensor& whole, TpSplit split, int t, int rank,
                                                           const VocabRange& vocab) {
  switch (split) {
    case TpSplit::kReplicated: return {{whole_tensor(whole), 0}};
    case TpSplit::kRows: return {{shard_rows(whole, rank, t), 0}};
    case TpSplit::kColumns: return {{shard_cols(whole, rank, t), 0}};
    case TpSplit::kHeadRows: {  // q, k, v: C rows each; this rank's C/t rows of each
      const std::size_t third = whole.shape[0] / 3, mine = third / static_cast<std::size_t>(t);
      const std::size_t first = static_cast<std::size_t>(rank) * mine, row = whole.numel / whole.shape[0];
      std::vector<std::pair<TensorShard, std::size_t>> p;
      for (std::size_t part = 0; part < 3; ++part)
        p.push_back({row_range(whole, part * third + first, part * third + first + mine), part * mine * row});
      return p;
    }
    case TpSplit::kVocabRows: {  // the real rows of the range; the padding rows after them are no piece
      if (vocab.real() == 0) return {};
      const std::size_t begin = static_cast<std::size_t>(vocab.begin);
      return {{row_range(whole, begin, begin + static_cast<std::size_t>(vocab.real())), 0}};
    }
  }
  return {};
}

std::vector<std::size_t> local_shape(const ParamTensor& whole, TpSplit split, int t, const VocabRange& vocab) {
  std::vector<std::size_t> s = whole.shape;
  const std::size_t n = static_cast<std::size_t>(t);
  switch (split) {
    case TpSplit::kReplicated: break;
    case TpSplit::kRows:
    case TpSplit::kHeadRows: s[0] /= n; break;
    case TpSplit::kColumns: s[1] /= n; break;
    case TpSplit::kVocabRows: s[0] = static_cast<std::size_t>(vocab.local); break;
  }
  return s;
}

}  // namespace

const char* tp_split_name(TpSplit split) {
  switch (split) {
    case TpSplit::kReplicated: return "replicated";
    case TpSplit::kRows: return "rows";
    case TpSplit::kHeadRows: return "head rows";
    case TpSplit::kColumns: return "columns";
    case TpSplit::kVocabRows: return "vocabulary rows";
  }
  return "?";
}

TpSplit tp_split_of(const std::string& name) {
  if (name == "transformer.wte.weight") return TpSplit::kVocabRows;
  if (ends_with(name, "attn.c_attn.weight") || ends_with(name, "attn.c_attn.bias")) return TpSplit::kHeadRows;
  if (ends_with(name, "mlp.c_fc.weight") || ends_with(name, "mlp.c_fc.bias")) return TpSplit::kRows;
  if (ends_with(name, "c_proj.weight")) return TpSplit::kColumns;  // attn.c_proj and mlp.c_proj
  return TpSplit::kReplicated;                                     // wpe, LayerNorms, the c_proj biases
}

int VocabRange::real() const { return std::clamp(vocab - begin, 0, local); }

VocabRange vocab_range(int vocab_size, int t, int rank) {
  VocabRange v;
  v.vocab = vocab_size;
  v.local = (vocab_size + t - 1) / t;
  v.padded = v.local * t;
  v.begin = rank * v.local;
  return v;
}

TpLayout::TpLayout(const GPTConfig& config, const ModelSlice& slice, int t, int rank)
    : config_(config), slice_(slice), t_(t), rank_(rank), whole_(config, slice), local_(ParamLayout::packed({})) {
  require(t >= 1 && t <= config.num_heads, "tp",
          "--tp " + std::to_string(t) + " is more ranks than the model's " + std::to_string(config.num_heads) +
              " attention heads (each rank needs at least one head)",
          "use --tp at most " + std::to_string(config.num_heads) + " (or more --heads)");
  require(config.num_heads % t == 0, "tp",
          "--tp " + std::to_string(t) + " does not divide the model's " + std::to_string(config.num_heads) + " heads",
          "choose a --tp that divides the head count (or change --heads)");
  SCALELAB_CHECK(rank >= 0 && rank < t, "tensor-parallel rank ", rank, " of ", t);
  vocab_ = vocab_range(config.vocab_size, t, rank);
  std::vector<ParamTensor> mine;
  for (const ParamTensor& w : whole_.tensors()) {
    const TpSplit split = tp_split_of(w.name);
    splits_.push_back(split);
    ParamTensor p = w;
    p.shape = local_shape(w, split, t, vocab_);
    mine.push_back(std::move(p));
  }
  local_ = ParamLayout::packed(std::move(mine));
  for (std::size_t i = 0; i < splits_.size(); ++i)
    for (auto& [shard, at] : pieces_of(whole_.tensors()[i], splits_[i], t, rank, vocab_))
      pieces_.push_back(Piece{std::move(shard), whole_.tensors()[i].offset, local_.tensors()[i].offset + at});
}

void TpLayout::shard(const float* whole, float* local) const {
  std::fill(local, local + local_.num_params(), 0.0f);  // the vocabulary padding
  for (const Piece& p : pieces_) copy_shard_out(p.shard, whole + p.whole_offset, local + p.local_offset);
}

std::vector<HeldTensor> TpLayout::held(const float* local) const {
  std::vector<HeldTensor> h;
  for (const Piece& p : pieces_) h.push_back({p.shard, local + p.local_offset});
  return h;
}

std::size_t TpLayout::replicated_elements() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < splits_.size(); ++i)
    if (splits_[i] == TpSplit::kReplicated) n += local_.tensors()[i].numel;
  return n;
}

template <typename F>
ParamView<F> tp_param_view(const TpLayout& layout, F* base) {
  // A slice's tensors keep their global names (model/params.hpp); what it does not hold is null.
  const ParamLayout& l = layout.layout();
  const ModelSlice& s = layout.slice();
  auto at = [&](const std::string& name) { return base + l.find(name).offset; };
  ParamView<F> v;
  v.wte = s.embeddings || s.head ? at("transformer.wte.weight") : nullptr;
  v.wpe = s.embeddings ? at("transformer.wpe.weight") : nullptr;
  for (int i = 0; i < s.count(layout.config()); ++i) {
    const std::string h = "transformer.h." + std::to_string(s.first_layer + i) + ".";
    v.blocks.push_back(BlockView<F>{at(h + "ln_1.weight"), at(h + "ln_1.bias"), at(h + "attn.c_attn.weight"),
                                    at(h + "attn.c_attn.bias"), at(h + "attn.c_proj.weight"),
                                    at(h + "attn.c_proj.bias"), at(h + "ln_2.weight"), at(h + "ln_2.bias"),
                                    at(h + "mlp.c_fc.weight"), at(h + "mlp.c_fc.bias"), at(h + "mlp.c_proj.weight"),
                                    at(h + "mlp.c_proj.bias")});
  }
  v.lnf_w = s.head ? at("transformer.ln_f.weight") : nullptr;
  v.lnf_b = s.head ? at("transformer.ln_f.bias") : nullptr;
  return v;
}

template ParamView<float> tp_param_view<float>(const TpLayout&, float*);

IndexRanges replicated_ranges(const TpLayout& layout) {
  IndexRanges out;
  for (std::size_t i = 0; i < layout.layout().tensors().size(); ++i)
    if (layout.split(i) == TpSplit::kReplicated) {
      const ParamTensor& t = layout.layout().tensors()[i];
      out.emplace_back(t.offset, t.offset + t.numel);
    }
  return out;
}

}  // namespace scalelab
