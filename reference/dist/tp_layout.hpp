// Stage 06: which part of every GPT tensor a tensor-parallel rank holds (Megatron's splits).
//
//   transformer.wte.weight (V,C)      by vocabulary rows: rank r holds rows [r Vl, (r+1) Vl) of the
//                                     vocabulary padded to Vp = t * ceil(V/t); rows >= V are
//                                     padding, zero forever (their logits are masked)
//   attn.c_attn.weight (3C,C), bias   by heads: the q, k and v rows of the rank's NH/t heads
//   attn.c_proj.weight (C,C)          by input columns: the rank's heads' C/t columns
//   mlp.c_fc.weight (4C,C), bias      by output rows: 4C/t of them
//   mlp.c_proj.weight (C,4C)          by input columns: 4C/t of them
//   everything else                   replicated: wpe, the LayerNorms, and the biases of the two
//                                     c_proj (row-parallel) layers, added once after the reduction
//
// A rank's tensors keep their nanoGPT names, in nanoGPT's order, with their local shapes, packed
// into one flat buffer (ParamLayout::packed): bucketing, AdamW and checkpoints see ranges as
// ever. Where each part sits in the whole tensor is said once, as model/shard.hpp's TensorShards
// (pieces()): shard() copies them out of the whole model, held() hands them to
// dist/gather_weights.hpp, which assembles the whole model from every rank's.
#pragma once

#include <cstddef>
#include <vector>

#include "dist/gather_weights.hpp"
#include "dist/norm_share.hpp"
#include "model/config.hpp"
#include "model/params.hpp"
#include "model/shard.hpp"

namespace scalelab {

enum class TpSplit {
  kReplicated,  // every rank holds the whole tensor
  kRows,        // rows [r R/t, (r+1) R/t): the output features of a column-parallel layer
  kHeadRows,    // c_attn: in each of the q, k and v thirds, the rows of rank r's heads
  kColumns,     // columns [r K/t, (r+1) K/t) of every row: the inputs of a row-parallel layer
  kVocabRows,   // wte: rows of the padded vocabulary range (see above)
};
const char* tp_split_name(TpSplit split);
// How the tensor with this nanoGPT name is split.
TpSplit tp_split_of(const std::string& name);

// The vocabulary split: Vp = t * ceil(V / t) rows, Vl = Vp / t per rank, rank r from r * Vl.
struct VocabRange {
  int begin = 0;   // first (global) token id of this rank's rows
  int local = 0;   // Vl: rows per rank, padding included
  int padded = 0;  // Vp
  int vocab = 0;   // V: ids >= V are padding
  // Rows of this rank that are real tokens (the rest are padding): min(V - begin, Vl), >= 0.
  int real() const;
};
VocabRange vocab_range(int vocab_size, int t, int rank);

class TpLayout {
 public:
  // Rank `rank` of t. The shape must split (ConfigError otherwise): t divides the heads.
  TpLayout(const GPTConfig& config, int t, int rank) : TpLayout(config, ModelSlice{}, t, rank) {}
  // The same for a pipeline slice's tensors (tp x pp): whole() is ParamLayout(config, slice).
  TpLayout(const GPTConfig& config, const ModelSlice& slice, int t, int rank);

  const GPTConfig& config() const { return config_; }
  const ModelSlice& slice() const { return slice_; }
  int size() const { return t_; }
  int rank() const { return rank_; }
  // This rank's tensors: nanoGPT names, local shapes, one flat buffer.
  const ParamLayout& layout() const { return local_; }
  const ParamLayout& whole() const { return whole_; }
  // The split of the i-th tensor (the same index in layout() and whole()).
  TpSplit split(std::size_t i) const { return splits_[i]; }
  const VocabRange& vocab() const { return vocab_; }

  // One piece of a whole tensor that this rank holds, and where it starts in the rank's buffer.
  // A tensor is one piece (whole, rows or columns), three for c_attn (its q, k and v rows), and
  // wte's real rows (none on a rank whose range is all padding).
  struct Piece {
    TensorShard shard;
    std::size_t whole_offset = 0;  // the whole tensor's offset in whole()
    std::size_t local_offset = 0;  // the piece's offset in layout()'s buffer
  };
  const std::vector<Piece>& pieces() const { return pieces_; }

  // local (layout() order) = this rank's part of whole (whole() order); padding rows zero.
  void shard(const float* whole, float* local) const;
  // This rank's pieces of `local` (laid out like layout()), as gather_whole_model and
  // gather_and_save_weights take them.
  std::vector<HeldTensor> held(const float* local) const;
  // Elements of the replicated tensors (what sequence parallelism sums across ranks).
  std::size_t replicated_elements() const;

 private:
  GPTConfig config_;
  ModelSlice slice_;
  int t_, rank_;
  ParamLayout whole_, local_;
  std::vector<TpSplit> splits_;
  std::vector<Piece> pieces_;
  VocabRange vocab_;
};

// The ranges [offset, offset + numel) of layout's replicated tensors in its flat buffer, in order.
IndexRanges replicated_ranges(const TpLayout& layout);

// Views of a rank's flat buffer (parameters or gradients) by name, in the model's BlockView
// shape; every pointer is this rank's part (model/params.hpp gives the whole shapes).
template <typename F>
ParamView<F> tp_param_view(const TpLayout& layout, F* base);

}  // namespace scalelab
