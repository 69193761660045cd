// TrainOptions: the one validation of a run's settings (each bad combination gives one message
// naming the flag and the fix), the exact JSON form the ladder hands to its multi-rank rungs
// (every field round-trips bit for bit), and the decoding of a child process's wait status.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "core/error.hpp"
#include "io/process.hpp"
#include "train/train_options.hpp"

using namespace scalelab;

namespace {

// Options with every field away from its default, doubles drawn at random (full 53-bit
// mantissas, so a printed-and-parsed value that lost a digit would differ).
TrainOptions unusual_options(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  TrainOptions o;
  o.config = "tiny";
  o.shape = {300, 24, 48, 6, 6};
  o.lr_schedule = LrSchedule::parse("cosine", 2, 5, u(rng));
  o.steps = 7;
  o.batch = 24;
  o.seq_len = 8;
  o.adamw.lr = u(rng) * 1e-2;
  o.adamw.beta1 = u(rng);
  o.adamw.beta2 = u(rng);
  o.adamw.eps = u(rng) * 1e-7;
  o.adamw.weight_decay = u(rng);
  o.adamw.grad_clip = u(rng) * 3;
  o.seed = rng();
  o.data = "/tmp/some file with 'quotes' and spaces.txt";
  o.val_fraction = u(rng) * 0.5;
  o.val_every = 3;
  o.val_batches = 2;
  o.threads = 3;
  o.grad_accum = 2;
  o.checkpoint = CheckpointPolicy::parse("every:2");
  o.attention = "flash";
  o.precision = "bf16";
  o.parallel.dp = 3;
  o.parallel.tp = 2;
  o.parallel.pp = 2;
  o.parallel.micro_batches = 2;
  o.parallel.schedule = "interleaved:2";
  o.parallel.sequence_parallel = true;
  o.parallel.zero = 2;
  o.parallel.offload = true;
  o.parallel.reshard = true;
  o.parallel.ddp = "naive";
  o.parallel.allreduce = "ring";
  o.parallel.bucket_mb = u(rng) * 50;
  o.parallel.first_bucket_mb = u(rng);
  o.parallel.backend = "mpi";
  o.parallel.trace = "out/t.json";
  o.parallel.comm_timeout = 1 + u(rng) * 100;
  o.device = "cuda";
  o.init_weights = "a.safetensors";
  o.save_weights = "b.safetensors";
  o.save_checkpoint = "c.safetensors";
  o.resume = "";
  o.metrics = "m.jsonl";
  return o;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("options round-trip through JSON bit for bit, every field", "[options]") {
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const TrainOptions a = unusual_options(seed);
    const std::string text = options_to_json(a).dump(1);
    const TrainOptions b = options_from_json(nlohmann::json::parse(text));
    INFO("seed " << seed << "\n" << text);
    // A field missing from either direction would come back as its default, which the
    // unusual options never are; the JSON of the copy must also be the same text.
    CHECK(options_to_json(b).dump(1) == text);
    CHECK(same_bits(a.adamw.lr, b.adamw.lr));
    CHECK(same_bits(a.adamw.beta1, b.adamw.beta1));
    CHECK(same_bits(a.adamw.beta2, b.adamw.beta2));
    CHECK(same_bits(a.adamw.eps, b.adamw.eps));
    CHECK(same_bits(a.adamw.weight_decay, b.adamw.weight_decay));
    CHECK(same_bits(a.adamw.grad_clip, b.adamw.grad_clip));
    CHECK(same_bits(a.val_fraction, b.val_fraction));
    CHECK(same_bits(a.lr_schedule.min_lr_fraction, b.lr_schedule.min_lr_fraction));
    CHECK(b.lr_schedule == a.lr_schedule);
    CHECK(b.model_config().name == a.model_config().name);
    CHECK(same_bits(a.parallel.bucket_mb, b.parallel.bucket_mb));
    CHECK(same_bits(a.parallel.first_bucket_mb, b.parallel.first_bucket_mb));
    CHECK(same_bits(a.parallel.comm_timeout, b.parallel.comm_timeout));
    CHECK(a.seed == b.seed);
    CHECK(b.data == a.data);
    CHECK(b.checkpoint.describe() == "every:2");
    CHECK(b.attention == "flash");
    CHECK(b.parallel.sequence_parallel);
    CHECK(b.parallel.offload);
    CHECK(b.parallel.reshard);
    CHECK(b.parallel.schedule == "interleaved:2");
    CHECK(b.device == "cuda");
  }
  // Every default differs from the unusual options: the round trip above would notice a field
  // that is not written.
  const nlohmann::json defaults = options_to_json(TrainOptions{});
  const nlohmann::json unusual = options_to_json(unusual_options(1));
  for (const auto& [key, value] : unusual.items()) {
    if (key == "resume") continue;  // empty in both: --resume and --init exclude each other
    if (value.is_object()) {
      for (const auto& [k, v] : value.items()) {
        INFO(key << "." << k);
        CHECK(defaults[key][k] != v);
      }
    } else {
      INFO(key);
      CHECK(defaults[key] != value);
    }
  }
}

TEST_CASE("an options file with an unknown, missing or mistyped key is refused by name", "[options]") {
  nlohmann::json j = options_to_json(TrainOptions{});
  j["parallel"]["tpp"] = 2;
  CHECK_THROWS_WITH(options_from_json(j), Catch::Contains("the options' parallel has an unknown key 'tpp'"));
  j = options_to_json(TrainOptions{});
  j.erase("batch");
  CHECK_THROWS_WITH(options_from_json(j), Catch::Contains("the options has no 'batch'"));
  j = options_to_json(TrainOptions{});
  j["steps"] = "ten";
  CHECK_THROWS_WITH(options_from_json(j), Catch::Contains("'steps' has the wrong type"));
}

TEST_CASE("each bad parallel layout gives one message naming the flags and the fix", "[options]") {
  struct Case {
    const char* what;
    std::function<void(TrainOptions&)> set;
    int world;
    const char* message;
  };
  const Case cases[] = {
      {"negative dp", [](TrainOptions& o) { o.parallel.dp = -1; }, 0, "dp: must be >= 0, got -1"},
      {"tp 0", [](TrainOptions& o) { o.parallel.tp = 0; }, 0, "tp: must be at least 1, got 0; use --tp 1"},
      {"pp 0", [](TrainOptions& o) { o.parallel.pp = 0; }, 0, "pp: must be at least 1, got 0"},
      {"tp vs heads", [](TrainOptions& o) { o.parallel.tp = 3; }, 0,
       "tp: --tp 3 does not divide the model's 4 heads; choose a --tp that divides the head count"},
      {"pp vs layers", [](TrainOptions& o) { o.parallel.pp = 8; }, 0,
       "pp: --pp 8 x 1 model chunks per rank need at least 8 layers, and the model has 4"},
      {"schedule name", [](TrainOptions& o) { o.parallel.schedule = "pipedream"; }, 0,
       "schedule: unknown schedule 'pipedream'; use"},
      {"schedule without pipeline", [](TrainOptions& o) { o.parallel.schedule = "gpipe"; }, 0,
       "schedule: --schedule gpipe needs a pipeline; add --pp P with P >= 2"},
      {"interleaved with m not a multiple of p",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.schedule = "interleaved:2";
         o.parallel.micro_batches = 3;
       },
       0, "micro_batches: interleaved needs --micro-batches to be a multiple of --pp 2, got 3"},
      {"interleaved without V",
       [](TrainOptions& o) {
         o.parallel.pp = 2;
         o.parallel.schedule = "interleaved";
       },
       0, "schedule: --schedule interleaved needs the number of model chunks per rank; write interleaved:V"},
      {"both micro-batch counts",
       [](TrainOptions& o) {
         o.grad_accum = 2;
         o.parallel.micro_batches = 4;
       },
       0, "micro_batches: --micro-batches 4 and --grad-accum 2 both set the micro-batches of a step; give only one"},
      {"sequence parallel without tp", [](TrainOptions& o) { o.parallel.sequence_parallel = true; }, 0,
       "sequence_parallel: --sequence-parallel splits the tensor-parallel group; add --tp T"},
      {"zero 4", [](TrainOptions& o) { o.parallel.zero = 4; }, 0, "zero: must be 0, 1, 2 or 3, got 4"},
      {"offload without zero", [](TrainOptions& o) { o.parallel.offload = true; }, 0,
       "offload: --offload moves ZeRO's optimizer shards to the host; add --zero 1"},
      {"ddp mode", [](TrainOptions& o) { o.parallel.ddp = "fast"; }, 0,
       "ddp: unknown mode 'fast'; use naive or bucketed"},
      {"ddp none with replicas", [](TrainOptions& o) { o.parallel.ddp = "none"; }, 4,
       "ddp: --ddp none, but the job has 4 data-parallel replicas"},
      {"nccl on the cpu", [](TrainOptions& o) { o.parallel.backend = "nccl"; }, 0,
       "backend: nccl moves GPU memory, but the run uses --device cpu"},
      {"bucket size", [](TrainOptions& o) { o.parallel.bucket_mb = 0; }, 0, "bucket_mb: bucket sizes must be positive"},
      {"negative comm timeout", [](TrainOptions& o) { o.parallel.comm_timeout = -1; }, 0,
       "comm_timeout: must be a finite number of seconds >= 0, got -1; pass e.g. --comm-timeout 60 (0 turns the "
       "watchdog off)"},
      {"comm timeout not a number", [](TrainOptions& o) { o.parallel.comm_timeout = std::nan(""); }, 0,
       "comm_timeout: must be a finite number of seconds >= 0, got nan"},
      {"grid larger than the job",
       [](TrainOptions& o) {
         o.parallel.dp = 2;
         o.parallel.tp = 2;
       },
       3, "dp: --dp 2 x --tp 2 x --pp 1 = 4 ranks, but this job has 3; start it with mpirun -np 4"},
      {"tp x pp does not divide the job", [](TrainOptions& o) { o.parallel.tp = 2; }, 3,
       "dp: --tp 2 x --pp 1 = 2 does not divide the 3 ranks of this job"},
      {"rows per replica and micro-batch",
       [](TrainOptions& o) {
         o.batch = 6;
         o.grad_accum = 2;
       },
       4, "batch: 6 rows do not split into 4 ranks x 2 micro-batches; choose --batch divisible by"},
  };
  for (const Case& c : cases) {
    TrainOptions o;
    c.set(o);
    INFO(c.what << " (world " << c.world << ")");
    CHECK_THROWS_AS(o.validate(c.world), ConfigError);
    CHECK_THROWS_WITH(o.validate(c.world), Catch::Contains(c.message));
  }
  // And what is fine: dp from what tp x pp leave, on 8 ranks.
  TrainOptions ok;
  ok.parallel.tp = 2;
  ok.parallel.pp = 2;
  ok.parallel.schedule = "gpipe";
  ok.batch = 16;
  CHECK_NOTHROW(ok.validate(8));
  CHECK(ok.data_parallel_size(8) == 2);
}

TEST_CASE("a child's wait status is decoded: exit codes and signals apart", "[options]") {
  const ProcessResult ok = run_process({"sh", "-c", "exit 0"});
  CHECK(ok.ok());
  const ProcessResult three = run_process({"sh", "-c", "exit 3"});
  CHECK_FALSE(three.ok());
  CHECK(three.describe() == "exited with status 3");
  const ProcessResult killed = run_process({"sh", "-c", "kill -9 $$"});
  CHECK_FALSE(killed.exited);
  CHECK(killed.signal == 9);
  CHECK(killed.describe().find("killed by signal 9") != std::string::npos);
  // 512 is how system() reports "exit 2": the old ladder printed it as a status.
  CHECK(process_result_from_wait_status(512).describe() == "exited with status 2");
  CHECK_THROWS_WITH(run_process({"/no/such/program"}), Catch::Contains("/no/such/program: cannot be started"));
}
