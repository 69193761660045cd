// Model shapes (model/config.hpp): named configs with dimensions overridden by flags, the name
// that records the overrides, and one test per error message (each names its flag and the fix).
#include <catch2/catch.hpp>

#include <string>

#include "core/error.hpp"
#include "model/config.hpp"

using namespace scalelab;

namespace {

// The five dimensions as one string, so a failure shows the whole shape that came out.
std::string dims(const GPTConfig& c) {
  return "V=" + std::to_string(c.vocab_size) + " T=" + std::to_string(c.max_seq_len) +
         " C=" + std::to_string(c.channels) + " L=" + std::to_string(c.num_layers) +
         " NH=" + std::to_string(c.num_heads);
}

std::string error_of(const std::string& name, const ShapeOverrides& o) {
  try {
    gpt_config_from(name, o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("gpt_config_from without overrides is the named config, name included", "[config]") {
  for (const auto& name : gpt_config_names()) {
    const GPTConfig c = gpt_config_from(name, {});
    const GPTConfig named = gpt_config_by_name(name);
    CHECK(c.name == name);
    CHECK(dims(c) == dims(named));
  }
  // An override equal to the config's own value is no override: the name stays plain.
  ShapeOverrides same;
  same.channels = 256;
  same.num_heads = 4;
  CHECK(gpt_config_from("mini", same).name == "mini");
}

TEST_CASE("overridden dimensions change the shape and are listed in the name", "[config]") {
  ShapeOverrides o;
  o.num_layers = 8;
  o.num_heads = 8;
  const GPTConfig deep = gpt_config_from("mini", o);
  CHECK(dims(deep) == "V=256 T=256 C=256 L=8 NH=8");
  CHECK(deep.name == "mini[L=8,NH=8]");
  CHECK(deep.head_size() == 32);

  const ShapeOverrides all{.vocab_size = 512, .max_seq_len = 128, .channels = 96, .num_layers = 3, .num_heads = 6};
  const GPTConfig c = gpt_config_from("tiny", all);
  CHECK(dims(c) == "V=512 T=128 C=96 L=3 NH=6");
  CHECK(c.name == "tiny[V=512,T=128,C=96,L=3,NH=6]");

  // The limits themselves are accepted.
  const ShapeOverrides edge{.vocab_size = 65536, .max_seq_len = 1, .channels = 0, .num_layers = 1, .num_heads = 1};
  CHECK(dims(gpt_config_from("tiny", edge)) == "V=65536 T=1 C=32 L=1 NH=1");
}

TEST_CASE("gpt_config_flags gives the flags that rebuild a config", "[config]") {
  CHECK(gpt_config_flags(gpt_config_by_name("gpt2")) == "--config gpt2");
  const ShapeOverrides o{.vocab_size = 0, .max_seq_len = 512, .channels = 0, .num_layers = 8, .num_heads = 8};
  CHECK(gpt_config_flags(gpt_config_from("mini", o)) == "--config mini --context 512 --layers 8 --heads 8");
  // A shape that is no named config keeps its name (there are no flags that rebuild it).
  CHECK(gpt_config_flags(gpt_config_of_shape(11, 6, 8, 2, 2)) == "--config custom[V=11,T=6,C=8,L=2,NH=2]");
}

TEST_CASE("gpt_config_of_shape builds and validates a shape of its own", "[config]") {
  const GPTConfig c = gpt_config_of_shape(11, 6, 8, 2, 2);
  CHECK(dims(c) == "V=11 T=6 C=8 L=2 NH=2");
  CHECK(c.name == "custom[V=11,T=6,C=8,L=2,NH=2]");
  CHECK(gpt_config_of_shape(64, 16, 32, 2, 4, "test").name == "test");
  CHECK_THROWS_WITH(
      gpt_config_of_shape(11, 6, 8, 2, 3),
      "num_heads: channels (8) is not divisible by num_heads (3); choose num_heads that divides channels");
}

TEST_CASE("shape override errors name the flag, the limit and the fix", "[config]") {
  CHECK(
      error_of("mini", {.vocab_size = -1}) ==
      "--vocab-size: must be positive, got -1; pass a positive value, or leave the flag out to keep config mini's 256");
  CHECK(error_of("mini", {.vocab_size = 1}) ==
        "--vocab-size: must be in [2, 65536] (tokens are uint16), got 1; choose a value in that range");
  CHECK(error_of("mini", {.vocab_size = 65537}) ==
        "--vocab-size: must be in [2, 65536] (tokens are uint16), got 65537; choose a value in that range");
  CHECK(error_of("mini", {.max_seq_len = 65537}) ==
        "--context: must be in [1, 65536] (B*T rows are an int), got 65537; choose a value in that range");
  CHECK(error_of("gpt2", {.max_seq_len = -4}) ==
        "--context: must be positive, got -4; pass a positive value, or leave the flag out to keep config gpt2's 1024");
  CHECK(error_of("mini", {.channels = 65537}) ==
        "--channels: must be in [1, 65536] (3*C and 4*C are ints), got 65537; choose a value in that range");
  CHECK(error_of("mini", {.num_layers = 1025}) ==
        "--layers: must be in [1, 1024] (a larger depth is a typo), got 1025; choose a value in that range");
  CHECK(error_of("mini", {.num_heads = 65537}) ==
        "--heads: must be in [1, 65536] (heads must divide channels), got 65537; choose a value in that range");
  CHECK(error_of("mini", {.num_heads = 3}) ==
        "--heads: the 3 heads do not divide the 256 channels of config mini (each head gets C/NH channels); choose "
        "--heads among the divisors of 256: 1, 2, 4, 8, 16, 32, 64, 128, ...");
  CHECK(error_of("mini", {.channels = 90}) ==
        "--channels: the 4 heads of config mini do not divide the 90 channels (each head gets C/NH channels); choose "
        "--heads among the divisors of 90: 1, 2, 3, 5, 6, 9, 10, 15, ..., or --channels a multiple of 4");
  CHECK(error_of("tiny", {.channels = 12, .num_heads = 8}) ==
        "--heads: the 8 heads do not divide the 12 channels (each head gets C/NH channels); choose --heads among "
        "the divisors of 12: 1, 2, 3, 4, 6, 12, or --channels a multiple of 8");
  CHECK(error_of("gpt3", {.num_layers = 8}) == "config: unknown model config 'gpt3'; choose one of tiny, mini, gpt2");
}
