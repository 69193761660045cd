// The activation-bytes formulas of docs/stages/00-naive.md and 02-checkpointing.md, written out
// independently of the library (tests compare the memory tracker against these, never against
// the library's own activation_elements()).
#pragma once

#include <cmath>
#include <cstddef>

namespace scalelab_test {

struct Shape {
  std::size_t V, C, L, NH;
};

// One block's saved activations in elements:
// ln1, atty, residual2, ln2, residual3 (5 BTC) + qkv (3 BTC) + fch, fch_gelu (8 BTC) = 16 BTC;
// two LayerNorms' mean and rstd (4 BT); attention probabilities (NH B T T).
inline std::size_t block_elements(const Shape& s, std::size_t B, std::size_t T) {
  return 16 * B * T * s.C + 4 * B * T + s.NH * B * T * T;
}
inline std::size_t att_elements(const Shape& s, std::size_t B, std::size_t T) { return s.NH * B * T * T; }
// Outside the blocks: encoded and ln_f output (2 BTC), ln_f's mean/rstd and the losses (3 BT),
// the probabilities (B T V).
inline std::size_t head_elements(const Shape& s, std::size_t B, std::size_t T) {
  return 2 * B * T * s.C + 3 * B * T + B * T * s.V;
}

// Stage 00: everything kept.
inline std::size_t act_bytes_none(const Shape& s, std::size_t B, std::size_t T) {
  return 4 * (head_elements(s, B, T) + s.L * block_elements(s, B, T));
}
// Stage 02, segments of k blocks: ceil(L/k) - 1 stored segment inputs beyond `encoded`, the last
// block's output (ln_f's input), and one segment of k blocks' activations.
inline std::size_t act_bytes_segments(const Shape& s, std::size_t B, std::size_t T, std::size_t k) {
  const std::size_t segments = (s.L + k - 1) / k;
  return 4 * (head_elements(s, B, T) + (segments - 1) * B * T * s.C + B * T * s.C + k * block_elements(s, B, T));
}
// Stage 02, selective: every block without its attention probabilities, plus one shared buffer.
inline std::size_t act_bytes_selective(const Shape& s, std::size_t B, std::size_t T) {
  return 4 * (head_elements(s, B, T) + s.L * (block_elements(s, B, T) - att_elements(s, B, T)) + att_elements(s, B, T));
}

}  // namespace scalelab_test
