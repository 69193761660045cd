// The residual connection: out = a + b. Its backward hands dout unchanged to both inputs, so
// the model's backward passes one gradient buffer to both branches instead of copying it;
// residual_backward is the explicit form (used by tests and the CUDA twin).
#pragma once
#include <cstddef>
namespace scalelab {
template <typename F>
void residual_forward(F* out, const F* a, const F* b, std::size_t N);
// da, db (N) +=; dout (N)
template <typename F>
void residual_backward(F* da, F* db, const F* dout, std::size_t N);
}  // namespace scalelab
