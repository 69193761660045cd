// Everything a training run is started with: the model, the data, the optimizer, the stage
// features of one device (01-03) and the parallel layout over many (04-07). The command line
// maps its flags one to one onto these fields (apps/scalelab/train_options.cpp), and a
// multi-rank rung of the ladder hands the same struct to its child processes as JSON
// (options_to_json / options_from_json), so no value is ever re-typed.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "model/checkpoint_policy.hpp"
#include "model/config.hpp"
#include "optim/adamw.hpp"
#include "optim/lr_schedule.hpp"

namespace scalelab {

// The process grid and how each of its dimensions trains. World ranks are arranged as
// [pp][dp][tp] with tp fastest (comm/grid.hpp): the ranks of one tensor-parallel group are
// neighbours, so a launcher that fills a node before the next puts each tp group inside a node
// (tp exchanges activations in every layer and needs the fastest link), and pipeline stages,
// which exchange only one activation per micro-batch, lie farthest apart, across nodes.
struct ParallelOptions {
  int dp = 0;  // data-parallel replicas; 0: the ranks left over, world / (tp * pp)
  int tp = 1;  // tensor-parallel ranks (stage 06)
  int pp = 1;  // pipeline stages (stage 05)
  // Micro-batches per optimizer step on each data-parallel replica. The pipeline (stage 05)
  // runs them by its schedule; without a pipeline they are gradient accumulation (stage 01).
  // 0: TrainOptions::grad_accum. Both may be given only with the same value.
  int micro_batches = 0;
  std::string schedule = "1f1b";   // stage 05: afab, 1f1b, interleaved:V (V chunks per rank), zb-h1
  bool sequence_parallel = false;  // stage 06
  int zero = 0;                    // stage 07: 0 (plain DDP), 1, 2 or 3
  bool offload = false;            // stage 07: optimizer state and step on the host
  bool reshard = false;            // stage 07: resume a ZeRO checkpoint saved by another number of ranks
  // Stage 04: auto (DDP when dp > 1), none (refuse dp > 1), naive or bucketed (DDP even with
  // one replica, to measure it).
  std::string ddp = "auto";
  std::string allreduce = "builtin";  // stage 04: builtin (the backend's) or ring (ours)
  double bucket_mb = 25;              // stage 04: bucket size in MiB (PyTorch's default)
  double first_bucket_mb = 1;         // stage 04: the first, smaller bucket
  // auto (mpi when started by mpirun, else local), local, mpi, or nccl (GPU gradients over
  // NCCL; the ranks start and report over MPI).
  std::string backend = "auto";
  std::string trace;  // write each rank's timeline of the last step here (Chrome trace)
  // Seconds a blocking communication call may wait before the watchdog ends the job and the
  // flight recorder names the rank that fell behind (comm/watchdog.hpp); 0 turns it off. Long
  // by default, since a slow first step (a large model, a cold cache) must not end a healthy
  // run; a test or a short experiment lowers it to hear about a stuck rank in seconds.
  double comm_timeout = 300;

  // True when nothing beyond one device is asked for (the trainer's default strategy serves).
  bool single_device() const {
    return dp <= 1 && tp == 1 && pp == 1 && zero == 0 && !offload && !sequence_parallel &&
           (ddp == "auto" || ddp == "none");
  }
};

struct TrainOptions {
  std::string config = "mini";  // tiny, mini, gpt2
  ShapeOverrides shape;         // any of V, T, C, L, NH instead of the config's (0: keep)
  int steps = 100;
  int batch = 16;   // B: rows per optimizer step (the global batch)
  int seq_len = 0;  // T; 0 means the config's max_seq_len
  AdamWConfig adamw{.lr = 1e-3};
  LrSchedule lr_schedule;     // constant (default), or warm-up + cosine decay; peak = adamw.lr
  std::uint64_t seed = 1337;  // weights and data order
  std::string data;           // text file or llm.c shard; empty: the default corpus
  double val_fraction = 0.1;
  int val_every = 0;  // steps between validation losses; 0: only at the end
  int val_batches = 4;
  int threads = 1;                  // BLAS threads
  int grad_accum = 1;               // stage 01: micro-batches per step
  CheckpointPolicy checkpoint;      // stage 02
  std::string attention = "naive";  // stage 08: naive, chunked or flash (model/layers/attention_kind.hpp)
  std::string precision = "fp32";   // stage 03: fp32, bf16, fp16
  ParallelOptions parallel;         // stages 04-07
  std::string device = "cpu";       // cpu or cuda; cuda needs a model factory (see Trainer)
  std::string init_weights;         // safetensors to start from (else GPT-2 init)
  std::string save_weights;         // safetensors to write at the end
  std::string save_checkpoint;      // training state to write at the end
  std::string resume;               // training state to continue from
  std::string metrics;              // JSON-lines file, one line per step

  // The model's shape: the named config with the shape overrides applied.
  GPTConfig model_config() const;
  // Micro-batches per optimizer step and replica: parallel.micro_batches, else grad_accum.
  int micro_batches() const { return parallel.micro_batches > 0 ? parallel.micro_batches : grad_accum; }
  // The data-parallel size on a job of world_size ranks (parallel.dp, or what tp x pp leave).
  int data_parallel_size(int world_size) const;

  // The one validation of a run's settings: throws ConfigError naming the first bad option (as
  // its flag) and its fix. world_size 0 checks what can be checked before the job starts;
  // with the job's size it also checks the grid against it. Every rank calls it alike, so every
  // rank fails with the same message.
  void validate(int world_size = 0) const;
};

// The one check that a batch of `batch` rows splits into ranks x micro_batches equal pieces
// (TrainOptions::validate, and a data-parallel strategy that learns its rank count at attach).
void check_batch_split(int batch, int ranks, int micro_batches);

// What the model-parallel stages run on in this build: the CPU in fp32. A strategy that cannot do
// more refuses another --precision or --device with one ConfigError each, e.g. for flag "--pp 2"
// (named "--pp") and what "pipeline stages": "--pp 2: pipeline stages run in fp32 in this build,
// and --precision bf16 was asked for; use --precision fp32 with --pp".
void require_cpu_fp32(const TrainOptions& o, const std::string& flag, const std::string& name, const std::string& what);
// The device half of it (ZeRO runs in fp32 and mixed precision, on the CPU).
void require_cpu(const TrainOptions& o, const std::string& flag, const std::string& name, const std::string& what);

// Every field, exactly: doubles are written with 17 significant digits, which read back to the
// same bits. options_from_json refuses unknown or missing keys (a file from another version).
nlohmann::json options_to_json(const TrainOptions& options);
TrainOptions options_from_json(const nlohmann::json& json);

}  // namespace scalelab
