// Sequence parallelism's once-per-step sum of the replicated tensors' gradients (stage 06).
#include <algorithm>

#include "dist/tp_model.hpp"

namespace scalelab {

void sum_sequence_parallel_grads(TpGroup& tp, const TpLayout& layout, float* grads, std::vector<float>& staging) {
  if (!tp.sequence_parallel) return;  // every rank ran all rows: the copies are already equal
  // LAB 06 BEGIN sum_sequence_parallel_grads: section 4
  // The LayerNorms, wpe and the c_proj biases saw only this rank's N/t rows: their gradients are
  // partial sums. Forgetting this is silent (training still runs, a little worse); the ranks'
  // copies of the weights would even drift apart. Pack them, add them in one all-reduce, unpack.
  const auto& tensors = layout.layout().tensors();
  staging.resize(layout.replicated_elements());
  std::size_t at = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (layout.split(i) != TpSplit::kReplicated) continue;
    const float* g = grads + tensors[i].offset;
    std::copy(g, g + tensors[i].numel, staging.begin() + static_cast<std::ptrdiff_t>(at));
    at += tensors[i].numel;
  }
  tp.where = "sequence-parallel gradients";
  tp_all_reduce(tp, staging.data(), staging.size(), ReduceOp::kSum);
  at = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (layout.split(i) != TpSplit::kReplicated) continue;
    std::copy(staging.begin() + static_cast<std::ptrdiff_t>(at),
              staging.begin() + static_cast<std::ptrdiff_t>(at + tensors[i].numel), grads + tensors[i].offset);
    at += tensors[i].numel;
  }
  // LAB 06 END
}

}  // namespace scalelab
