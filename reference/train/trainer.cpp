// The training loop shared by every stage.
#include "train/trainer.hpp"

#include <chrono>

#include "core/blas.hpp"
#include "core/error.hpp"
#include "data/tokens.hpp"
#include "io/safetensors.hpp"
#include "train/accumulate.hpp"

namespace scalelab {

void TrainOptions::validate() const {
  const GPTConfig c = gpt_config_by_name(config);  // throws for an unknown name
  require(steps >= 0, "steps", "must be non-negative, got " + std::to_string(steps), "pass e.g. --steps 100");
  require(batch >= 1 && batch <= 4096, "batch", "must be in [1, 4096], got " + std::to_string(batch),
          "pass e.g. --batch 16");
  require(seq_len >= 0 && seq_len <= c.max_seq_len, "seq_len",
          "must be in [1, " + std::to_string(c.max_seq_len) + "] for config '" + config + "', got " +
              std::to_string(seq_len),
          "use a sequence length no longer than the model's context, or 0 for the full context");
  require(grad_accum >= 1, "grad_accum", "must be at least 1, got " + std::to_string(grad_accum),
          "use --grad-accum 1 for no accumulation");
  require(batch % grad_accum == 0, "grad_accum",
          "batch " + std::to_string(batch) + " is not divisible into " + std::to_string(grad_accum) + " micro-batches",
          "choose a --grad-accum that divides --batch " + std::to_string(batch));
  require(val_every >= 0 && val_batches >= 1, "val_every/val_batches", "must be >= 0 and >= 1",
          "pass e.g. --val-every 25 --val-batches 4");
  require(threads >= 1 && threads <= 256, "threads", "must be in [1, 256], got " + std::to_string(threads),
          "pass e.g. --threads 1");
  require(precision == "fp32" || precision == "bf16" || precision == "fp16", "precision",
          "unknown precision '" + precision + "'", "use fp32, bf16 or fp16");
  require(device == "cpu" || device == "cuda", "device", "unknown device '" + device + "'", "use cpu or cuda");
  require(resume.empty() || init_weights.empty(), "resume/init_weights", "both given",
          "a checkpoint already holds the weights: drop --init");
  adamw.validate();
}

double Trainer::flops_per_token() const {
  const GPTConfig& c = model_->config();
  return 6.0 * static_cast<double>(model_->num_params()) + 12.0 * c.num_layers * c.channels * T_;
}

Trainer::Trainer(const TrainOptions& options, MemoryTracker* tracker, const TrainModelFactory& factory)
    : options_(options), tracker_(tracker) {
  options_.validate();
  const GPTConfig config = gpt_config_by_name(options_.config);
  T_ = options_.seq_len > 0 ? options_.seq_len : config.max_seq_len;
  set_blas_threads(options_.threads);

  const std::vector<std::uint16_t> tokens =
      options_.data.empty() ? load_default_corpus() : load_tokens(options_.data);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    require(tokens[i] < config.vocab_size, "data",
            "token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                " is outside the vocabulary of config '" + config.name + "' (V=" + std::to_string(config.vocab_size) + ")",
            "use a data file tokenized for this vocabulary (text files give bytes: V >= 256)");
  data_ = split_tokens(tokens, options_.val_fraction, T_);
  const int micro = options_.batch / options_.grad_accum;
  train_loader_ = std::make_unique<DataLoader>(&data_.train, options_.batch, T_, options_.seed + 1);
  val_loader_ = std::make_unique<DataLoader>(&data_.val, micro, T_, options_.seed + 2);

  require(factory || options_.device == "cpu", "device",
          "'" + options_.device + "' was asked for, but this program gave the trainer no model factory for it",
          "use --device cpu, or a scalelab built with CUDA");
  model_ = factory ? factory(config, options_.precision, tracker_)
                   : make_train_model(config, options_.precision, tracker_);
  model_->set_checkpoint_policy(options_.checkpoint);
  // A model that keeps m and v on its device counts them itself; the AdamW here is then a host
  // mirror for checkpoints, not memory of the run.
  optimizer_ = std::make_unique<AdamW>(model_->num_params(), options_.adamw,
                                       model_->owns_optimizer_state() ? nullptr : tracker_);
  scaler_.enabled = options_.precision == "fp16";
  inputs_.resize(static_cast<std::size_t>(options_.batch) * T_);
  targets_.resize(inputs_.size());

  if (!options_.resume.empty()) {
    restore(load_checkpoint(options_.resume, &config));
  } else if (!options_.init_weights.empty()) {
    std::vector<float> w(model_->num_params());
    load_weights(options_.init_weights, model_->config(), w.data());
    model_->set_master_params(w.data());
  } else {
    model_->init_weights(options_.seed);
  }
}

Trainer::~Trainer() = default;

void Trainer::enable_data_parallel(Communicator& comm, const DdpOptions& ddp, Communicator* grad_comm) {
  const int d = comm.size();
  SCALELAB_CHECK(grad_comm == nullptr || (grad_comm->size() == d && grad_comm->rank() == comm.rank()),
                 "the gradient communicator must span the same ranks as the data-parallel group");
  require(options_.batch % (d * options_.grad_accum) == 0, "batch",
          std::to_string(options_.batch) + " rows do not split into " + std::to_string(d) + " ranks x " +
              std::to_string(options_.grad_accum) + " micro-batches",
          "choose --batch divisible by (ranks x --grad-accum) = " + std::to_string(d * options_.grad_accum));
  const GPTConfig& c = model_->config();
  const std::string description =
      "config " + c.name + " (V=" + std::to_string(c.vocab_size) + " T=" + std::to_string(T_) +
      " C=" + std::to_string(c.channels) + " L=" + std::to_string(c.num_layers) + " NH=" + std::to_string(c.num_heads) +
      "), seed " + std::to_string(options_.seed) + ", batch " + std::to_string(options_.batch) + ", grad-accum " +
      std::to_string(options_.grad_accum) + ", precision " + options_.precision + ", " +
      std::to_string(data_.train.size() + data_.val.size()) + " tokens";
  check_replicas_agree(comm, description);
  // Like PyTorch's DDP: rank 0's parameters are the starting point of every replica.
  std::vector<float> p(model_->master_params(), model_->master_params() + model_->num_params());
  comm.broadcast(p.data(), p.size(), 0);
  model_->set_master_params(p.data());
  dp_comm_ = &comm;
  grad_comm_ = grad_comm ? grad_comm : &comm;
  ddp_ = std::make_unique<DataParallel>(*grad_comm_, *model_, ddp);
  val_loader_ = std::make_unique<DataLoader>(&data_.val, options_.batch / (d * options_.grad_accum), T_,
                                             options_.seed + 2);
}

StepStats Trainer::step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepStats s;
  model_->zero_grad();
  train_loader_->next_batch(inputs_.data(), targets_.data());  // the global batch, alike on every rank
  s.loss_scale = scaler_.loss_scale();
  if (ddp_) {
    const int d = dp_comm_->size(), local = options_.batch / d;
    const std::size_t offset = static_cast<std::size_t>(dp_comm_->rank()) * local * T_;
    const CommStats before = grad_comm_->stats();
    ddp_->begin_step(options_.grad_accum);
    // Scaling each rank's loss by 1/d makes the sum over ranks the gradient of the mean loss.
    s.loss = accumulate_gradients(*model_, inputs_.data() + offset, targets_.data() + offset, local, T_,
                                  options_.grad_accum, s.loss_scale / d);
    const DdpStepReport report = ddp_->finish_step();
    s.comm_hidden_fraction = report.hidden_fraction;
    s.comm_seconds = report.comm_seconds;
    for (CommOp op : {CommOp::kAllReduce, CommOp::kRingAllReduce})
      s.comm_bytes_sent += grad_comm_->stats()[op].bytes_sent - before[op].bytes_sent;
    dp_comm_->all_reduce(&s.loss, 1);  // the mean loss over the whole batch, for the report
    s.loss /= d;
  } else {
    s.loss = accumulate_gradients(*model_, inputs_.data(), targets_.data(), options_.batch, T_, options_.grad_accum,
                                  s.loss_scale);
  }
  const auto outcome = model_->optimizer_step(*optimizer_, options_.adamw.lr, 1.0 / s.loss_scale,
                                              options_.adamw.grad_clip);
  scaler_.update(outcome.skipped);
  s.skipped = outcome.skipped;
  s.grad_norm = outcome.grad_norm;
  s.step = optimizer_->step_count();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.tokens_per_s = static_cast<double>(tokens_per_step()) / s.seconds;
  return s;
}

double Trainer::validation_loss() {
  // The same rows whatever the accumulation or data parallelism: val_batches full batches, run
  // in pieces of the training micro-batch so the activation memory stays that of training
  // (every data-parallel rank computes the same validation loss).
  const int pieces = options_.grad_accum * (dp_comm_ ? dp_comm_->size() : 1);
  const int micro = options_.batch / pieces;
  const int count = options_.val_batches * pieces;
  std::vector<int> x(static_cast<std::size_t>(micro) * T_), y(x.size());
  double total = 0;
  for (int i = 0; i < count; ++i) {
    val_loader_->sequential_batch(static_cast<std::size_t>(i), x.data(), y.data());
    total += model_->forward(x.data(), y.data(), micro, T_);
  }
  return total / count;
}

TrainCheckpoint Trainer::checkpoint() const {
  TrainCheckpoint c;
  c.config = model_->config();
  const std::size_t n = model_->num_params();
  c.params.assign(model_->master_params(), model_->master_params() + n);
  model_->download_optimizer_state(*optimizer_);
  c.adam_m.assign(optimizer_->m(), optimizer_->m() + n);
  c.adam_v.assign(optimizer_->v(), optimizer_->v() + n);
  c.step = optimizer_->step_count();
  c.data_rng_state = train_loader_->rng_state();
  c.batches_served = train_loader_->batches_served();
  c.loss_scale = scaler_.enabled ? scaler_.scale : 0.0;
  c.loss_scale_clean_steps = scaler_.clean_steps;
  return c;
}

void Trainer::restore(const TrainCheckpoint& c) {
  const std::size_t n = model_->num_params();
  SCALELAB_CHECK(c.params.size() == n && c.adam_m.size() == n && c.adam_v.size() == n, "checkpoint sizes");
  model_->set_master_params(c.params.data());
  std::copy(c.adam_m.begin(), c.adam_m.end(), optimizer_->m());
  std::copy(c.adam_v.begin(), c.adam_v.end(), optimizer_->v());
  model_->upload_optimizer_state(*optimizer_);
  optimizer_->set_step_count(c.step);
  train_loader_->set_rng_state(c.data_rng_state);
  train_loader_->set_batches_served(c.batches_served);
  if (scaler_.enabled && c.loss_scale > 0) {
    scaler_.scale = c.loss_scale;
    scaler_.clean_steps = c.loss_scale_clean_steps;
  }
}

void Trainer::save_checkpoint(const std::string& path) const { scalelab::save_checkpoint(path, checkpoint()); }

void Trainer::save_weights(const std::string& path) const {
  scalelab::save_weights(path, model_->config(), model_->master_params());
}

}  // namespace scalelab
