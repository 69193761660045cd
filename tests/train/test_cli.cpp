// The command line: bad input exits non-zero with one clear message naming the setting.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cli_run.hpp"

using scalelab_test::CliResult;
using scalelab_test::run_cli;

TEST_CASE("scalelab train rejects bad settings with exit status 2 and a message", "[cli]") {
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {"train --config gpt3", "error: config: unknown model config 'gpt3'; choose one of tiny, mini, gpt2"},
      {"train --batch 0", "error: batch: must be in [1, 4096], got 0"},
      {"train --seq-len 999", "error: seq_len: must be in [1, 256] for config 'mini', got 999"},
      {"train --data /no/such/file.txt", "error: data: no such file '/no/such/file.txt'"},
      {"train --batch 6 --grad-accum 4", "error: grad_accum: batch 6 is not divisible into 4 micro-batches"},
      {"train --checkpoint often", "error: checkpoint: unknown policy 'often'"},
      {"train --init /no/weights.safetensors", "/no/weights.safetensors"},
      {"train --resume /no/state.safetensors", "/no/state.safetensors"},
  };
  for (const auto& c : cases) {
    const CliResult r = run_cli(c.args);
    INFO("scalelab " << c.args << "\n  exit status " << r.status << "\n  output: " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
}

TEST_CASE("scalelab tokenize writes a shard that training reads", "[cli]") {
  const CliResult t = run_cli("tokenize /usr/share/common-licenses/GPL-3 /tmp/scalelab_gpl3.bin");
  INFO(t.output);
  REQUIRE(t.status == 0);
  CHECK(t.output.find("wrote ") != std::string::npos);
  const CliResult r = run_cli("train --steps 1 --batch 2 --seq-len 32 --data /tmp/scalelab_gpl3.bin");
  INFO(r.output);
  CHECK(r.status == 0);
  const CliResult bad = run_cli("tokenize /no/such.txt /tmp/x.bin");
  CHECK(bad.status == 2);
  CHECK(bad.output.find("data: no such file '/no/such.txt'") != std::string::npos);
}

TEST_CASE("scalelab without a subcommand prints usage and fails", "[cli]") {
  const CliResult r = run_cli("");
  INFO(r.output);
  CHECK(r.status != 0);
  CHECK(r.output.find("A subcommand is required") != std::string::npos);
}

TEST_CASE("scalelab train runs a short job, writes metrics, weights and state", "[cli]") {
  const std::string dir = "/tmp/scalelab_cli_test";
  std::system(("mkdir -p " + dir).c_str());
  const CliResult r = run_cli("train --steps 2 --batch 2 --seq-len 32 --metrics " + dir + "/m.jsonl --save " + dir +
                              "/w.safetensors --save-state " + dir + "/s.safetensors");
  INFO(r.output);
  REQUIRE(r.status == 0);
  CHECK(r.output.find("bytes per model parameter: params 4.00 + grads 4.00 + optimizer 8.00 = 16.00") !=
        std::string::npos);
  const CliResult again = run_cli("train --steps 1 --batch 2 --seq-len 32 --init " + dir + "/w.safetensors");
  INFO(again.output);
  CHECK(again.status == 0);
  const CliResult resumed = run_cli("train --steps 1 --batch 2 --seq-len 32 --resume " + dir + "/s.safetensors");
  INFO(resumed.output);
  CHECK(resumed.status == 0);
  CHECK(resumed.output.find("step     3/3") != std::string::npos);
}

TEST_CASE("scalelab train refuses a bad parallel layout before reading any data", "[cli]") {
  struct Case {
    const char* args;
    const char* message;
  };
  const Case cases[] = {
      {"train --dp 2", "error: dp: --dp 2 x --tp 1 x --pp 1 = 2 ranks, but this job has 1; start it with mpirun -np 2"},
      {"train --zero 4", "error: zero: must be 0, 1, 2 or 3, got 4"},
      {"train --zero 3 --offload", "error: offload: --offload with --zero 3"},
      {"train --tp 3", "error: tp: --tp 3 does not divide the model's 4 heads"},
      {"train --backend nccl", "error: backend: nccl moves GPU memory, but the run uses --device cpu"},
      {"train --comm-timeout -5",
       "error: comm_timeout: must be a finite number of seconds >= 0, got -5; pass e.g. "
       "--comm-timeout 60"},
      {"train --schedule gpipe", "error: schedule: --schedule gpipe needs a pipeline"},
      {"train --options-file /no/options.json", "error: options_file: cannot read '/no/options.json'"},
      {"train --options-file /no/options.json --steps 3",
       "error: options_file: --options-file gives every option, and --steps was given too"},
      {"ladder --ranks 3 --stages 04", "error: batch: 8 rows do not split into 3 ranks x 1 micro-batches"},
      // Stage 08: the attention's name and its combination with selective checkpointing (every
      // CPU model runs chunked and flash, mixed precision included: see the next test case).
      {"train --attention bogus", "error: --attention: unknown attention 'bogus'; use naive, chunked or flash"},
      {"train --attention flash --checkpoint selective",
       "error: checkpoint: --checkpoint selective recomputes the (B,NH,T,T) attention probabilities, which "
       "--attention flash never stores"},
      {"train --attention flash --precision bf16 --checkpoint selective",
       "error: checkpoint: --checkpoint selective recomputes the (B,NH,T,T) attention probabilities, which "
       "--attention flash never stores"},
  };
  for (const auto& c : cases) {
    const CliResult r = run_cli(c.args);
    INFO("scalelab " << c.args << "\n  exit status " << r.status << "\n  output: " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(c.message) != std::string::npos);
  }
}

TEST_CASE("scalelab train runs mixed precision with flash and chunked attention", "[cli]") {
  // Stages 03 and 08 together (the numbers: tests/precision/test_mixed_attention.cpp), with
  // accumulation and segment checkpointing; the refusal of earlier builds is gone.
  struct Case {
    const char *args, *settings;
  };
  const Case cases[] = {
      {"train --precision bf16 --attention flash --steps 2 --batch 4 --context 70 --grad-accum 2 --checkpoint sqrt",
       "bf16, grad-accum 2, checkpoint sqrt, attention flash"},
      {"train --precision fp16 --attention chunked --steps 2 --batch 2 --seq-len 32",
       "fp16, grad-accum 1, checkpoint none, attention chunked"},
  };
  for (const Case& c : cases) {
    const CliResult r = run_cli(c.args);
    INFO("scalelab " << c.args << "\n  exit status " << r.status << "\n  output: " << r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("is not built for") == std::string::npos);
    CHECK(r.output.find(c.settings) != std::string::npos);
    CHECK(r.output.find("step     2/2") != std::string::npos);
  }
}

TEST_CASE("scalelab train --options-file runs the options a file holds", "[cli]") {
  const std::string dir = "/tmp/scalelab_cli_options";
  std::system(("mkdir -p " + dir).c_str());
  std::FILE* f = std::fopen((dir + "/o.json").c_str(), "w");
  REQUIRE(f != nullptr);
  // steps 2, batch 2, T 32, and a learning rate that no flag default has.
  std::fputs(R"({"config":"mini","shape":{"vocab_size":0,"context":0,"channels":0,"layers":0,"heads":0},
    "lr_schedule":{"kind":"constant","warmup_steps":0,"decay_steps":0,"min_lr_fraction":0.1},"steps":2,"batch":2,"seq_len":32,
    "adamw":{"lr":0.00123,"beta1":0.9,"beta2":0.999,"eps":1e-08,"weight_decay":0.01,"grad_clip":0.0},
    "seed":7,"data":"","val_fraction":0.1,"val_every":0,"val_batches":1,"threads":1,"grad_accum":1,
    "checkpoint":"sqrt","attention":"flash","precision":"fp32",
    "parallel":{"dp":0,"tp":1,"pp":1,"micro_batches":0,"schedule":"1f1b",
                "sequence_parallel":false,"zero":0,"offload":false,"reshard":false,"ddp":"auto","allreduce":"builtin",
                "bucket_mb":25.0,"first_bucket_mb":1.0,"backend":"auto","trace":"","comm_timeout":300.0},
    "device":"cpu","init_weights":"","save_weights":"","save_checkpoint":"","resume":"","metrics":""})",
             f);
  std::fclose(f);
  const CliResult r = run_cli("train --options-file " + dir + "/o.json");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("checkpoint sqrt") != std::string::npos);
  CHECK(r.output.find("attention flash") != std::string::npos);
  CHECK(r.output.find("step     2/2") != std::string::npos);
}
