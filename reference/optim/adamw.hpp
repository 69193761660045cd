// AdamW with PyTorch's semantics (torch.optim.AdamW, 1.13): bias-corrected moments and
// decoupled weight decay (p -= lr * wd * p before the Adam update), on the flat buffers.
#pragma once

#include <cstddef>

#include "core/memory.hpp"

namespace scalelab {

// Hyperparameters are doubles, like Python floats, and are rounded to float where PyTorch does.
struct AdamWConfig {
  double lr = 3e-4;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // PyTorch's default for AdamW
  double grad_clip = 0.0;      // global gradient-norm clipping; 0 turns it off
  // Throws ConfigError naming the bad hyperparameter.
  void validate() const;
};

class AdamW {
 public:
  // Allocates m and v (zero) for n parameters, counted as optimizer memory.
  AdamW(std::size_t n, const AdamWConfig& config, MemoryTracker* tracker);

  // One update of params (n) from grads (n); the step count goes up by one first.
  void step(float* params, const float* grads);
  // One update with a different learning rate (schedules).
  void step(float* params, const float* grads, double lr);
  // The same update in pieces, for callers that convert or shard gradients chunk by chunk:
  // begin_step() once, then update_range() over disjoint ranges that cover what this optimizer
  // owns. params/grads point at element `offset` of the flat buffers.
  void begin_step() { ++t_; }
  void update_range(float* params, const float* grads, std::size_t offset, std::size_t count, double lr);

  const AdamWConfig& config() const { return config_; }
  long step_count() const { return t_; }
  void set_step_count(long t) { t_ = t; }
  float* m() { return m_.data(); }
  float* v() { return v_.data(); }
  const float* m() const { return m_.data(); }
  const float* v() const { return v_.data(); }
  std::size_t size() const { return m_.size(); }

 private:
  AdamWConfig config_;
  Buffer<float> m_, v_;
  long t_ = 0;
};

// The L2 norm of all gradients together (accumulated in double).
double grad_norm(const float* grads, std::size_t n);
// PyTorch's clip_grad_norm_: if the norm exceeds max_norm, scale grads by max_norm/(norm+1e-6).
// Returns the norm before clipping.
double clip_grad_norm(float* grads, std::size_t n, double max_norm);
// The same scaling for a norm computed elsewhere (a pipeline's, over all its stages).
void clip_to_norm(float* grads, std::size_t n, double norm, double max_norm);

}  // namespace scalelab
