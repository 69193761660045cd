// The model shape of the stage-08 model tests (tests/stages/test_attention_model.cpp, and with
// mixed precision tests/precision/test_mixed_attention.cpp).
#pragma once

#include <cstdint>

#include "prior_stage.hpp"

namespace scalelab_test {

// T = 70: more than one 64-key chunk or tile, and not a multiple of 64 (a partial last tile).
// L = 4 so that every:2 and sqrt (= 2) have two segments, the first of them recomputed.
inline const prior::ModelShape kAttentionShape{64, 70, 32, 4, 4};  // V, T, C, L, NH
constexpr int kAttentionB = 2, kAttentionT = 70;
constexpr std::uint64_t kAttentionSeed = 21;

}  // namespace scalelab_test
