// Resume and determinism of whole training runs: a checkpoint holds everything that decides the
// trajectory (params, Adam moments, step count, data-loader RNG), so 6 steps must equal
// 3 steps + save + load + 3 steps, bit for bit; and one seed must give one result.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>

#include "compare.hpp"
#include "core/rng.hpp"
#include "data/tokens.hpp"
#include "train/trainer.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

// A token shard for the tiny config (V = 64): a repeating pattern with noise, so loss can fall.
std::string make_tiny_shard() {
  const std::string path = std::filesystem::temp_directory_path() / "scalelab_test_tiny.bin";
  Rng rng(5);
  std::vector<std::uint16_t> tokens;
  for (int i = 0; i < 4000; ++i) tokens.push_back(static_cast<std::uint16_t>((i * 7 + rng.below(3)) % 64));
  write_token_shard(path, tokens);
  return path;
}

TrainOptions tiny_options(const std::string& data) {
  TrainOptions o;
  o.config = "tiny";
  o.batch = 4;
  o.data = data;
  o.seed = 11;
  o.adamw.lr = 3e-3;
  o.adamw.grad_clip = 1.0;
  return o;
}

std::vector<float> params_of(const Trainer& t) {
  return {t.model().master_params(), t.model().master_params() + t.model().num_params()};
}

}  // namespace

TEST_CASE("6 steps equal 3 steps + checkpoint + resume + 3 steps, bitwise", "[resume]") {
  const std::string data = make_tiny_shard();
  const std::string ckpt = std::filesystem::temp_directory_path() / "scalelab_test_resume.safetensors";
  for (const int accum : {1, 2, 3}) {
    // accum 3 runs with a cosine schedule (warm-up 2, floor at step 6): the resumed run must
    // take the schedule and its length from the checkpoint, without the flags.
    const bool cosine = accum == 3;
    INFO("grad_accum " << (cosine ? 1 : accum) << (cosine ? ", cosine schedule" : ", constant lr"));
    TrainOptions o = tiny_options(data);
    o.grad_accum = cosine ? 1 : accum;
    o.steps = 6;
    if (cosine) o.lr_schedule = LrSchedule::parse("cosine", 2, 0, 0.1);
    MemoryTracker m1;
    Trainer straight(o, &m1);
    std::vector<double> losses;
    for (int i = 0; i < 6; ++i) losses.push_back(straight.step().loss);

    MemoryTracker m2;
    Trainer first(o, &m2);
    for (int i = 0; i < 3; ++i) first.step();
    first.save_checkpoint(ckpt);

    TrainOptions r = o;
    r.resume = ckpt;
    r.steps = 3;
    r.lr_schedule = LrSchedule{};
    MemoryTracker m3;
    Trainer resumed(r, &m3);
    CHECK(resumed.steps_done() == 3);
    CHECK(resumed.lr_schedule() == o.lr_schedule);
    CHECK(resumed.schedule_steps() == 6);
    for (int i = 3; i < 6; ++i) {
      const double loss = resumed.step().loss;
      INFO("step " << i + 1 << ": resumed loss " << loss << " vs straight " << losses[i]);
      CHECK(loss == losses[i]);
    }
    const auto a = params_of(straight), b = params_of(resumed);
    CHECK_MATCH(compare_bitwise("params after 6 steps (resumed vs straight)", b.data(), a.data(), a.size()));
    CHECK_MATCH(compare_bitwise("adam m", resumed.optimizer().m(), straight.optimizer().m(), a.size()));
    CHECK_MATCH(compare_bitwise("adam v", resumed.optimizer().v(), straight.optimizer().v(), a.size()));
    if (cosine) {  // a different schedule on resume is refused, by name
      TrainOptions other = r;
      other.lr_schedule = LrSchedule::parse("cosine", 1, 0, 0.1);
      MemoryTracker m4;
      CHECK_THROWS_WITH(Trainer(other, &m4), Catch::Contains("lr_schedule: the checkpoint was trained with"));
    }
  }
  std::remove(ckpt.c_str());
}

TEST_CASE("two runs with one seed give identical bits; another seed does not", "[determinism]") {
  const std::string data = make_tiny_shard();
  auto run = [&](std::uint64_t seed) {
    TrainOptions o = tiny_options(data);
    o.seed = seed;
    MemoryTracker m;
    Trainer t(o, &m);
    for (int i = 0; i < 4; ++i) t.step();
    return params_of(t);
  };
  const auto a = run(11), b = run(11), c = run(12);
  CHECK_MATCH(compare_bitwise("params of two runs with seed 11", a.data(), b.data(), a.size()));
  CHECK_FALSE(compare_bitwise("seed 11 vs 12", a.data(), c.data(), a.size()).ok);
}

TEST_CASE("loss falls when training the tiny model on a learnable pattern", "[training]") {
  TrainOptions o = tiny_options(make_tiny_shard());
  MemoryTracker m;
  Trainer t(o, &m);
  const double first = t.step().loss;
  double last = first;
  for (int i = 0; i < 60; ++i) last = t.step().loss;
  INFO("loss went from " << first << " to " << last);
  CHECK(last < first - 1.0);  // ln 64 = 4.16 at the start; the pattern's entropy is ln 3 = 1.1
}

TEST_CASE("bad training options are rejected with the setting and the fix", "[errors]") {
  const std::string data = make_tiny_shard();
  MemoryTracker m;
  auto fails_with = [&](TrainOptions o, const std::string& text) {
    INFO("expected an error containing: " << text);
    CHECK_THROWS_WITH(Trainer(o, &m), Catch::Contains(text));
  };
  TrainOptions o = tiny_options(data);
  o.config = "huge";
  fails_with(o, "config: unknown model config 'huge'; choose one of tiny, mini, gpt2");
  o = tiny_options(data);
  o.batch = 0;
  fails_with(o, "batch: must be in [1, 4096], got 0");
  o = tiny_options(data);
  o.seq_len = 17;
  fails_with(o, "seq_len: must be in [1, 16] for config 'tiny', got 17");
  o = tiny_options(data);
  o.data = "/nonexistent/corpus.txt";
  fails_with(o, "data: no such file '/nonexistent/corpus.txt'");
  o = tiny_options(data);
  o.grad_accum = 3;
  fails_with(o, "grad_accum: batch 4 is not divisible into 3 micro-batches");
  o = tiny_options(data);
  o.adamw.lr = -1;
  fails_with(o, "lr: must be a positive number");
  o = tiny_options(data);
  o.precision = "fp8";
  fails_with(o, "precision: unknown precision 'fp8'; use fp32, bf16 or fp16");
  o = tiny_options("/usr/share/common-licenses/GPL-3");  // bytes up to 255 do not fit V = 64
  fails_with(o, "is outside the vocabulary of config 'tiny' (V=64)");
}
