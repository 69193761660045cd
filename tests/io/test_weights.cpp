// Model weights as safetensors with nanoGPT names: bitwise round trip through a GPT, and every
// mismatch (missing, extra, wrong shape, wrong dtype, untied LM head) named in the message.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "compare.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/gpt.hpp"
#include "temp_files.hpp"

using namespace scalelab;
using Catch::Contains;
using scalelab_test::TempDir;

namespace {

// The tensors of a weights file for `config`, with deterministic values, as TensorRefs into `store`.
std::vector<TensorRef> weight_tensors(const GPTConfig& config, std::vector<float>& store) {
  const ParamLayout layout(config);
  store.resize(layout.num_params());
  for (std::size_t i = 0; i < store.size(); ++i) store[i] = 0.001f * static_cast<float>(i % 997);
  std::vector<TensorRef> out;
  for (const auto& t : layout.tensors()) out.push_back({t.name, "F32", t.shape, store.data() + t.offset});
  return out;
}

}  // namespace

TEST_CASE("weights round trip through save_weights/load_weights is bitwise", "[io][weights]") {
  TempDir dir;
  const GPTConfig config = gpt_config_by_name("tiny");
  GPT a(config, nullptr), b(config, nullptr);
  a.init_weights(7);
  save_weights(dir.file("w.safetensors"), a.layout(), a.params());
  load_weights(dir.file("w.safetensors"), b.layout(), b.params());
  CHECK_MATCH(scalelab_test::compare_bitwise("params", b.params(), a.params(), a.num_params()));

  // The config form records the config in the metadata and loads the same bytes.
  GPT c(config, nullptr);
  save_weights(dir.file("wc.safetensors"), config, a.params());
  load_weights(dir.file("wc.safetensors"), config, c.params());
  CHECK_MATCH(scalelab_test::compare_bitwise("params", c.params(), a.params(), a.num_params()));
  const SafetensorsFile f(dir.file("wc.safetensors"));
  CHECK(f.metadata().at("config") == "tiny");
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.entries().size() == a.layout().tensors().size());
  CHECK(f.entry("transformer.h.1.attn.c_attn.weight").shape == std::vector<std::size_t>{96, 32});
}

TEST_CASE("weights of an overridden shape round-trip and record the overrides", "[io][weights]") {
  TempDir dir;
  const GPTConfig config = gpt_config_from("tiny", {.channels = 48, .num_layers = 3});
  GPT a(config, nullptr), b(config, nullptr);
  a.init_weights(7);
  save_weights(dir.file("w.safetensors"), config, a.params());
  load_weights(dir.file("w.safetensors"), config, b.params());
  CHECK_MATCH(scalelab_test::compare_bitwise("params", b.params(), a.params(), a.num_params()));
  const SafetensorsFile f(dir.file("w.safetensors"));
  CHECK(f.metadata().at("config") == "tiny[C=48,L=3]");
  CHECK(f.metadata().at("channels") == "48");
  CHECK(f.entry("transformer.h.2.mlp.c_fc.weight").shape == std::vector<std::size_t>{192, 48});
  // Loading into the plain named config names the file's shape.
  std::vector<float> tiny(ParamLayout(gpt_config_by_name("tiny")).num_params());
  CHECK_THROWS_WITH(load_weights(dir.file("w.safetensors"), gpt_config_by_name("tiny"), tiny.data()),
                    Contains("(the file was saved for config 'tiny[C=48,L=3]')"));
}

TEST_CASE("weights with nanoGPT's duplicate lm_head.weight load when it equals the token embedding", "[io][weights]") {
  TempDir dir;
  const std::string path = dir.file("lm_head.safetensors");
  const GPTConfig config = gpt_config_by_name("tiny");
  const ParamLayout layout(config);
  std::vector<float> store;
  auto tensors = weight_tensors(config, store);
  const auto& wte = layout.find("transformer.wte.weight");
  std::vector<float> head(store.begin() + static_cast<std::ptrdiff_t>(wte.offset),
                          store.begin() + static_cast<std::ptrdiff_t>(wte.offset + wte.numel));
  tensors.push_back({"lm_head.weight", "F32", wte.shape, head.data()});
  write_safetensors(path, tensors);
  std::vector<float> loaded(layout.num_params());
  load_weights(path, config, loaded.data());
  CHECK_MATCH(scalelab_test::compare_bitwise("params", loaded.data(), store.data(), store.size()));

  head[5] += 1.0f;  // an untied head cannot be represented by this model
  tensors.back().data = head.data();
  write_safetensors(path, tensors);
  CHECK_THROWS_WITH(load_weights(path, config, loaded.data()),
                    Contains("tensor lm_head.weight differs from transformer.wte.weight"));
}

TEST_CASE("load_weights rejects mismatched files naming the tensor, the file and the fix", "[io][weights]") {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  const GPTConfig tiny = gpt_config_by_name("tiny");
  std::vector<float> store, dest(ParamLayout(tiny).num_params());
  auto tensors = weight_tensors(tiny, store);

  SECTION("missing tensor") {
    tensors.erase(std::find_if(tensors.begin(), tensors.end(),
                               [](const TensorRef& t) { return t.name == "transformer.h.0.attn.c_proj.weight"; }));
    write_safetensors(path, tensors);
    CHECK_THROWS_AS(load_weights(path, tiny, dest.data()), ConfigError);
    CHECK_THROWS_WITH(load_weights(path, tiny, dest.data()),
                      Contains("weights '" + path +
                               "': tensor transformer.h.0.attn.c_proj.weight is missing, but "
                               "config 'tiny' needs it; load weights saved for the same config"));
  }
  SECTION("extra tensor") {
    const float extra[4] = {};
    tensors.push_back({"transformer.h.0.attn.bias", "F32", {2, 2}, extra});
    write_safetensors(path, tensors);
    CHECK_THROWS_WITH(load_weights(path, tiny, dest.data()),
                      Contains("unexpected tensor transformer.h.0.attn.bias, which config 'tiny' does not have"));
  }
  SECTION("wrong shape") {
    GPTConfig wide = tiny;
    wide.name = "wide";
    wide.channels = 64;
    std::vector<float> wide_store(ParamLayout(wide).num_params(), 0.5f);
    save_weights(path, wide, wide_store.data());
    CHECK_THROWS_WITH(load_weights(path, tiny, dest.data()),
                      Contains("weights '" + path +
                               "': tensor transformer.wte.weight has shape [64, 64] but config "
                               "'tiny' needs [64, 32] (the file was saved for config 'wide'); load weights saved for "
                               "the same config"));
  }
  SECTION("wrong shape of one layer tensor, layout form of the API") {
    const std::vector<float> ln(64, 1.0f);
    tensors[2] = {"transformer.h.0.ln_1.weight", "F32", {64}, ln.data()};
    write_safetensors(path, tensors);
    CHECK_THROWS_WITH(load_weights(path, ParamLayout(tiny), dest.data()),
                      Contains("weights '" + path +
                               "': tensor transformer.h.0.ln_1.weight has shape [64] but the "
                               "model needs [32]; load weights saved for the same config"));
  }
  SECTION("more layers than the config") {
    GPTConfig deep = tiny;
    deep.name = "deep";
    deep.num_layers = 3;
    std::vector<float> deep_store(ParamLayout(deep).num_params(), 0.5f);
    save_weights(path, deep, deep_store.data());
    CHECK_THROWS_WITH(load_weights(path, tiny, dest.data()),
                      Contains("unexpected tensor transformer.h.2.") && Contains("saved for config 'deep'"));
  }
  SECTION("wrong dtype") {
    const std::vector<double> ln(32, 1.0);
    tensors[2] = {"transformer.h.0.ln_1.weight", "F64", {32}, ln.data()};
    write_safetensors(path, tensors);
    CHECK_THROWS_WITH(load_weights(path, tiny, dest.data()),
                      Contains("tensor transformer.h.0.ln_1.weight has dtype F64 but scalelab weights are F32") &&
                          Contains("convert the weights to float32"));
  }
  SECTION("a damaged file names itself as weights") {
    scalelab_test::write_bytes(path, "abc");
    CHECK_THROWS_WITH(load_weights(path, tiny, dest.data()), Contains("weights '" + path + "': the file is only 3"));
  }
  // Nothing is written into the destination when loading fails.
  CHECK(std::all_of(dest.begin(), dest.end(), [](float v) { return v == 0.0f; }));
}
