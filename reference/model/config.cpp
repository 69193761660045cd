// The named model configs, shapes overridden from the command line, and their validation.
#include "model/config.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace scalelab {

namespace {

// One dimension: its field, the flag that overrides it, and the letter used in names.
struct Dim {
  int GPTConfig::*field;
  int ShapeOverrides::*override;
  const char* flag;
  const char* letter;
  int min, max;
};

constexpr Dim kDims[] = {
    {&GPTConfig::vocab_size, &ShapeOverrides::vocab_size, "--vocab-size", "V", 2, kMaxVocabSize},
    {&GPTConfig::max_seq_len, &ShapeOverrides::max_seq_len, "--context", "T", 1, kMaxSeqLen},
    {&GPTConfig::channels, &ShapeOverrides::channels, "--channels", "C", 1, kMaxChannels},
    {&GPTConfig::num_layers, &ShapeOverrides::num_layers, "--layers", "L", 1, kMaxLayers},
    {&GPTConfig::num_heads, &ShapeOverrides::num_heads, "--heads", "NH", 1, kMaxChannels},
};

// Why each limit exists, for the messages.
const char* limit_reason(const Dim& d) {
  const std::string letter = d.letter;
  if (letter == "V") return "tokens are uint16";
  if (letter == "T") return "B*T rows are an int";
  if (letter == "C") return "3*C and 4*C are ints";
  if (letter == "L") return "a larger depth is a typo";
  return "heads must divide channels";
}

// "1, 2, 4, 8, 16, ..." : the head counts that divide C, the first few, for the fix.
std::string head_counts_for(int C) {
  std::string out;
  int shown = 0;
  for (int h = 1; h <= C; ++h) {
    if (C % h != 0) continue;
    if (shown == 8) return out + ", ...";
    if (shown++) out += ", ";
    out += std::to_string(h);
  }
  return out;
}

// The name of `c` built from the named config `base`: base's name, plus the differing dimensions.
std::string name_with_overrides(const GPTConfig& base, const GPTConfig& c) {
  std::string diff;
  for (const Dim& d : kDims) {
    if (c.*d.field == base.*d.field) continue;
    if (!diff.empty()) diff += ',';
    // Appends one piece at a time: GCC 12 warns (-Wrestrict, a false positive) on "lit" + string&&.
    diff += d.letter;
    diff += '=';
    diff += std::to_string(c.*d.field);
  }
  return diff.empty() ? base.name : base.name + "[" + diff + "]";
}

}  // namespace

void GPTConfig::validate() const {
  require(vocab_size >= 2 && vocab_size <= kMaxVocabSize, "vocab_size",
          "must be in [2, " + std::to_string(kMaxVocabSize) + "] (tokens are uint16)",
          "choose a vocabulary that fits 16-bit tokens");
  require(max_seq_len >= 1 && max_seq_len <= kMaxSeqLen, "max_seq_len",
          "must be in [1, " + std::to_string(kMaxSeqLen) + "]", "set a sequence length in that range");
  require(channels >= 1 && num_heads >= 1 && num_layers >= 1, "channels/num_heads/num_layers", "must all be at least 1",
          "fix the model shape");
  require(channels <= kMaxChannels && num_layers <= kMaxLayers, "channels/num_layers",
          "must be at most " + std::to_string(kMaxChannels) + " and " + std::to_string(kMaxLayers),
          "fix the model shape");
  require(channels % num_heads == 0, "num_heads",
          "channels (" + std::to_string(channels) + ") is not divisible by num_heads (" + std::to_string(num_heads) +
              ")",
          "choose num_heads that divides channels");
}

GPTConfig gpt_config_by_name(const std::string& name) {
  // gpt_config_of_shape(V, T, C, L, NH, name)
  if (name == "tiny") return gpt_config_of_shape(64, 16, 32, 2, 4, name);
  if (name == "mini") return gpt_config_of_shape(256, 256, 256, 4, 4, name);
  if (name == "gpt2") return gpt_config_of_shape(50257, 1024, 768, 12, 12, name);
  std::string known;
  for (const auto& n : gpt_config_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("config: unknown model config '" + name + "'; choose one of " + known);
}

std::vector<std::string> gpt_config_names() { return {"tiny", "mini", "gpt2"}; }

GPTConfig gpt_config_from(const std::string& name, const ShapeOverrides& overrides) {
  const GPTConfig base = gpt_config_by_name(name);
  GPTConfig c = base;
  for (const Dim& d : kDims) {
    const int v = overrides.*d.override;
    require(v >= 0, d.flag, "must be positive, got " + std::to_string(v),
            "pass a positive value, or leave the flag out to keep config " + name + "'s " +
                std::to_string(base.*d.field));
    if (v == 0) continue;
    require(v >= d.min && v <= d.max, d.flag,
            "must be in [" + std::to_string(d.min) + ", " + std::to_string(d.max) + "] (" + limit_reason(d) +
                "), got " + std::to_string(v),
            "choose a value in that range");
    c.*d.field = v;
  }
  const bool heads_given = overrides.num_heads != 0, channels_given = overrides.channels != 0;
  require(c.channels % c.num_heads == 0, heads_given ? "--heads" : "--channels",
          "the " + std::to_string(c.num_heads) + " heads" + (heads_given ? "" : " of config " + name) +
              " do not divide the " + std::to_string(c.channels) + " channels" +
              (channels_given ? "" : " of config " + name) + " (each head gets C/NH channels)",
          "choose --heads among the divisors of " + std::to_string(c.channels) + ": " + head_counts_for(c.channels) +
              (channels_given ? ", or --channels a multiple of " + std::to_string(c.num_heads) : ""));
  c.name = name_with_overrides(base, c);
  c.validate();
  return c;
}

std::string gpt_config_flags(const GPTConfig& config) {
  const std::string base_name = config.name.substr(0, config.name.find('['));
  const auto names = gpt_config_names();
  if (std::find(names.begin(), names.end(), base_name) == names.end()) return "--config " + config.name;
  const GPTConfig base = gpt_config_by_name(base_name);
  std::string out = "--config " + base_name;
  for (const Dim& d : kDims) {
    if (config.*d.field == base.*d.field) continue;
    out += ' ';
    out += d.flag;
    out += ' ';
    out += std::to_string(config.*d.field);
  }
  return out;
}

GPTConfig gpt_config_of_shape(int V, int T, int C, int L, int NH, const std::string& name) {
  GPTConfig c;
  c.vocab_size = V;
  c.max_seq_len = T;
  c.channels = C;
  c.num_layers = L;
  c.num_heads = NH;
  c.name = !name.empty() ? name
                         : "custom[V=" + std::to_string(V) + ",T=" + std::to_string(T) + ",C=" + std::to_string(C) +
                               ",L=" + std::to_string(L) + ",NH=" + std::to_string(NH) + "]";
  c.validate();
  return c;
}

}  // namespace scalelab
