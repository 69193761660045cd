// Stage 06: column- and row-parallel linear layers (Megatron-LM), on stage 00's matmul layer
// (model/layers/matmul.hpp: out = inp @ weight^T + bias, weight stored (OC, C) as nn.Linear).
//
// Column-parallel: the weight split by output rows. Each rank computes its OC/t output
// features from the WHOLE input, so f goes in front:
//     out_r = f(x) @ W_r^T + b_r                    (N, OC/t)  no communication forward
//     dx    = f_backward(sum_r dout_r @ W_r)        (N, C)     every rank's partial summed
// Row-parallel: the weight split by input columns. Each rank multiplies its slice of the
// input (the column-parallel output) and gets a partial sum of the whole output, so g follows:
//     y     = g(x_r @ W_r^T) + b                    (N, OC)    the bias added once, after g
//     dx_r  = g_backward(dy) @ W_r                  (N, IC/t)  no communication backward
// Row counts: x of a column-parallel layer and y of a row-parallel one live in the
// LayerNorm/residual region: N rows, or this rank's N/t under sequence parallelism
// (TpGroup::local_rows). Everything between the two layers is always N rows.
#pragma once

#include "dist/tp_operators.hpp"

namespace scalelab {

// out (N, OC_local) = f(x) @ weight^T + bias. x (local rows, C); x_full (N, C) receives the whole
// input (may equal x without sequence parallelism) and is what backward reads; weight
// (OC_local, C); bias (OC_local) or nullptr.
void column_parallel_forward(TpGroup& tp, float* out, float* x_full, const float* x, const float* weight,
                             const float* bias, int N, int C, int OC_local);
// dx (local rows, C) = d loss / d x (written); dx_full (N, C) scratch (may equal dx without
// sequence parallelism); dweight (OC_local, C) +=; dbias (OC_local) += unless nullptr;
// dout (N, OC_local); x_full as forward left it.
void column_parallel_backward(TpGroup& tp, float* dx, float* dx_full, float* dweight, float* dbias, const float* dout,
                              const float* x_full, const float* weight, int N, int C, int OC_local);

// y (local rows, OC) = g(x @ weight^T) + bias. x (N, IC_local); weight (OC, IC_local); bias (OC),
// replicated; y_partial (N, OC) scratch.
void row_parallel_forward(TpGroup& tp, float* y, float* y_partial, const float* x, const float* weight,
                          const float* bias, int N, int IC_local, int OC);
// dx (N, IC_local) = (written); dy_full (N, OC) scratch (may equal dy without sequence
// parallelism); dweight (OC, IC_local) +=; dbias (OC) += over this rank's rows of dy (under
// sequence parallelism a partial sum: the ranks' parts are added after backward); dy (local rows, OC).
void row_parallel_backward(TpGroup& tp, float* dx, float* dy_full, float* dweight, float* dbias, const float* dy,
                           const float* x, const float* weight, int N, int IC_local, int OC);

}  // namespace scalelab
