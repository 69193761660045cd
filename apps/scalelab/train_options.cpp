// The training flags.
#include "train_options.hpp"

namespace scalelab::cli {

TrainOptions TrainFlags::finish() const {
  TrainOptions o = options;
  o.checkpoint = CheckpointPolicy::parse(checkpoint);
  o.validate();
  return o;
}

void add_train_flags(CLI::App* cmd, TrainFlags& f) {
  TrainOptions& o = f.options;
  cmd->add_option("--config", o.config, "Model config: tiny, mini or gpt2")->capture_default_str();
  cmd->add_option("--steps", o.steps, "Optimizer steps")->capture_default_str();
  cmd->add_option("--batch", o.batch, "Rows per optimizer step (the global batch B)")->capture_default_str();
  cmd->add_option("--seq-len", o.seq_len, "Sequence length T (0: the config's context)")->capture_default_str();
  cmd->add_option("--lr", o.adamw.lr, "AdamW learning rate")->capture_default_str();
  cmd->add_option("--beta1", o.adamw.beta1, "AdamW beta1")->capture_default_str();
  cmd->add_option("--beta2", o.adamw.beta2, "AdamW beta2")->capture_default_str();
  cmd->add_option("--eps", o.adamw.eps, "AdamW epsilon")->capture_default_str();
  cmd->add_option("--weight-decay", o.adamw.weight_decay, "AdamW decoupled weight decay")->capture_default_str();
  cmd->add_option("--grad-clip", o.adamw.grad_clip, "Clip the global gradient norm (0: off)")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed for the weights and the data order")->capture_default_str();
  cmd->add_option("--data", o.data, "Text file or llm.c token shard (default: /usr/share/common-licenses)");
  cmd->add_option("--val-every", o.val_every, "Steps between validation losses (0: at the end)")->capture_default_str();
  cmd->add_option("--val-batches", o.val_batches, "Batches per validation")->capture_default_str();
  cmd->add_option("--threads", o.threads, "BLAS threads")->capture_default_str();
  cmd->add_option("--grad-accum", o.grad_accum, "Stage 01: micro-batches per step")->capture_default_str();
  cmd->add_option("--checkpoint", f.checkpoint, "Stage 02: none, every, every:K, sqrt or selective")
      ->capture_default_str();
  cmd->add_option("--precision", o.precision, "Stage 03: fp32, bf16 or fp16")->capture_default_str();
  cmd->add_option("--device", o.device, "cpu, or cuda (a build with CUDA and a GPU)")->capture_default_str();
  cmd->add_option("--init", o.init_weights, "Start from these weights (safetensors, nanoGPT names)");
  cmd->add_option("--save", o.save_weights, "Write the final weights here (safetensors)");
  cmd->add_option("--save-state", o.save_checkpoint, "Write the full training state here at the end");
  cmd->add_option("--resume", o.resume, "Continue from a training state written by --save-state");
  cmd->add_option("--metrics", o.metrics, "Write one JSON line per step here");
}

}  // namespace scalelab::cli
