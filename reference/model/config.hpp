// Model shapes. One set of dimension letters is used everywhere in scalelab:
//   B batch, T sequence length, C channels, L layers, NH heads, hs = C/NH head size, V vocab.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace scalelab {

struct GPTConfig {
  std::string name;
  int vocab_size = 256;   // V
  int max_seq_len = 256;  // T (the longest sequence; a batch may use a shorter T)
  int channels = 256;     // C
  int num_layers = 4;     // L
  int num_heads = 4;      // NH

  int head_size() const { return channels / num_heads; }
  // Throws ConfigError naming the bad field when the shape is inconsistent.
  void validate() const;
};

// Named configs: "tiny" (tests), "mini" (demo, benchmarks), "gpt2" (the 124M shape, for GPUs).
GPTConfig gpt_config_by_name(const std::string& name);
std::vector<std::string> gpt_config_names();

}  // namespace scalelab
