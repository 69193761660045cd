// Training checkpoints (stage 00; stage 03 adds the loss-scale fields; the lr schedule is
// optional): one safetensors file with the flat parameters and both Adam moments as tensors, and
// everything else as decimal strings in the metadata. Loading checks the format tag, every field,
// every tensor's size, and (for resume) that the checkpoint's model shape is the run's.
#include "io/checkpoint.hpp"

#include <charconv>
#include <cmath>
#include <map>
#include <system_error>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/params.hpp"

namespace scalelab {

namespace {

constexpr const char* kFormat = "scalelab-checkpoint-1";
constexpr const char* kTensors[] = {"params", "adam.m", "adam.v"};

// Shortest decimal that reads back to the same double (C++17 to_chars round-trip guarantee).
std::string double_string(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), x);
  return std::string(buf, r.ptr);
}

// A metadata field parsed as a whole-string number of type T.
template <typename T>
T parse_field(const std::map<std::string, std::string>& md, const std::string& key, const std::string& where) {
  const auto it = md.find(key);
  require(it != md.end(), where, "metadata field \"" + key + "\" is missing",
          "the file is incomplete or from another program; use a checkpoint written by scalelab");
  const std::string& s = it->second;
  T value{};
  const auto r = std::from_chars(s.data(), s.data() + s.size(), value);
  require(r.ec == std::errc() && r.ptr == s.data() + s.size() && !s.empty(), where,
          "metadata field \"" + key + "\" = '" + s + "' is not a valid number",
          "the file is damaged; use another checkpoint");
  return value;
}

std::string shape_summary(const GPTConfig& c) {
  return "V=" + std::to_string(c.vocab_size) + " T=" + std::to_string(c.max_seq_len) +
         " C=" + std::to_string(c.channels) + " L=" + std::to_string(c.num_layers) +
         " NH=" + std::to_string(c.num_heads);
}

}  // namespace

void save_checkpoint(const std::string& path, const TrainCheckpoint& ckpt) {
  save_checkpoint_shard(path, ckpt, CheckpointShard{0, 1, 0, ParamLayout(ckpt.config).num_params()});
}

void save_checkpoint_shard(const std::string& path, const TrainCheckpoint& ckpt, const CheckpointShard& shard) {
  const std::string where = "checkpoint '" + path + "'";
  ckpt.config.validate();
  const std::size_t n = shard.end - shard.begin;
  const std::vector<float>* parts[] = {&ckpt.params, &ckpt.adam_m, &ckpt.adam_v};
  for (int i = 0; i < 3; ++i)
    require(parts[i]->size() == n, where,
            std::string(kTensors[i]) + " has " + std::to_string(parts[i]->size()) + " values but config '" +
                ckpt.config.name + (shard.ranks > 1 ? "' gives this shard " : "' has ") + std::to_string(n) +
                " parameters",
            "save the state of a model built from the same config");
  const GPTConfig& c = ckpt.config;
  std::map<std::string, std::string> md = {
      {"format", kFormat},
      {"config", c.name},
      {"vocab_size", std::to_string(c.vocab_size)},
      {"max_seq_len", std::to_string(c.max_seq_len)},
      {"channels", std::to_string(c.channels)},
      {"num_layers", std::to_string(c.num_layers)},
      {"num_heads", std::to_string(c.num_heads)},
      {"step", std::to_string(ckpt.step)},
      {"data_rng_state", std::to_string(ckpt.data_rng_state)},
      {"batches_served", std::to_string(ckpt.batches_served)},
      {"loss_scale", double_string(ckpt.loss_scale)},
      {"loss_scale_clean_steps", std::to_string(ckpt.loss_scale_clean_steps)},
      {"lr_schedule", LrSchedule::kind_name(ckpt.lr_schedule.kind)},
      {"warmup_steps", std::to_string(ckpt.lr_schedule.warmup_steps)},
      {"decay_steps", std::to_string(ckpt.lr_schedule.decay_steps)},
      {"min_lr_fraction", double_string(ckpt.lr_schedule.min_lr_fraction)},
      {"total_steps", std::to_string(ckpt.total_steps)},
  };  // the trailing comma keeps clang-format's one-entry-per-line layout
  if (shard.ranks > 1) {
    md["zero_rank"] = std::to_string(shard.rank);
    md["zero_ranks"] = std::to_string(shard.ranks);
    md["shard_begin"] = std::to_string(shard.begin);
    md["shard_end"] = std::to_string(shard.end);
  }
  std::vector<TensorRef> tensors;
  for (int i = 0; i < 3; ++i) tensors.push_back({kTensors[i], "F32", {n}, parts[i]->data()});
  write_safetensors(path, tensors, md);
}

TrainCheckpoint load_checkpoint(const std::string& path, const GPTConfig* expected, CheckpointShard* shard) {
  const std::string where = "checkpoint '" + path + "'";
  const SafetensorsFile file(path, "checkpoint");
  const auto& md = file.metadata();
  const auto fmt = md.find("format");
  require(fmt != md.end(), where, "the file has no \"format\" metadata, so it is not a scalelab training checkpoint",
          "pass a file written by save_checkpoint (model weights alone are loaded with load_weights)");
  require(fmt->second == kFormat, where, "its format is '" + fmt->second + "' but this version reads '" + kFormat + "'",
          "pass a file written by save_checkpoint (model weights alone are loaded with load_weights)");

  TrainCheckpoint ck;
  GPTConfig& c = ck.config;
  const auto name = md.find("config");
  require(name != md.end(), where, "metadata field \"config\" is missing",
          "the file is incomplete; use a checkpoint written by scalelab");
  c.name = name->second;
  c.vocab_size = parse_field<int>(md, "vocab_size", where);
  c.max_seq_len = parse_field<int>(md, "max_seq_len", where);
  c.channels = parse_field<int>(md, "channels", where);
  c.num_layers = parse_field<int>(md, "num_layers", where);
  c.num_heads = parse_field<int>(md, "num_heads", where);
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(where + ": its model config is invalid (" + e.what() + "); the file is damaged");
  }
  ck.step = parse_field<long>(md, "step", where);
  ck.data_rng_state = parse_field<std::uint64_t>(md, "data_rng_state", where);
  ck.batches_served = parse_field<std::uint64_t>(md, "batches_served", where);
  ck.loss_scale = parse_field<double>(md, "loss_scale", where);
  ck.loss_scale_clean_steps = parse_field<long>(md, "loss_scale_clean_steps", where);
  require(ck.step >= 0 && ck.loss_scale_clean_steps >= 0 && std::isfinite(ck.loss_scale) && ck.loss_scale >= 0, where,
          "step, loss_scale or loss_scale_clean_steps is negative or not finite", "the file is damaged");
  // The lr schedule: absent from checkpoints written before it was stored, which ran at a
  // constant lr (the LrSchedule default); when present, every field must be.
  const auto schedule = md.find("lr_schedule");
  if (schedule != md.end()) {
    const int warmup = parse_field<int>(md, "warmup_steps", where);
    const long decay = parse_field<long>(md, "decay_steps", where);
    const double min_fraction = parse_field<double>(md, "min_lr_fraction", where);
    try {
      ck.lr_schedule = LrSchedule::parse(schedule->second, warmup, decay, min_fraction);
    } catch (const ConfigError& e) {
      throw ConfigError(where + ": its lr schedule is invalid (" + e.what() + "); the file is damaged");
    }
    ck.total_steps = parse_field<long>(md, "total_steps", where);
    require(ck.total_steps >= 0, where, "total_steps is negative", "the file is damaged");
  }

  if (expected) {
    struct Field {
      const char* name;
      int saved, wanted;
    };
    const Field fields[] = {{"vocab_size", c.vocab_size, expected->vocab_size},
                            {"max_seq_len", c.max_seq_len, expected->max_seq_len},
                            {"channels", c.channels, expected->channels},
                            {"num_layers", c.num_layers, expected->num_layers},
                            {"num_heads", c.num_heads, expected->num_heads}};
    for (const auto& f : fields)
      require(f.saved == f.wanted, where,
              "was saved for config " + c.name + " (" + f.name + "=" + std::to_string(f.saved) +
                  ") but the run uses config " + expected->name + " (" + f.name + "=" + std::to_string(f.wanted) + ")",
              "resume with " + gpt_config_flags(c) + ", or start a new run without resuming");
  }

  const std::size_t whole = ParamLayout(c).num_params();
  CheckpointShard cut{0, 1, 0, whole};
  if (md.count("zero_ranks")) {
    cut.rank = parse_field<int>(md, "zero_rank", where);
    cut.ranks = parse_field<int>(md, "zero_ranks", where);
    cut.begin = parse_field<std::size_t>(md, "shard_begin", where);
    cut.end = parse_field<std::size_t>(md, "shard_end", where);
    require(cut.ranks >= 1 && cut.rank >= 0 && cut.rank < cut.ranks && cut.begin <= cut.end && cut.end <= whole, where,
            "its ZeRO shard fields are inconsistent", "the file is damaged; use another checkpoint");
    require(shard != nullptr, where,
            "holds rank " + std::to_string(cut.rank) + "'s shard of a ZeRO checkpoint sharded over " +
                std::to_string(cut.ranks) + " ranks",
            "resume it with --zero 1, 2 or 3 under mpirun -np " + std::to_string(cut.ranks) +
                " (or add --reshard for another number of ranks)");
  }
  if (shard) *shard = cut;
  const std::size_t n = cut.end - cut.begin;
  std::vector<float>* parts[] = {&ck.params, &ck.adam_m, &ck.adam_v};
  for (int i = 0; i < 3; ++i) {
    const std::string t = kTensors[i];
    require(file.has(t), where, "tensor '" + t + "' is missing",
            "the file is not a complete training checkpoint; use one written by save_checkpoint");
    const auto& e = file.entries().at(t);
    require(e.dtype == "F32" && e.shape.size() == 1 && e.shape[0] == n, where,
            "tensor '" + t + "' is " + e.dtype + " with " + std::to_string(e.numel()) + " values but config " + c.name +
                " (" + shape_summary(c) + ") needs F32 with " + std::to_string(n),
            "the file is damaged or was edited; use another checkpoint");
    *parts[i] = file.read_f32(t);
  }
  for (const auto& [tname, e] : file.entries()) {
    (void)e;
    require(tname == "params" || tname == "adam.m" || tname == "adam.v", where, "unexpected tensor '" + tname + "'",
            "use a checkpoint written by save_checkpoint");
  }
  return ck;
}

std::vector<float> held_by_name(const GPTConfig& config, const ParamLayout& held, const std::vector<float>& whole) {
  const ParamLayout layout(config);
  require(whole.size() == layout.num_params(), "resume",
          "the checkpoint holds " + std::to_string(whole.size()) + " parameters, config " + config.name + " has " +
              std::to_string(layout.num_params()),
          "resume from a checkpoint written by scalelab train --save-state for this config");
  std::vector<float> part(held.num_params(), 0.0f);
  for (const auto& t : held.tensors()) {
    const ParamTensor& w = layout.find(t.name);  // ConfigError naming a tensor the config lacks
    std::copy(whole.begin() + static_cast<std::ptrdiff_t>(w.offset),
              whole.begin() + static_cast<std::ptrdiff_t>(w.offset + w.numel),
              part.begin() + static_cast<std::ptrdiff_t>(t.offset));
  }
  return part;
}

}  // namespace scalelab
