// A fixed random batch and a small model shape shared by the stage tests.
#pragma once

#include <vector>

#include "core/rng.hpp"
#include "model/config.hpp"
#include "prior_stage.hpp"

namespace scalelab_test {

inline scalelab::GPTConfig config_from(const prior::ModelShape& s) {
  return scalelab::gpt_config_of_shape(s.V, s.T, s.C, s.L, s.NH, "test");
}

struct Batch {
  std::vector<int> tokens, targets;
};

inline Batch random_batch(int V, int B, int T, std::uint64_t seed) {
  scalelab::Rng rng(seed);
  Batch b;
  for (int i = 0; i < B * T; ++i) {
    b.tokens.push_back(static_cast<int>(rng.below(V)));
    b.targets.push_back(static_cast<int>(rng.below(V)));
  }
  return b;
}

}  // namespace scalelab_test
