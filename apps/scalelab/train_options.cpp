// The training flags: each sets one field of TrainOptions (reference/train/train_options.hpp).
#include "train_options.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace scalelab::cli {

TrainOptions TrainFlags::finish() const {
  if (!options_file.empty()) {
    for (const CLI::Option* f : option_flags)
      require(f->count() == 0, "options_file",
              "--options-file gives every option, and " + f->get_name() + " was given too",
              "put the value in the file, or drop --options-file");
    std::ifstream in(options_file);
    require(static_cast<bool>(in), "options_file", "cannot read '" + options_file + "'", "pass an existing file");
    std::stringstream text;
    text << in.rdbuf();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text.str());
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError("options_file: '" + options_file + "' is not JSON (" + e.what() +
                        "); write it with scalelab (the ladder does)");
    }
    TrainOptions o = options_from_json(j);
    o.validate();
    return o;
  }
  TrainOptions o = options;
  o.checkpoint = CheckpointPolicy::parse(checkpoint);
  o.lr_schedule = LrSchedule::parse(lr_schedule, o.lr_schedule.warmup_steps, o.lr_schedule.decay_steps,
                                    o.lr_schedule.min_lr_fraction);
  o.validate();
  return o;
}

void write_options_file(const std::string& path, const TrainOptions& options) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p);
  require(static_cast<bool>(f), "options_file", "cannot write '" + path + "'", "pass a writable path");
  f << options_to_json(options).dump(1) << "\n";
}

void add_train_flags(CLI::App* cmd, TrainFlags& f, bool parallel) {
  TrainOptions& o = f.options;
  std::vector<CLI::Option*>& all = f.option_flags;
  auto add = [&](CLI::Option* opt) { all.push_back(opt->capture_default_str()); };
  add(cmd->add_option("--config", o.config, "Model config: tiny, mini or gpt2"));
  add(cmd->add_option("--vocab-size", o.shape.vocab_size, "Model shape: vocabulary V (0: the config's)"));
  add(cmd->add_option("--context", o.shape.max_seq_len,
                      "Model shape: context length, the longest T (0: the config's)"));
  add(cmd->add_option("--channels", o.shape.channels, "Model shape: width C (0: the config's)"));
  add(cmd->add_option("--layers", o.shape.num_layers, "Model shape: depth L (0: the config's)"));
  add(cmd->add_option("--heads", o.shape.num_heads, "Model shape: attention heads NH (0: the config's)"));
  add(cmd->add_option("--steps", o.steps, "Optimizer steps"));
  add(cmd->add_option("--batch", o.batch, "Rows per optimizer step (the global batch B)"));
  add(cmd->add_option("--seq-len", o.seq_len, "Sequence length T (0: the config's context)"));
  add(cmd->add_option("--lr", o.adamw.lr, "AdamW learning rate"));
  add(cmd->add_option("--lr-schedule", f.lr_schedule, "constant, or cosine (warm-up, then cosine decay to a floor)"));
  add(cmd->add_option("--warmup-steps", o.lr_schedule.warmup_steps, "Linear warm-up steps (any schedule)"));
  add(cmd->add_option("--decay-steps", o.lr_schedule.decay_steps,
                      "cosine: the step where the floor is reached (0: the run's last step)"));
  add(cmd->add_option("--min-lr-fraction", o.lr_schedule.min_lr_fraction, "cosine: the floor as a fraction of --lr"));
  add(cmd->add_option("--beta1", o.adamw.beta1, "AdamW beta1"));
  add(cmd->add_option("--beta2", o.adamw.beta2, "AdamW beta2"));
  add(cmd->add_option("--eps", o.adamw.eps, "AdamW epsilon"));
  add(cmd->add_option("--weight-decay", o.adamw.weight_decay, "AdamW decoupled weight decay"));
  add(cmd->add_option("--grad-clip", o.adamw.grad_clip, "Clip the global gradient norm (0: off)"));
  add(cmd->add_option("--seed", o.seed, "Seed for the weights and the data order"));
  add(cmd->add_option("--data", o.data, "Text file or llm.c token shard (default: /usr/share/common-licenses)"));
  add(cmd->add_option("--val-fraction", o.val_fraction, "Share of the tokens held out for validation"));
  add(cmd->add_option("--val-every", o.val_every, "Steps between validation losses (0: at the end)"));
  add(cmd->add_option("--val-batches", o.val_batches, "Batches per validation"));
  add(cmd->add_option("--threads", o.threads, "BLAS threads"));
  add(cmd->add_option("--grad-accum", o.grad_accum, "Stage 01: micro-batches per step"));
  add(cmd->add_option("--checkpoint", f.checkpoint, "Stage 02: none, every, every:K, sqrt or selective"));
  add(cmd->add_option("--attention", o.attention,
                      "Stage 08: naive (saves B*NH*T*T probabilities), chunked or flash (save B*NH*T)"));
  add(cmd->add_option("--precision", o.precision, "Stage 03: fp32, bf16 or fp16"));
  add(cmd->add_option("--device", o.device, "cpu, or cuda (a build with CUDA and a GPU)"));
  add(cmd->add_option("--init", o.init_weights, "Start from these weights (safetensors, nanoGPT names)"));
  add(cmd->add_option("--save", o.save_weights, "Write the final weights here (safetensors)"));
  add(cmd->add_option("--save-state", o.save_checkpoint, "Write the full training state here at the end"));
  add(cmd->add_option("--resume", o.resume, "Continue from a training state written by --save-state"));
  add(cmd->add_option("--metrics", o.metrics, "Write one JSON line per step here"));
  cmd->add_option("--options-file", f.options_file,
                  "Read every training option from this JSON file (the ladder writes one per multi-rank rung)");
  if (!parallel) return;
  ParallelOptions& p = o.parallel;
  add(cmd->add_option("--dp", p.dp, "Data-parallel replicas (0: the ranks left over after --tp x --pp)"));
  add(cmd->add_option("--tp", p.tp, "Stage 06: tensor-parallel ranks"));
  add(cmd->add_option("--pp", p.pp, "Stage 05: pipeline stages"));
  add(cmd->add_option("--micro-batches", p.micro_batches,
                      "Micro-batches per step and replica (the pipeline's m; 0: --grad-accum)"));
  add(cmd->add_option("--schedule", p.schedule,
                      "Stage 05: afab (GPipe), 1f1b, interleaved:V (V model chunks per rank) or zb-h1"));
  add(cmd->add_flag("--sequence-parallel", p.sequence_parallel, "Stage 06: split LayerNorm regions by sequence"));
  add(cmd->add_option("--zero", p.zero, "Stage 07: ZeRO stage 0, 1, 2 or 3"));
  add(cmd->add_flag("--offload", p.offload, "Stage 07: optimizer state and step on the host"));
  add(cmd->add_flag("--reshard", p.reshard,
                    "Stage 07: resume a ZeRO checkpoint saved by a different number of data-parallel ranks"));
  add(cmd->add_option("--ddp", p.ddp, "Stage 04: auto (DDP when --dp > 1), none, naive or bucketed"));
  add(cmd->add_option("--allreduce", p.allreduce, "Stage 04: builtin (the backend's) or ring (ours)"));
  add(cmd->add_option("--bucket-mb", p.bucket_mb, "Stage 04: bucket size in MiB"));
  add(cmd->add_option("--first-bucket-mb", p.first_bucket_mb, "Stage 04: first bucket size in MiB"));
  add(cmd->add_option(
      "--backend", p.backend,
      "auto (mpi under mpirun, else local), local, mpi or nccl (--device cuda: GPU gradients over NCCL)"));
  add(cmd->add_option("--comm-timeout", p.comm_timeout,
                      "Seconds a communication call may wait before the job ends and the ranks that fell behind "
                      "are named (0: never)"));
  add(cmd->add_option("--trace", p.trace,
                      "Write the last step's timeline (Chrome trace) here: one file, every rank a track"));
}

}  // namespace scalelab::cli
