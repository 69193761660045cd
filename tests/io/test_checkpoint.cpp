// Training checkpoints: every field survives a round trip exactly, and every way a checkpoint can
// be wrong for the run (format, missing tensor, sizes, another config, bad metadata) is named.
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>

#include "compare.hpp"
#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "model/params.hpp"
#include "temp_files.hpp"

using namespace scalelab;
using Catch::Contains;
using scalelab_test::TempDir;

namespace {

TrainCheckpoint make_checkpoint(const GPTConfig& config) {
  TrainCheckpoint ck;
  ck.config = config;
  const std::size_t n = ParamLayout(config).num_params();
  for (std::size_t i = 0; i < n; ++i) {
    ck.params.push_back(0.01f * static_cast<float>(i % 101) - 0.5f);
    ck.adam_m.push_back(1e-3f * static_cast<float>(i % 7));
    ck.adam_v.push_back(1e-7f * static_cast<float>(i % 13));
  }
  ck.params[3] = -0.0f;  // bitwise: the sign of zero must survive
  ck.step = 1234;
  ck.data_rng_state = std::numeric_limits<std::uint64_t>::max() - 5;  // needs all 64 bits
  ck.batches_served = 98765432109ull;
  ck.loss_scale = 1.0 / 3.0;  // needs the shortest round-trip decimal, not 6 digits
  ck.loss_scale_clean_steps = 17;
  ck.lr_schedule = LrSchedule::parse("cosine", 7, 3000, 0.1 / 3);  // 0.1/3: needs the round-trip decimal
  ck.total_steps = 5000;
  return ck;
}

// Rewrites checkpoint tensors and metadata so tests can damage one thing at a time.
void write_edited(const std::string& path, const std::map<std::string, std::string>& md,
                  const std::vector<TensorRef>& tensors) {
  write_safetensors(path, tensors, md);
}

std::map<std::string, std::string> metadata_of(const std::string& path) { return SafetensorsFile(path).metadata(); }

// The three tensors of `ck` as a checkpoint stores them, for write_edited.
std::vector<TensorRef> tensors_of(const TrainCheckpoint& ck) {
  const std::size_t n = ck.params.size();
  return {{"params", "F32", {n}, ck.params.data()},
          {"adam.m", "F32", {n}, ck.adam_m.data()},
          {"adam.v", "F32", {n}, ck.adam_v.data()}};
}

}  // namespace

TEST_CASE("checkpoint round trip restores every field exactly", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  const GPTConfig tiny = gpt_config_by_name("tiny");
  const TrainCheckpoint ck = make_checkpoint(tiny);
  save_checkpoint(path, ck);
  const TrainCheckpoint r = load_checkpoint(path, &tiny);
  CHECK(r.config.name == "tiny");
  CHECK(r.config.vocab_size == tiny.vocab_size);
  CHECK(r.config.max_seq_len == tiny.max_seq_len);
  CHECK(r.config.channels == tiny.channels);
  CHECK(r.config.num_layers == tiny.num_layers);
  CHECK(r.config.num_heads == tiny.num_heads);
  CHECK(r.step == ck.step);
  CHECK(r.data_rng_state == ck.data_rng_state);
  CHECK(r.batches_served == ck.batches_served);
  CHECK(r.loss_scale == ck.loss_scale);
  CHECK(r.loss_scale_clean_steps == ck.loss_scale_clean_steps);
  CHECK(r.lr_schedule.kind == LrSchedule::Kind::kCosine);
  CHECK(r.lr_schedule.warmup_steps == 7);
  CHECK(r.lr_schedule.decay_steps == 3000);
  CHECK(r.lr_schedule.min_lr_fraction == 0.1 / 3);
  CHECK(r.total_steps == 5000);
  REQUIRE(r.params.size() == ck.params.size());
  CHECK_MATCH(scalelab_test::compare_bitwise("params", r.params.data(), ck.params.data(), ck.params.size()));
  CHECK_MATCH(scalelab_test::compare_bitwise("adam.m", r.adam_m.data(), ck.adam_m.data(), ck.adam_m.size()));
  CHECK_MATCH(scalelab_test::compare_bitwise("adam.v", r.adam_v.data(), ck.adam_v.data(), ck.adam_v.size()));

  // Readable by any safetensors reader: the metadata are decimal strings.
  const auto md = metadata_of(path);
  CHECK(md.at("format") == "scalelab-checkpoint-1");
  CHECK(md.at("step") == "1234");
  CHECK(md.at("data_rng_state") == "18446744073709551610");
  CHECK(md.at("batches_served") == "98765432109");
  CHECK(md.at("loss_scale") == "0.3333333333333333");
  CHECK(md.at("lr_schedule") == "cosine");
  CHECK(md.at("min_lr_fraction") == "0.03333333333333333");
  CHECK(md.at("total_steps") == "5000");

  // Without `expected` any valid config loads.
  CHECK(load_checkpoint(path).config.name == "tiny");
}

TEST_CASE("checkpoint of an overridden shape round-trips, and its mismatch names the flags", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  const GPTConfig deep = gpt_config_from("tiny", {.num_layers = 3, .num_heads = 2});
  REQUIRE(deep.name == "tiny[L=3,NH=2]");
  save_checkpoint(path, make_checkpoint(deep));
  const TrainCheckpoint r = load_checkpoint(path, &deep);
  CHECK(r.config.name == "tiny[L=3,NH=2]");
  CHECK(r.config.num_layers == 3);
  CHECK(r.config.num_heads == 2);
  CHECK(r.params.size() == ParamLayout(deep).num_params());
  const GPTConfig tiny = gpt_config_by_name("tiny");
  CHECK_THROWS_WITH(load_checkpoint(path, &tiny),
                    Contains("was saved for config tiny[L=3,NH=2] (num_layers=3) but the run uses config tiny "
                             "(num_layers=2); resume with --config tiny --layers 3 --heads 2, or start a new run"));
}

TEST_CASE("checkpoint load reads older files and rejects bad ones with a clear message", "[io][checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("ck.safetensors");
  const GPTConfig tiny = gpt_config_by_name("tiny");
  const TrainCheckpoint ck = make_checkpoint(tiny);
  save_checkpoint(path, ck);
  auto md = metadata_of(path);
  const std::size_t n = ck.params.size();
  std::vector<TensorRef> tensors = tensors_of(ck);

  SECTION("checkpoint written before the lr schedule was stored: loads as constant") {
    for (const char* key : {"lr_schedule", "warmup_steps", "decay_steps", "min_lr_fraction", "total_steps"})
      md.erase(key);
    write_edited(path, md, tensors);
    const TrainCheckpoint r = load_checkpoint(path, &tiny);
    CHECK(r.lr_schedule == LrSchedule{});
    CHECK(r.lr_schedule.kind == LrSchedule::Kind::kConstant);
    CHECK(r.total_steps == 0);
    CHECK(r.step == ck.step);
  }
  SECTION("checkpoint for another config") {
    const GPTConfig mini = gpt_config_by_name("mini");
    CHECK_THROWS_AS(load_checkpoint(path, &mini), ConfigError);
    CHECK_THROWS_WITH(load_checkpoint(path, &mini),
                      Contains("checkpoint '" + path +
                               "': was saved for config tiny (vocab_size=64) but the run uses "
                               "config mini (vocab_size=256); resume with --config tiny"));
    GPTConfig heads = tiny;
    heads.name = "tiny8";
    heads.num_heads = 8;
    CHECK_THROWS_WITH(load_checkpoint(path, &heads),
                      Contains("(num_heads=4) but the run uses config tiny8 (num_heads=8)"));
  }
  SECTION("weights file instead of a checkpoint") {
    save_weights(path, tiny, ck.params.data());
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny), Contains("its format is 'pt' but this version reads") &&
                                                        Contains("model weights alone are loaded with load_weights"));
  }
  SECTION("no format metadata") {
    md.erase("format");
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny),
                      Contains("the file has no \"format\" metadata, so it is not a scalelab training checkpoint"));
  }
  SECTION("wrong format") {
    md["format"] = "scalelab-checkpoint-0";
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny),
                      Contains("its format is 'scalelab-checkpoint-0' but this version reads 'scalelab-checkpoint-1'"));
  }
  SECTION("missing tensor") {
    tensors.pop_back();
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny), Contains("tensor 'adam.v' is missing"));
  }
  SECTION("extra tensor") {
    const float x = 1;
    tensors.push_back({"adam.w", "F32", {1}, &x});
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny), Contains("unexpected tensor 'adam.w'"));
  }
  SECTION("tensor size not matching the config") {
    tensors[1].shape = {n - 1};
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny),
                      Contains("tensor 'adam.m' is F32 with " + std::to_string(n - 1) + " values but config tiny") &&
                          Contains("needs F32 with " + std::to_string(n)));
  }
  SECTION("tensor dtype not F32") {
    std::vector<double> wide(ck.params.begin(), ck.params.end());
    tensors[0] = {"params", "F64", {n}, wide.data()};
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny), Contains("tensor 'params' is F64 with"));
  }
  SECTION("config fields that disagree with the tensors") {
    md["channels"] = "64";
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path), Contains("tensor 'params' is F32 with " + std::to_string(n) +
                                                      " values but config tiny (V=64 T=16 C=64 L=2 NH=4)"));
  }
  SECTION("missing metadata field") {
    md.erase("data_rng_state");
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny), Contains("metadata field \"data_rng_state\" is missing"));
  }
  SECTION("metadata field that is not a number") {
    md["step"] = "12abc";
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny),
                      Contains("metadata field \"step\" = '12abc' is not a valid number"));
    md["step"] = "-3";
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny), Contains("negative or not finite"));
  }
  SECTION("damaged lr schedule") {
    md["lr_schedule"] = "linear";
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny),
                      Contains("checkpoint '" + path +
                               "': its lr schedule is invalid (--lr-schedule: unknown schedule "
                               "'linear'; choose constant or cosine); the file is damaged"));
    md["lr_schedule"] = "cosine";
    md.erase("decay_steps");
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny), Contains("metadata field \"decay_steps\" is missing"));
    md["decay_steps"] = "10";
    md["total_steps"] = "-1";
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny), Contains("total_steps is negative; the file is damaged"));
  }
  SECTION("invalid config in the metadata") {
    md["num_heads"] = "5";
    write_edited(path, md, tensors);
    CHECK_THROWS_WITH(load_checkpoint(path),
                      Contains("its model config is invalid") && Contains("not divisible by num_heads"));
  }
  SECTION("truncated checkpoint") {
    const std::string bytes = scalelab_test::read_bytes(path);
    scalelab_test::write_bytes(path, bytes.substr(0, bytes.size() / 2));
    CHECK_THROWS_WITH(load_checkpoint(path, &tiny),
                      Contains("checkpoint '" + path + "': tensor 'adam.") && Contains("beyond the data area"));
  }
}

TEST_CASE("save_checkpoint rejects state that does not match its config", "[io][checkpoint]") {
  TempDir dir;
  TrainCheckpoint ck = make_checkpoint(gpt_config_by_name("tiny"));
  ck.adam_v.pop_back();
  CHECK_THROWS_WITH(save_checkpoint(dir.file("ck.safetensors"), ck),
                    Contains("adam.v has " + std::to_string(ck.adam_v.size()) + " values but config 'tiny' has " +
                             std::to_string(ck.params.size()) + " parameters"));
  CHECK_FALSE(std::filesystem::exists(dir.file("ck.safetensors")));
}
