// What the data-parallel tests share (tests/dist on the CPU, tests/gpu/ddp on the GPU): buckets
// small enough that the tiny model has several, and a token shard every rank can read.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "comm/communicator.hpp"
#include "data/tokens.hpp"
#include "dist/ddp.hpp"
#include "dist/ddp_strategy.hpp"
#include "dist/timeline.hpp"
#include "train/trainer.hpp"

namespace scalelab_test {

inline scalelab::DdpOptions small_buckets(scalelab::DdpOptions::Mode mode, scalelab::DdpOptions::Algorithm algorithm) {
  scalelab::DdpOptions o;
  o.mode = mode;
  o.algorithm = algorithm;
  o.first_bucket_bytes = 4 << 10;  // several buckets even for the tiny model
  o.bucket_bytes = 16 << 10;
  return o;
}

// The trainer's strategy for DDP over `world` with these options; the gradients go through a
// communicator made by make_grad_comm when given (a GPU model's).
inline scalelab::StrategyFactory ddp_strategy(scalelab::Communicator& world, const scalelab::DdpOptions& options,
                                              scalelab::GradCommFactory make_grad_comm = {}) {
  return [&world, options, make_grad_comm](const scalelab::TrainOptions&) {
    return std::make_unique<scalelab::DdpStrategy>(world, options, nullptr, make_grad_comm);
  };
}

// The DDP strategy a trainer was built with.
inline scalelab::DdpStrategy& ddp_of(scalelab::Trainer& trainer) {
  return dynamic_cast<scalelab::DdpStrategy&>(trainer.strategy());
}

// 3000 tokens below 64 in the temporary directory, written by rank 0 (a barrier later every
// rank can read it). file_name keeps tests that may run at the same time apart.
// A file in the temporary directory for this world size: temp/np<size>_<name>. ctest runs the
// np2/np3/np4 variants of an MPI test at the same time, and they must not share files.
inline std::string per_world_temp_path(const scalelab::Communicator& world, const std::string& name) {
  return std::filesystem::temp_directory_path() / ("np" + std::to_string(world.size()) + "_" + name);
}

// The file name gets the world size (np4_<name>), and rank 0 writes it under a name of its own
// and renames it into place (atomic): ctest runs the np2/np4/np8 variants of a test at the same
// time, and a rank of one must never read the file while another's rank 0 is rewriting it.
inline std::string tiny_token_shard(scalelab::Communicator& world, const std::string& file_name) {
  const std::string path = per_world_temp_path(world, file_name);
  std::vector<std::uint16_t> tokens;
  for (int i = 0; i < 3000; ++i) tokens.push_back(static_cast<std::uint16_t>((i * 5 + i / 7) % 64));
  if (world.rank() == 0) {
    const std::string staging = path + "." + std::to_string(::getpid()) + ".tmp";
    scalelab::write_token_shard(staging, tokens);
    std::filesystem::rename(staging, path);
  }
  world.barrier();
  return path;
}

// From one step's DDP timeline: the bucket all-reduces, and how many of them started before
// backward's last compute stretch ended (during backward, hence possibly overlapped).
struct BucketLaunches {
  std::size_t comm_events = 0, started_early = 0;
};
inline BucketLaunches bucket_launches(const std::vector<scalelab::TimelineEvent>& events) {
  double backward_end = 0;
  for (const auto& e : events)
    if (e.category == "compute") backward_end = std::max(backward_end, e.start_us + e.duration_us);
  BucketLaunches out;
  for (const auto& e : events)
    if (e.category == "comm") {
      ++out.comm_events;
      if (e.start_us < backward_end) ++out.started_early;
    }
  return out;
}

// The data-parallel tests' run: the tiny config on `data`, `batch` rows, AdamW at 3e-3.
inline scalelab::TrainOptions tiny_ddp_options(const std::string& data, int batch, std::uint64_t seed) {
  scalelab::TrainOptions o;
  o.config = "tiny";
  o.batch = batch;
  o.data = data;
  o.seed = seed;
  o.adamw.lr = 3e-3;
  return o;
}

// `steps` optimizer steps of a data-parallel trainer: the first and the last step's loss, this
// rank's parameters afterwards and rank 0's (broadcast), for the caller to compare bitwise.
struct ReplicaRun {
  double first_loss = 0, last_loss = 0;
  std::vector<float> mine, root;
};
inline ReplicaRun train_replica(scalelab::Trainer& trainer, scalelab::Communicator& world, int steps) {
  ReplicaRun r;
  for (int i = 0; i < steps; ++i) {
    const double loss = trainer.step().loss;
    if (i == 0) r.first_loss = loss;
    r.last_loss = loss;
  }
  const scalelab::TrainModel& m = trainer.model();
  r.mine.assign(m.master_params(), m.master_params() + m.num_params());
  r.root = r.mine;
  world.broadcast(r.root.data(), r.root.size(), 0);
  return r;
}

}  // namespace scalelab_test
