// The training loop shared by every stage.
#include "train/trainer.hpp"

#include <chrono>

#include "core/blas.hpp"
#include "core/error.hpp"
#include "data/tokens.hpp"
#include "io/safetensors.hpp"
#include "model/batch_check.hpp"
#include "model/layers/attention_kind.hpp"
#include "train/single_device.hpp"

namespace scalelab {

double Trainer::flops_per_token() const {
  const GPTConfig& c = model_->config();
  return 6.0 * static_cast<double>(model_->num_params()) + 12.0 * c.num_layers * c.channels * T_;
}

Trainer::Trainer(const TrainOptions& options, MemoryTracker* tracker, const TrainModelFactory& factory,
                 const StrategyFactory& strategies)
    : options_(options), tracker_(tracker) {
  options_.validate();
  const GPTConfig config = options_.model_config();
  if (strategies) {
    strategy_ = strategies(options_);
  } else {
    require(options_.parallel.single_device(), "parallel",
            "the options ask for parallel training, but this program gave the trainer no parallel strategies",
            "train through scalelab train (mpirun -np N), or pass make_strategy_factory(world) to the Trainer");
    strategy_ = std::make_unique<SingleDevice>();
  }

  T_ = options_.seq_len > 0 ? options_.seq_len : config.max_seq_len;
  set_blas_threads(options_.threads);

  const std::vector<std::uint16_t> tokens = options_.data.empty() ? load_default_corpus() : load_tokens(options_.data);
  check_data_tokens(tokens.data(), tokens.size(), config);
  data_ = split_tokens(tokens, options_.val_fraction, T_);
  train_loader_ = std::make_unique<DataLoader>(&data_.train, options_.batch, T_, options_.seed + 1);

  require(factory || options_.device == "cpu", "device",
          "'" + options_.device + "' was asked for, but this program gave the trainer no model factory for it",
          "use --device cpu, or a scalelab built with CUDA");
  const TrainModelFactory whole = factory ? factory : TrainModelFactory(make_train_model);
  model_ = strategy_->make_model(config, options_.precision, tracker_, whole);
  model_->set_checkpoint_policy(options_.checkpoint);
  model_->set_attention(parse_attention_kind(options_.attention));  // stage 08; refused by models without it
  // A model that keeps m and v on its device counts them itself (the AdamW here is then a host
  // mirror for checkpoints, not memory of the run); one that offloads them says where they live.
  optimizer_ = std::make_unique<AdamW>(model_->num_params(), options_.adamw, model_->optimizer_tracker(tracker_));
  scaler_.enabled = options_.precision == "fp16";
  schedule_ = options_.lr_schedule;
  schedule_steps_ = options_.steps;
  inputs_.resize(static_cast<std::size_t>(options_.batch) * T_);
  targets_.resize(inputs_.size());

  if (!options_.init_weights.empty()) {
    std::vector<float> file(ParamLayout(config).num_params());
    load_weights(options_.init_weights, config, file.data());
    model_->set_master_params(strategy_->held_values(*model_, file).data());  // what this rank holds
  } else {
    model_->init_weights(options_.seed);
  }

  strategy_->attach(StrategyContext{*model_, *optimizer_, options_, tracker_, T_, run_description()});
  // Validation runs in pieces of the training micro-batch (see validation_loss()).
  const int pieces = options_.micro_batches() * strategy_->data_parallel_size();
  val_loader_ = std::make_unique<DataLoader>(&data_.val, options_.batch / pieces, T_, options_.seed + 2);
  if (!options_.resume.empty()) restore_held(strategy_->load_checkpoint(options_.resume, *model_));
}

std::string Trainer::run_description() const {
  const GPTConfig& c = model_->config();
  return "config " + c.name + " (V=" + std::to_string(c.vocab_size) + " T=" + std::to_string(T_) +
         " C=" + std::to_string(c.channels) + " L=" + std::to_string(c.num_layers) +
         " NH=" + std::to_string(c.num_heads) + "), seed " + std::to_string(options_.seed) + ", batch " +
         std::to_string(options_.batch) + ", grad-accum " + std::to_string(options_.micro_batches()) + ", precision " +
         options_.precision + ", " + std::to_string(data_.train.size() + data_.val.size()) + " tokens";
}

Trainer::~Trainer() = default;

StepStats Trainer::step() {
  const auto t0 = std::chrono::steady_clock::now();
  StepStats s;
  model_->zero_grad();
  train_loader_->next_batch(inputs_.data(), targets_.data());  // the global batch, alike on every rank
  s.loss_scale = scaler_.loss_scale();
  const GlobalBatch batch{inputs_.data(), targets_.data(), options_.batch, T_, options_.micro_batches()};
  strategy_->begin_step(batch);
  const double local_loss = strategy_->run_micro_batches(*model_, batch, s.loss_scale);
  strategy_->sync_gradients(*model_);
  s.loss = strategy_->mean_loss(local_loss);
  s.lr = schedule_.lr_at(options_.adamw.lr, optimizer_->step_count(), schedule_steps_);
  const auto outcome = strategy_->optimizer_step(*model_, *optimizer_, s.lr, 1.0 / s.loss_scale,
                                                 options_.adamw.grad_clip);
  // After the update: a strategy may communicate in it (ZeRO all-gathers the parameters).
  const StepCommReport comm = strategy_->step_report();
  s.comm_hidden_fraction = comm.hidden_fraction;
  s.comm_seconds = comm.comm_seconds;
  s.comm_bytes_sent = comm.bytes_sent;
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
  const int pieces = options_.micro_batches() * strategy_->data_parallel_size();
  const int micro = options_.batch / pieces;
  const int count = options_.val_batches * pieces;
  std::vector<int> x(static_cast<std::size_t>(micro) * T_), y(x.size());
  double total = 0;
  for (int i = 0; i < count; ++i) {
    val_loader_->sequential_batch(static_cast<std::size_t>(i), x.data(), y.data());
    total += strategy_->evaluate(*model_, x.data(), y.data(), micro, T_);
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
  c.lr_schedule = schedule_;
  c.total_steps = schedule_steps_;
  strategy_->save_state(c);
  return c;
}

void Trainer::restore(const TrainCheckpoint& whole) {
  // The checkpoint holds the whole model; this rank takes what its model holds (a pipeline
  // stage's tensors, a tensor-parallel shard, a ZeRO shard).
  restore_held(strategy_->held_checkpoint(*model_, whole));
}

void Trainer::restore_held(const TrainCheckpoint& c) {
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
  // The schedule continues as it was: a checkpoint written before schedules were stored has
  // total_steps 0 and a constant schedule, under which the lr does not depend on the total.
  const LrSchedule fresh;
  require(options_.lr_schedule == fresh || options_.lr_schedule == c.lr_schedule, "lr_schedule",
          "the checkpoint was trained with '" + c.lr_schedule.describe(c.total_steps) + "', the options ask for '" +
              options_.lr_schedule.describe(options_.steps) + "'",
          "drop the schedule flags to continue the checkpoint's schedule");
  schedule_ = c.lr_schedule;
  schedule_steps_ = c.total_steps > 0 ? c.total_steps : options_.steps;
  strategy_->load_state(c);
}

void Trainer::save_checkpoint(const std::string& path) const { strategy_->save_checkpoint(checkpoint(), path); }

void Trainer::save_weights(const std::string& path) const { strategy_->save_weights(*model_, path); }

}  // namespace scalelab
