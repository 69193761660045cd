// The named model configs and their validation.
#include "model/config.hpp"

#include "core/error.hpp"

namespace scalelab {

void GPTConfig::validate() const {
  require(vocab_size >= 2 && vocab_size <= 65536, "vocab_size", "must be in [2, 65536] (tokens are uint16)",
          "choose a vocabulary that fits 16-bit tokens");
  require(max_seq_len >= 1, "max_seq_len", "must be at least 1", "set a positive sequence length");
  require(channels >= 1 && num_heads >= 1 && num_layers >= 1, "channels/num_heads/num_layers",
          "must all be at least 1", "fix the model shape");
  require(channels % num_heads == 0, "num_heads",
          "channels (" + std::to_string(channels) + ") is not divisible by num_heads (" +
              std::to_string(num_heads) + ")",
          "choose num_heads that divides channels");
}

GPTConfig gpt_config_by_name(const std::string& name) {
  GPTConfig c;
  c.name = name;
  if (name == "tiny") {
    c.vocab_size = 64; c.max_seq_len = 16; c.channels = 32; c.num_layers = 2; c.num_heads = 4;
  } else if (name == "mini") {
    c.vocab_size = 256; c.max_seq_len = 256; c.channels = 256; c.num_layers = 4; c.num_heads = 4;
  } else if (name == "gpt2") {
    c.vocab_size = 50257; c.max_seq_len = 1024; c.channels = 768; c.num_layers = 12; c.num_heads = 12;
  } else {
    std::string known;
    for (const auto& n : gpt_config_names()) known += (known.empty() ? "" : ", ") + n;
    throw ConfigError("config: unknown model config '" + name + "'; choose one of " + known);
  }
  return c;
}

std::vector<std::string> gpt_config_names() { return {"tiny", "mini", "gpt2"}; }

}  // namespace scalelab
