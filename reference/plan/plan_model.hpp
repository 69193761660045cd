// The planner (scalelab plan): model shapes and how many parameters each rank of a layout holds.
// Shapes are given as numbers: the named configs of model/config.hpp and published shapes (GPT-2
// 124M to 1.5B, GPT-3 175B, and GPT blocks at the width and depth of Llama 7B and 70B). No
// weights are read; the planner needs only the dimensions.
//
// Parameters of this project's GPT (model/params.hpp), C channels, V vocabulary, T context:
//   one block  12 C^2 + 13 C    of which split by tensor parallelism (stage 06): 12 C^2 + 7 C
//                               (c_attn, attn.c_proj weight, c_fc, mlp.c_proj weight), and
//                               replicated: 6 C (ln_1, ln_2, the two c_proj biases)
//   wte        V C              tensor parallelism: ceil(V/t) C rows per rank (padded vocabulary)
//   wpe        T C              replicated
//   ln_f       2 C              replicated
// A pipeline rank (stage 05, p ranks, L/p blocks each, the first L mod p ranks one more) holds
// its blocks, wte and wpe on the first rank, ln_f and a copy of wte (the tied head) on the last.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace scalelab {

struct PlanModel {
  std::string name;    // "gpt2-124m", "mini", ...
  GPTConfig config;    // the shape
  std::string source;  // where the numbers come from, for the docs and the table
};

// A named config ("tiny", "mini", "gpt2") or a published shape ("gpt2-124m", "gpt2-350m",
// "gpt2-774m", "gpt2-1.5b", "gpt3-175b", "llama-7b-shape", "llama-70b-shape"); ConfigError
// naming --model and the accepted names otherwise.
PlanModel plan_model_by_name(const std::string& name);
std::vector<std::string> plan_model_names();

// Parameters of the whole model (psi).
std::size_t model_params(const GPTConfig& c);
// Parameters held by pipeline rank `stage` of `pp`, tensor-parallel rank (any) of `tp`.
std::size_t rank_params(const GPTConfig& c, int tp, int pp, int stage);
// Blocks held by pipeline rank `stage` of `pp` (the split rule above).
int stage_blocks(const GPTConfig& c, int pp, int stage);

}  // namespace scalelab
