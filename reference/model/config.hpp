// Model shapes (every stage). One set of dimension letters is used everywhere in scalelab:
//   B batch, T sequence length, C channels, L layers, NH heads, hs = C/NH head size, V vocab.
// A shape is a named config ("tiny", "mini", "gpt2"), optionally with some dimensions
// overridden from the command line (--vocab-size, --context, --channels, --layers, --heads).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace scalelab {

// Upper limits of a shape. Tokens are uint16 (V <= 65536). The layers index with int where a
// product stays small: 3*C and 4*C (the qkv and MLP widths), B*T rows (B <= 4096 in the trainer,
// so T <= 65536 keeps B*T below 2^31); every larger product (B*T*V logits, B*NH*T*T attention,
// parameter counts) is a size_t. L is capped only to catch typos before allocating.
inline constexpr int kMaxVocabSize = 65536;
inline constexpr int kMaxSeqLen = 65536;
inline constexpr int kMaxChannels = 65536;
inline constexpr int kMaxLayers = 1024;

struct GPTConfig {
  // "mini" for a named config; "mini[L=8,NH=8]" with overridden dimensions (see gpt_config_from).
  // Checkpoints, weights files and the DDP replica check record it next to the dimensions.
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

// Dimensions to change in a named config; 0 keeps the config's value.
struct ShapeOverrides {
  int vocab_size = 0;   // --vocab-size
  int max_seq_len = 0;  // --context
  int channels = 0;     // --channels
  int num_layers = 0;   // --layers
  int num_heads = 0;    // --heads
};

// The named config with `overrides` applied and validated; ConfigError names the flag and the
// fix. The name stays `name` when no dimension differs from the named config's; otherwise it
// lists the ones that do, in the order V, T, C, L, NH: "mini[L=8,NH=8]".
GPTConfig gpt_config_from(const std::string& name, const ShapeOverrides& overrides);

// The command-line flags that rebuild `config` ("--config mini --layers 8 --heads 8"), for
// messages that tell the user how to resume; "--config <name>" for a name without overrides.
std::string gpt_config_flags(const GPTConfig& config);

// A config of exactly this shape (validated), for tests and benchmarks that need a shape of
// their own; named "custom[V=..,T=..,C=..,L=..,NH=..]" unless `name` is given.
GPTConfig gpt_config_of_shape(int V, int T, int C, int L, int NH, const std::string& name = "");

}  // namespace scalelab
