// Model shapes for the planner, and parameters per rank (closed forms; tests/plan compares them
// with the layouts the stages build).
#include "plan/plan_model.hpp"

#include "core/error.hpp"

namespace scalelab {

namespace {

struct Published {
  const char* name;
  int V, T, C, L, NH;
  const char* source;
};

// GPT-2 (Radford et al. 2019, the released checkpoints' hyper-parameters), GPT-3 175B (Brown et
// al. 2020, table 2.1), Llama 2 7B and 70B width, depth, heads and context (Touvron et al. 2023):
// the last two with this project's GPT block (4C MLP, LayerNorm, biases), not Llama's SwiGLU and
// grouped-query attention, so their parameter counts differ from Llama's by a few percent.
constexpr Published kPublished[] = {
    {"gpt2-124m", 50257, 1024, 768, 12, 12, "GPT-2 small (Radford et al. 2019)"},
    {"gpt2-350m", 50257, 1024, 1024, 24, 16, "GPT-2 medium (Radford et al. 2019)"},
    {"gpt2-774m", 50257, 1024, 1280, 36, 20, "GPT-2 large (Radford et al. 2019)"},
    {"gpt2-1.5b", 50257, 1024, 1600, 48, 25, "GPT-2 XL (Radford et al. 2019)"},
    {"gpt3-175b", 50257, 2048, 12288, 96, 96, "GPT-3 175B (Brown et al. 2020, table 2.1)"},
    {"llama-7b-shape", 32000, 4096, 4096, 32, 32, "Llama 2 7B's width, depth, heads (GPT block)"},
    {"llama-70b-shape", 32000, 4096, 8192, 80, 64, "Llama 2 70B's width, depth, heads (GPT block)"},
};

}  // namespace

std::vector<std::string> plan_model_names() {
  std::vector<std::string> names = gpt_config_names();
  for (const Published& p : kPublished) names.emplace_back(p.name);
  return names;
}

PlanModel plan_model_by_name(const std::string& name) {
  for (const Published& p : kPublished)
    if (name == p.name) return {name, gpt_config_of_shape(p.V, p.T, p.C, p.L, p.NH, name), p.source};
  for (const std::string& n : gpt_config_names())
    if (name == n) return {name, gpt_config_by_name(name), "scalelab's named config"};
  std::string known;
  for (const std::string& n : plan_model_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("model: unknown model '" + name + "'; use one of " + known +
                    ", or give the shape with --vocab-size --context --channels --layers --heads");
}

std::size_t model_params(const GPTConfig& c) { return rank_params(c, 1, 1, 0); }

int stage_blocks(const GPTConfig& c, int pp, int stage) {
  return c.num_layers / pp + (stage < c.num_layers % pp ? 1 : 0);
}

std::size_t rank_params(const GPTConfig& c, int tp, int pp, int stage) {
  const std::size_t C = c.channels, t = static_cast<std::size_t>(tp);
  const std::size_t split = 12 * C * C + 7 * C, replicated = 6 * C;
  const std::size_t block = split / t + replicated;
  const std::size_t wte = (static_cast<std::size_t>(c.vocab_size) + t - 1) / t * C;
  std::size_t n = static_cast<std::size_t>(stage_blocks(c, pp, stage)) * block;
  if (stage == 0) n += wte + static_cast<std::size_t>(c.max_seq_len) * C;  // wte, wpe
  if (stage == pp - 1) n += (pp > 1 ? wte : 0) + 2 * C;                    // the head's wte copy, ln_f
  return n;
}

}  // namespace scalelab
