// Random-window batching over a token stream.
#include "data/loader.hpp"

#include <string>

#include "core/error.hpp"

namespace scalelab {

TokenSplit split_tokens(const std::vector<std::uint16_t>& tokens, double val_fraction, int T) {
  require(val_fraction > 0 && val_fraction < 1, "val_fraction",
          "must be in (0, 1), got " + std::to_string(val_fraction), "e.g. 0.1");
  const std::size_t n_val = static_cast<std::size_t>(tokens.size() * val_fraction);
  const std::size_t n_train = tokens.size() - n_val;
  const std::size_t need = static_cast<std::size_t>(T) + 1;
  require(n_train >= need && n_val >= need, "data",
          "has " + std::to_string(tokens.size()) + " tokens, too few for a train and a validation window of " +
              std::to_string(need) + " tokens each",
          "use a longer data file or a shorter --seq-len");
  TokenSplit s;
  s.train.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(n_train));
  s.val.assign(tokens.begin() + static_cast<std::ptrdiff_t>(n_train), tokens.end());
  return s;
}

DataLoader::DataLoader(const std::vector<std::uint16_t>* tokens, int B, int T, std::uint64_t seed)
    : tokens_(tokens), B_(B), T_(T), rng_(seed) {
  require(B >= 1, "batch", "must be at least 1, got " + std::to_string(B), "use a positive --batch");
  require(T >= 1, "seq_len", "must be at least 1, got " + std::to_string(T), "use a positive --seq-len");
  require(tokens_->size() >= static_cast<std::size_t>(T) + 1, "data",
          "has " + std::to_string(tokens_->size()) + " tokens, fewer than one window of " + std::to_string(T + 1),
          "use a longer data file or a shorter --seq-len");
}

void DataLoader::fill_row(std::size_t start, int* inputs, int* targets) const {
  const std::uint16_t* p = tokens_->data() + start;
  for (int t = 0; t < T_; ++t) {
    inputs[t] = p[t];
    targets[t] = p[t + 1];
  }
}

void DataLoader::next_batch(int* inputs, int* targets) {
  const std::size_t windows = tokens_->size() - static_cast<std::size_t>(T_);  // valid start offsets
  for (int b = 0; b < B_; ++b) {
    const std::size_t start = rng_.below(windows);
    fill_row(start, inputs + static_cast<std::size_t>(b) * T_, targets + static_cast<std::size_t>(b) * T_);
  }
  ++served_;
}

void DataLoader::sequential_batch(std::size_t i, int* inputs, int* targets) const {
  const std::size_t windows = tokens_->size() - static_cast<std::size_t>(T_);
  for (int b = 0; b < B_; ++b) {
    const std::size_t start = ((i * B_ + b) * static_cast<std::size_t>(T_)) % windows;
    fill_row(start, inputs + static_cast<std::size_t>(b) * T_, targets + static_cast<std::size_t>(b) * T_);
  }
}

}  // namespace scalelab
