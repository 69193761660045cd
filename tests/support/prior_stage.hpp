// The prior stage, always from the reference: tests of stage N compare the code under test
// (possibly a student's) with stage N-1 computed by the reference library. This header uses
// only standard types, so a test can include it whichever library it is built against; the
// implementation (prior_stage.cpp) is compiled against the reference (see scalelab_ref_api).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace prior {

struct ModelShape {
  int V, T, C, L, NH;
};

struct StepResult {
  double loss = 0;
  std::vector<float> grads;         // after forward + backward, ParamLayout order
  std::vector<float> params_after;  // after one AdamW step (default hyperparameters, lr 1e-3)
};

// Stage 00: one forward + backward over the whole batch (B,T), then one AdamW step.
StepResult stage00_step(const ModelShape& shape, std::uint64_t seed, const std::vector<int>& tokens,
                        const std::vector<int>& targets, int B, int T);
// Stage 01: the same batch as k micro-batches (k = 1 is stage 00).
StepResult stage01_step(const ModelShape& shape, std::uint64_t seed, const std::vector<int>& tokens,
                        const std::vector<int>& targets, int B, int T, int k);

// Stage 01 for several AdamW steps on the same batch (lr 1e-3, no clipping): the first step's
// gradients and parameters after it, and the parameters after `steps` steps.
struct StepsResult {
  double first_loss = 0;
  std::vector<float> first_grads, params_after_first, params_after;
};
StepsResult stage01_steps(const ModelShape& shape, std::uint64_t seed, const std::vector<int>& tokens,
                          const std::vector<int>& targets, int B, int T, int k, int steps);

// Stage 00's forward on the whole batch: the activations tensor parallelism must reproduce bit
// for bit (before any reduction reorders a sum), all (B,T,.) row-major.
struct ForwardSnapshot {
  double loss = 0;
  std::vector<float> encoded;  // (B,T,C)   the embeddings' output
  std::vector<float> ln1;      // (B,T,C)   block 0's ln_1 output
  std::vector<float> qkv;      // (B,T,3C)  block 0's c_attn output (column-parallel)
  std::vector<float> atty;     // (B,T,C)   block 0's attention output, before c_proj
  std::vector<float> probs;    // (B,T,V)   the softmax of the logits
};
ForwardSnapshot stage00_forward(const ModelShape& shape, std::uint64_t seed, const std::vector<int>& tokens,
                                const std::vector<int>& targets, int B, int T);

// Stage 00 trained for `steps` steps by the reference trainer; returns the loss per step and
// the final parameters. `data` is a text file (empty: the default corpus).
struct RunResult {
  std::vector<double> losses;
  std::vector<float> params;
};
RunResult stage00_run(const std::string& config, int steps, int batch, int seq_len, std::uint64_t seed,
                      const std::string& data);

}  // namespace prior
