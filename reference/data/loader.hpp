// Batches of (input, target) windows from a token stream: each row is T+1 consecutive tokens
// starting at a random offset (inputs are the first T, targets the last T). The train split is
// the first (1 - val_fraction) of the tokens, the validation split the rest. Offsets come from
// the loader's own seeded Rng, whose state a checkpoint saves so that resume is exact.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.hpp"

namespace scalelab {

struct TokenSplit {
  std::vector<std::uint16_t> train, val;
};
// Splits tokens; throws ConfigError when either part is too short for one window of T+1.
TokenSplit split_tokens(const std::vector<std::uint16_t>& tokens, double val_fraction, int T);

class DataLoader {
 public:
  DataLoader(const std::vector<std::uint16_t>* tokens, int B, int T, std::uint64_t seed);
  // Fills inputs and targets (B*T each) with the next random batch.
  void next_batch(int* inputs, int* targets);
  // Fills the i-th fixed, sequential batch (wrapping around): used for validation, so every
  // evaluation sees the same data.
  void sequential_batch(std::size_t i, int* inputs, int* targets) const;
  std::uint64_t rng_state() const { return rng_.state(); }
  void set_rng_state(std::uint64_t s) { rng_.set_state(s); }
  std::uint64_t batches_served() const { return served_; }
  void set_batches_served(std::uint64_t n) { served_ = n; }
  int batch_size() const { return B_; }
  int seq_len() const { return T_; }

 private:
  void fill_row(std::size_t start, int* inputs, int* targets) const;
  const std::vector<std::uint16_t>* tokens_;
  int B_, T_;
  Rng rng_;
  std::uint64_t served_ = 0;
};

}  // namespace scalelab
