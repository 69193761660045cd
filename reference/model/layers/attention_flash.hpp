// Flash attention on the CPU (stage 08), after Dao et al. (2022) and FlashAttention-2 (Dao, 2023):
// the online softmax of attention_chunked, but over tiles of Br queries x Bc keys, so that the
// score tile S = scale q k^T and the products P v, P^T dout, dout v^T, dS k, dS^T q are small
// matrix products through BLAS. Tiles above the causal diagonal are skipped. Forward saves only
// lse (B,NH,T); backward recomputes each tile's probabilities from it. Same layout as attention.hpp.
#pragma once

#include <cstddef>

namespace scalelab {

constexpr int kFlashQueryTile = 64;  // Br: queries per tile
constexpr int kFlashKeyTile = 64;    // Bc: keys per tile

// Workspace elements for attention_flash_forward and attention_flash_backward with tiles of
// Br x Bc: forward needs one score tile and two running values per query row, Br*Bc + 2*Br;
// backward two tiles (P and dP) and the T values D_t = dout_t . out_t of one head,
// 2*Br*Bc + T. This returns the larger, so one workspace serves both. Never T x T.
std::size_t attention_flash_scratch_elems(int T, int Br = kFlashQueryTile, int Bc = kFlashKeyTile);

// out (B,T,C); lse (B,NH,T) log-sum-exp of each query's scaled scores; scratch
// (attention_flash_scratch_elems(T, Br, Bc)) workspace; qkv (B,T,3C). Br, Bc >= 1.
template <typename F>
void attention_flash_forward(F* out, F* lse, F* scratch, const F* qkv, int B, int T, int C, int NH,
                             int Br = kFlashQueryTile, int Bc = kFlashKeyTile);

// dqkv (B,T,3C) = (written); scratch (attention_flash_scratch_elems(T, Br, Bc)) workspace;
// dout (B,T,C); qkv (B,T,3C); out (B,T,C) and lse (B,NH,T) from a forward (flash or chunked:
// both save the same lse).
template <typename F>
void attention_flash_backward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* out, const F* lse, int B,
                              int T, int C, int NH, int Br = kFlashQueryTile, int Bc = kFlashKeyTile);

}  // namespace scalelab
