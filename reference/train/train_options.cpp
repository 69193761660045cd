// The validation of a run's settings, and their exact JSON form.
#include "train/train_options.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "core/error.hpp"
#include "model/attention_block.hpp"
#include "model/layers/attention_kind.hpp"
#include "schedule/pipeline_schedule.hpp"

namespace scalelab {

namespace {

std::string str(long v) { return std::to_string(v); }
std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

bool one_of(const std::string& v, std::initializer_list<const char*> allowed) {
  return std::any_of(allowed.begin(), allowed.end(), [&v](const char* a) { return v == a; });
}

// The checks of one device's settings (stages 00-03).
void validate_single_device(const TrainOptions& o, const GPTConfig& c) {
  require(o.steps >= 0, "steps", "must be non-negative, got " + str(o.steps), "pass e.g. --steps 100");
  require(o.batch >= 1 && o.batch <= 4096, "batch", "must be in [1, 4096], got " + str(o.batch),
          "pass e.g. --batch 16");
  require(o.seq_len >= 0 && o.seq_len <= c.max_seq_len, "seq_len",
          "must be in [1, " + str(c.max_seq_len) + "] for config '" + o.config + "', got " + str(o.seq_len),
          "use a sequence length no longer than the model's context, or 0 for the full context");
  require(o.grad_accum >= 1, "grad_accum", "must be at least 1, got " + str(o.grad_accum),
          "use --grad-accum 1 for no accumulation");
  require(o.batch % o.grad_accum == 0, "grad_accum",
          "batch " + str(o.batch) + " is not divisible into " + str(o.grad_accum) + " micro-batches",
          "choose a --grad-accum that divides --batch " + str(o.batch));
  require(o.val_every >= 0 && o.val_batches >= 1, "val_every/val_batches", "must be >= 0 and >= 1",
          "pass e.g. --val-every 25 --val-batches 4");
  require(o.threads >= 1 && o.threads <= 256, "threads", "must be in [1, 256], got " + str(o.threads),
          "pass e.g. --threads 1");
  require(one_of(o.precision, {"fp32", "bf16", "fp16"}), "precision", "unknown precision '" + o.precision + "'",
          "use fp32, bf16 or fp16");
  require(one_of(o.device, {"cpu", "cuda"}), "device", "unknown device '" + o.device + "'", "use cpu or cuda");
  require(o.resume.empty() || o.init_weights.empty(), "resume/init_weights", "both given",
          "a checkpoint already holds the weights: drop --init");
  // Stage 08: the kind's name, and selective checkpointing, which chunked and flash refuse. Which
  // models run chunked and flash is the model's to say (TrainModel::set_attention).
  check_attention_policy(parse_attention_kind(o.attention), o.checkpoint);
  o.adamw.validate();
  // A resumed run follows the schedule its checkpoint holds (the trainer checks that one).
  if (o.resume.empty() && o.steps > 0) o.lr_schedule.validate(o.steps);
}

// The checks of the parallel layout that need no world size.
void validate_layout(const TrainOptions& o, const GPTConfig& c) {
  const ParallelOptions& p = o.parallel;
  require(p.dp >= 0, "dp", "must be >= 0, got " + str(p.dp), "pass --dp D, or leave it out (0: the ranks left over)");
  require(p.tp >= 1, "tp", "must be at least 1, got " + str(p.tp), "use --tp 1 for no tensor parallelism");
  require(p.pp >= 1, "pp", "must be at least 1, got " + str(p.pp), "use --pp 1 for no pipeline");
  require(p.micro_batches >= 0, "micro_batches", "must be >= 0, got " + str(p.micro_batches),
          "pass e.g. --micro-batches 4, or leave it out to use --grad-accum");
  require(p.micro_batches == 0 || o.grad_accum == 1 || p.micro_batches == o.grad_accum, "micro_batches",
          "--micro-batches " + str(p.micro_batches) + " and --grad-accum " + str(o.grad_accum) +
              " both set the micro-batches of a step",
          "give only one of them");
  // The schedule's own rules (its name; interleaved:V's V and its m) are the schedule's to check:
  // parse_pipeline_schedule validates the shape it returns.
  const PipelineShape shape = parse_pipeline_schedule(p.schedule, p.pp, o.micro_batches());
  require(p.pp > 1 || p.schedule == "1f1b", "schedule", "--schedule " + p.schedule + " needs a pipeline",
          "add --pp P with P >= 2, or drop --schedule");
  require(shape.model_stages() <= c.num_layers, "pp",
          "--pp " + str(p.pp) + " x " + str(shape.chunks) + " model chunks per rank need at least " +
              str(shape.model_stages()) + " layers, and the model has " + str(c.num_layers),
          "use fewer pipeline stages (or chunks), or a deeper model (--layers)");
  require(p.tp <= c.num_heads, "tp",
          "--tp " + str(p.tp) + " is more ranks than the model's " + str(c.num_heads) +
              " attention heads (tensor parallelism gives each rank whole heads)",
          "use --tp at most " + str(c.num_heads) + ", or a model with more --heads");
  require(c.num_heads % p.tp == 0, "tp",
          "--tp " + str(p.tp) + " does not divide the model's " + str(c.num_heads) + " heads",
          "choose a --tp that divides the head count (or change --heads)");
  require(!p.sequence_parallel || p.tp > 1, "sequence_parallel", "--sequence-parallel splits the tensor-parallel group",
          "add --tp T with T >= 2, or drop --sequence-parallel");
  require(p.zero >= 0 && p.zero <= 3, "zero", "must be 0, 1, 2 or 3, got " + str(p.zero),
          "use --zero 1 (optimizer state), 2 (+ gradients) or 3 (+ parameters)");
  require(!p.offload || p.zero >= 1, "offload", "--offload moves ZeRO's optimizer shards to the host",
          "add --zero 1 (or 2, 3), or drop --offload");
  require(!p.reshard || p.zero >= 1, "reshard", "--reshard re-cuts a ZeRO checkpoint's shards for this run",
          "add --zero 1 (or 2, 3), or drop --reshard");
  require(one_of(p.ddp, {"auto", "none", "naive", "bucketed"}), "ddp", "unknown mode '" + p.ddp + "'",
          "use naive or bucketed (or none for one process)");
  require(one_of(p.allreduce, {"builtin", "ring"}), "allreduce", "unknown algorithm '" + p.allreduce + "'",
          "use builtin (the backend's) or ring (ours)");
  require(p.bucket_mb > 0 && p.first_bucket_mb > 0, "bucket_mb", "bucket sizes must be positive",
          "pass e.g. --bucket-mb 25 --first-bucket-mb 1");
  require(one_of(p.backend, {"auto", "local", "mpi", "nccl"}), "backend", "unknown backend '" + p.backend + "'",
          "choose auto, local, mpi or nccl");
  require(p.backend != "nccl" || o.device == "cuda", "backend",
          "nccl moves GPU memory, but the run uses --device " + o.device,
          "use --backend nccl with --device cuda, or --backend mpi for --device cpu");
  // NaN or infinity would never expire, and a negative limit means nothing: refused by name.
  require(std::isfinite(p.comm_timeout) && p.comm_timeout >= 0, "comm_timeout",
          "must be a finite number of seconds >= 0, got " + num(p.comm_timeout),
          "pass e.g. --comm-timeout 60 (0 turns the watchdog off)");
  require(p.ddp != "none" || p.dp <= 1, "ddp", "--ddp none, but --dp " + str(p.dp) + " asks for replicas",
          "use --ddp naive or bucketed, or --dp 1");
}

}  // namespace

GPTConfig TrainOptions::model_config() const { return gpt_config_from(config, shape); }

int TrainOptions::data_parallel_size(int world_size) const {
  if (parallel.dp > 0) return parallel.dp;
  const int model_ranks = parallel.tp * parallel.pp;
  return world_size > 0 && world_size % model_ranks == 0 ? world_size / model_ranks : 1;
}

void TrainOptions::validate(int world_size) const {
  const GPTConfig c = model_config();  // throws for an unknown name
  validate_single_device(*this, c);
  validate_layout(*this, c);
  const ParallelOptions& p = parallel;
  if (world_size > 0) {
    const int model_ranks = p.tp * p.pp;
    require(p.dp > 0 || world_size % model_ranks == 0, "dp",
            "--tp " + str(p.tp) + " x --pp " + str(p.pp) + " = " + str(model_ranks) + " does not divide the " +
                str(world_size) + " ranks of this job",
            "start a multiple of " + str(model_ranks) + " ranks (mpirun -np N), or change --tp/--pp");
    const int d = data_parallel_size(world_size);
    require(d * model_ranks == world_size, "dp",
            "--dp " + str(d) + " x --tp " + str(p.tp) + " x --pp " + str(p.pp) + " = " + str(d * model_ranks) +
                " ranks, but this job has " + str(world_size),
            "start it with mpirun -np " + str(d * model_ranks) + ", or change the sizes");
    require(d == 1 || p.ddp != "none", "ddp", "--ddp none, but the job has " + str(d) + " data-parallel replicas",
            "use --ddp naive or bucketed, or start one process");
  }
  const int d = data_parallel_size(world_size);
  const int m = micro_batches();
  check_batch_split(batch, d, m);
}

void require_cpu_fp32(const TrainOptions& o, const std::string& flag, const std::string& name,
                      const std::string& what) {
  require(o.precision == "fp32", "precision",
          flag + ": " + what + " run in fp32 in this build, and --precision " + o.precision + " was asked for",
          "use --precision fp32 with " + name);
  require_cpu(o, flag, name, what);
}

void require_cpu(const TrainOptions& o, const std::string& flag, const std::string& name, const std::string& what) {
  require(o.device == "cpu", "device",
          flag + ": " + what + " run on the CPU in this build, and --device " + o.device + " was asked for",
          "use --device cpu with " + name);
}

void check_batch_split(int batch, int ranks, int micro_batches) {
  require(batch % (ranks * micro_batches) == 0, "batch",
          str(batch) + " rows do not split into " + str(ranks) + " ranks x " + str(micro_batches) + " micro-batches",
          "choose --batch divisible by (ranks x --grad-accum) = " + str(ranks * micro_batches));
}

// The JSON form. Each field is listed once in each direction; the round-trip test
// (tests/train/test_options.cpp) compares every field bitwise, so a field added to the structs
// but forgotten here fails it.
nlohmann::json options_to_json(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  const AdamWConfig& a = o.adamw;
  return {
      {"config", o.config},
      {"shape",
       {{"vocab_size", o.shape.vocab_size},
        {"context", o.shape.max_seq_len},
        {"channels", o.shape.channels},
        {"layers", o.shape.num_layers},
        {"heads", o.shape.num_heads}}},
      {"steps", o.steps},
      {"batch", o.batch},
      {"seq_len", o.seq_len},
      {"adamw",
       {{"lr", a.lr},
        {"beta1", a.beta1},
        {"beta2", a.beta2},
        {"eps", a.eps},
        {"weight_decay", a.weight_decay},
        {"grad_clip", a.grad_clip}}},
      {"lr_schedule",
       {{"kind", LrSchedule::kind_name(o.lr_schedule.kind)},
        {"warmup_steps", o.lr_schedule.warmup_steps},
        {"decay_steps", o.lr_schedule.decay_steps},
        {"min_lr_fraction", o.lr_schedule.min_lr_fraction}}},
      {"seed", o.seed},
      {"data", o.data},
      {"val_fraction", o.val_fraction},
      {"val_every", o.val_every},
      {"val_batches", o.val_batches},
      {"threads", o.threads},
      {"grad_accum", o.grad_accum},
      {"checkpoint", o.checkpoint.describe()},
      {"attention", o.attention},
      {"precision", o.precision},
      {"parallel",
       {{"dp", p.dp},
        {"tp", p.tp},
        {"pp", p.pp},
        {"micro_batches", p.micro_batches},
        {"schedule", p.schedule},
        {"sequence_parallel", p.sequence_parallel},
        {"zero", p.zero},
        {"offload", p.offload},
        {"reshard", p.reshard},
        {"ddp", p.ddp},
        {"allreduce", p.allreduce},
        {"bucket_mb", p.bucket_mb},
        {"first_bucket_mb", p.first_bucket_mb},
        {"backend", p.backend},
        {"trace", p.trace},
        {"comm_timeout", p.comm_timeout}}},
      {"device", o.device},
      {"init_weights", o.init_weights},
      {"save_weights", o.save_weights},
      {"save_checkpoint", o.save_checkpoint},
      {"resume", o.resume},
      {"metrics", o.metrics},
  };
}

namespace {

// Reads key from an object, refusing a missing key or a value of the wrong type by name.
template <typename T>
void read(const nlohmann::json& j, const char* key, T& out, const std::string& where) {
  require(j.contains(key), "options", where + " has no '" + key + "'",
          "write the file with this scalelab (scalelab ladder writes one per multi-rank rung)");
  try {
    out = j.at(key).get<T>();
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError("options: " + where + "'s '" + key + "' has the wrong type (" + e.what() +
                      "); write the file with this scalelab");
  }
}

// Refuses keys that this version does not know (a typo, or a file from another version).
void no_other_keys(const nlohmann::json& j, std::initializer_list<const char*> known, const std::string& where) {
  require(j.is_object(), "options", where + " is not a JSON object", "write the file with this scalelab");
  for (const auto& [key, value] : j.items())
    require(std::any_of(known.begin(), known.end(), [&key](const char* k) { return key == k; }), "options",
            where + " has an unknown key '" + key + "'", "remove it, or use the scalelab that wrote the file");
}

}  // namespace

TrainOptions options_from_json(const nlohmann::json& j) {
  TrainOptions o;
  no_other_keys(j, {"config",  "shape",        "lr_schedule",  "steps",           "batch",     "seq_len",
                    "adamw",   "seed",         "data",         "val_fraction",    "val_every", "val_batches",
                    "threads", "grad_accum",   "checkpoint",   "attention",       "precision", "parallel",
                    "device",  "init_weights", "save_weights", "save_checkpoint", "resume",    "metrics"},
                "the options");
  const std::string top = "the options";
  read(j, "config", o.config, top);
  read(j, "steps", o.steps, top);
  read(j, "batch", o.batch, top);
  read(j, "seq_len", o.seq_len, top);
  read(j, "seed", o.seed, top);
  read(j, "data", o.data, top);
  read(j, "val_fraction", o.val_fraction, top);
  read(j, "val_every", o.val_every, top);
  read(j, "val_batches", o.val_batches, top);
  read(j, "threads", o.threads, top);
  read(j, "grad_accum", o.grad_accum, top);
  std::string checkpoint;
  read(j, "checkpoint", checkpoint, top);
  o.checkpoint = CheckpointPolicy::parse(checkpoint);
  read(j, "attention", o.attention, top);
  read(j, "precision", o.precision, top);
  read(j, "device", o.device, top);
  read(j, "init_weights", o.init_weights, top);
  read(j, "save_weights", o.save_weights, top);
  read(j, "save_checkpoint", o.save_checkpoint, top);
  read(j, "resume", o.resume, top);
  read(j, "metrics", o.metrics, top);

  nlohmann::json a, p, shape, lrs;
  read(j, "shape", shape, top);
  read(j, "lr_schedule", lrs, top);
  read(j, "adamw", a, top);
  read(j, "parallel", p, top);
  const std::string sw = "the options' shape";
  no_other_keys(shape, {"vocab_size", "context", "channels", "layers", "heads"}, sw);
  read(shape, "vocab_size", o.shape.vocab_size, sw);
  read(shape, "context", o.shape.max_seq_len, sw);
  read(shape, "channels", o.shape.channels, sw);
  read(shape, "layers", o.shape.num_layers, sw);
  read(shape, "heads", o.shape.num_heads, sw);

  const std::string lw = "the options' lr_schedule";
  no_other_keys(lrs, {"kind", "warmup_steps", "decay_steps", "min_lr_fraction"}, lw);
  std::string kind;
  read(lrs, "kind", kind, lw);
  o.lr_schedule.kind = LrSchedule::parse_kind(kind);
  read(lrs, "warmup_steps", o.lr_schedule.warmup_steps, lw);
  read(lrs, "decay_steps", o.lr_schedule.decay_steps, lw);
  read(lrs, "min_lr_fraction", o.lr_schedule.min_lr_fraction, lw);

  const std::string aw = "the options' adamw";
  no_other_keys(a, {"lr", "beta1", "beta2", "eps", "weight_decay", "grad_clip"}, aw);
  read(a, "lr", o.adamw.lr, aw);
  read(a, "beta1", o.adamw.beta1, aw);
  read(a, "beta2", o.adamw.beta2, aw);
  read(a, "eps", o.adamw.eps, aw);
  read(a, "weight_decay", o.adamw.weight_decay, aw);
  read(a, "grad_clip", o.adamw.grad_clip, aw);

  const std::string pw = "the options' parallel";
  no_other_keys(p,
                {"dp", "tp", "pp", "micro_batches", "schedule", "sequence_parallel", "zero", "offload", "reshard",
                 "ddp", "allreduce", "bucket_mb", "first_bucket_mb", "backend", "trace", "comm_timeout"},
                pw);
  ParallelOptions& q = o.parallel;
  read(p, "dp", q.dp, pw);
  read(p, "tp", q.tp, pw);
  read(p, "pp", q.pp, pw);
  read(p, "micro_batches", q.micro_batches, pw);
  read(p, "schedule", q.schedule, pw);
  read(p, "sequence_parallel", q.sequence_parallel, pw);
  read(p, "zero", q.zero, pw);
  read(p, "offload", q.offload, pw);
  read(p, "reshard", q.reshard, pw);
  read(p, "ddp", q.ddp, pw);
  read(p, "allreduce", q.allreduce, pw);
  read(p, "bucket_mb", q.bucket_mb, pw);
  read(p, "first_bucket_mb", q.first_bucket_mb, pw);
  read(p, "backend", q.backend, pw);
  read(p, "trace", q.trace, pw);
  read(p, "comm_timeout", q.comm_timeout, pw);
  return o;
}

}  // namespace scalelab
