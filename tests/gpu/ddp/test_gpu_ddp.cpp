// Stage 04 on the GPU: DDP of the GPU GPT through a device-memory communicator (the host-staging
// adapter over the test's world: one local rank, or 2 MPI ranks sharing one GPU), against stage
// 01 on the CPU (Fp32TrainModel, d micro-batches of the same global batch) from the reference.
//
// Tolerances, and why they are not bitwise:
//   loss       relative 1e-5  cuBLAS and the block reductions sum in other orders than the CPU
//   gradients  relative 1e-4 by norm, per tensor (test_gpu_model's fp32 bound: the GPU's own
//              summation orders, wte's atomicAdds, plus the all-reduce's order over ranks)
// Across ranks the parameters must be bitwise identical: every rank applies the same summed
// gradients with the same kernels.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "ddp_fixtures.hpp"
#include "dist/ddp.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/dist/host_staging_communicator.hpp"
#include "kernels/model/gpu_train_model.hpp"
#include "train/accumulate.hpp"
#include "train/trainer.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;
using scalelab::cuda::DeviceBuffer;
using scalelab::cuda::GpuTrainModel;
using scalelab::cuda::HostStagingCommunicator;

namespace {
const prior::ModelShape kShape{64, 16, 32, 2, 4};
constexpr int kB = 12, kT = 16;  // 12 rows split over 1, 2, 3 or 4 ranks
constexpr std::uint64_t kSeed = 5;
constexpr double kLossTol = 1e-5, kGradTol = 1e-4;

// The ring reduces on the host, so the GPU runs the backend's all-reduce (DataParallel refuses
// the ring with a device communicator: see the errors test).
DdpOptions gpu_buckets(DdpOptions::Mode mode) { return small_buckets(mode, DdpOptions::Algorithm::kBuiltin); }

std::string tiny_shard() { return tiny_token_shard(test_world(), "scalelab_gpu_ddp_tiny.bin"); }

TrainOptions tiny_gpu_options(const std::string& data) {
  TrainOptions o = tiny_ddp_options(data, kB, kSeed);
  o.device = "cuda";
  return o;
}

TrainModelFactory gpu_factory() {
  return [](const GPTConfig& config, const std::string& precision, MemoryTracker* tracker) {
    return cuda::make_gpu_train_model(config, precision, tracker);
  };
}

cudaStream_t stream_of(TrainModel& model) { return dynamic_cast<GpuTrainModel<float>&>(model).stream(); }

// DDP's gradients staged through host memory over the host communicator, on the model's stream.
GradCommFactory staging() {
  return [](Communicator& host, TrainModel& model) -> std::unique_ptr<Communicator> {
    return std::make_unique<HostStagingCommunicator>(host, stream_of(model));
  };
}
}  // namespace

TEST_CASE("GPU DDP on d ranks equals stage 01 on the CPU with d micro-batches", "[gpu_ddp_equal]") {
  Communicator& world = test_world();
  const int d = world.size();
  const Batch batch = random_batch(kShape.V, kB, kT, 77);  // the same on every rank
  const prior::StepResult want = prior::stage01_step(kShape, kSeed, batch.tokens, batch.targets, kB, kT, d);
  for (auto mode : {DdpOptions::Mode::kNaive, DdpOptions::Mode::kBucketed}) {
    const char* mode_name = mode == DdpOptions::Mode::kNaive ? "naive" : "bucketed";
    INFO(where(world) << ", " << mode_name << ", host-staging all-reduce");
    MemoryTracker tracker;
    GpuTrainModel<float> model(config_from(kShape), &tracker);
    model.init_weights(kSeed);
    model.zero_grad();
    HostStagingCommunicator dev(world, model.stream());
    DataParallel ddp(dev, model, gpu_buckets(mode));
    const int local = kB / d;
    const std::size_t offset = static_cast<std::size_t>(world.rank()) * local * kT;
    const auto wire_before = world.stats()[CommOp::kAllReduce].bytes_sent;
    ddp.begin_step(1);
    double loss = accumulate_gradients(model, batch.tokens.data() + offset, batch.targets.data() + offset, local, kT, 1,
                                       1.0 / d);
    const DdpStepReport report = ddp.finish_step();
    const auto wire_bytes = world.stats()[CommOp::kAllReduce].bytes_sent - wire_before;
    world.all_reduce(&loss, 1);
    CHECK(loss / d == Approx(want.loss).epsilon(kLossTol));
    const std::vector<float> grads = model.grads_to_host();
    for (const ParamTensor& t : model.layout().tensors()) {
      const double err = relative_norm_error(grads.data() + t.offset, want.grads.data() + t.offset, t.numel);
      INFO("summed gradient of " << t.name << " on rank " << world.rank() << ": relative error " << err
                                 << " vs stage 01 (tolerance " << kGradTol << ")");
      CHECK(err <= kGradTol);
    }
    // Every gradient crosses PCIe exactly once each way, in report.buckets all-reduces.
    const std::uint64_t bytes = model.num_params() * sizeof(float);
    CHECK(dev.staging_stats().bytes_to_host == bytes);
    CHECK(dev.staging_stats().bytes_to_device == bytes);
    CHECK(dev.stats()[CommOp::kAllReduce].calls == report.buckets);
    // The adapter and the communicator it wraps count the same wire bytes (read one, never both).
    CHECK(dev.stats()[CommOp::kAllReduce].bytes_sent == wire_bytes);
  }
}

TEST_CASE("GPU DDP keeps the parameters bitwise identical on every rank", "[gpu_ddp_identical]") {
  Communicator& world = test_world();
  const std::string data = tiny_shard();
  for (const char* mode : {"naive", "bucketed"}) {
    INFO(where(world) << ", " << mode);
    MemoryTracker tracker;
    TrainOptions o = tiny_gpu_options(data);
    o.grad_accum = kB % (2 * world.size()) == 0 ? 2 : 1;
    Trainer trainer(o, &tracker, gpu_factory(),
                    ddp_strategy(world, gpu_buckets(DdpOptions::parse_mode(mode)), staging()));
    Communicator& dev = ddp_of(trainer).gradient_communicator();
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) {
      const auto before = dev.stats()[CommOp::kAllReduce].bytes_sent;
      const StepStats s = trainer.step();
      if (i == 0) first = s.loss;
      last = s.loss;
      CHECK(s.comm_bytes_sent == dev.stats()[CommOp::kAllReduce].bytes_sent - before);  // the gradients' traffic
    }
    CHECK(last < first);  // it trains
    const TrainModel& m = trainer.model();
    std::vector<float> mine(m.master_params(), m.master_params() + m.num_params());
    std::vector<float> root = mine;
    world.broadcast(root.data(), root.size(), 0);
    for (const ParamTensor& t : m.layout().tensors()) {
      const Comparison c = compare_bitwise(t.name + " on rank " + std::to_string(world.rank()) + " vs rank 0",
                                           mine.data() + t.offset, root.data() + t.offset, t.numel);
      INFO(c.message() << ", relative error "
                       << relative_norm_error(mine.data() + t.offset, root.data() + t.offset, t.numel));
      CHECK(c.ok);
    }
  }
}

TEST_CASE("GPU DDP: only the last micro-batch communicates, buckets start during backward", "[gpu_ddp_overlap]") {
  Communicator& world = test_world();
  MemoryTracker tracker;
  TrainOptions o = tiny_gpu_options(tiny_shard());
  o.batch = 4 * world.size();
  o.grad_accum = 4;
  Trainer trainer(o, &tracker, gpu_factory(), ddp_strategy(world, gpu_buckets(DdpOptions::Mode::kBucketed), staging()));
  Communicator& dev = ddp_of(trainer).gradient_communicator();
  const std::size_t buckets = ddp_of(trainer).engine().bucket_ranges().size();
  const auto world_before = world.stats()[CommOp::kAllReduce].calls;
  trainer.step();
  const auto calls = dev.stats()[CommOp::kAllReduce].calls;
  INFO(where(world) << ": " << calls << " gradient all-reduces in one step of 4 micro-batches, " << buckets
                    << " buckets");
  CHECK(calls == buckets);
  // The host world carries the buckets' staged all-reduces and the reported loss.
  CHECK(world.stats()[CommOp::kAllReduce].calls - world_before == buckets + 1);
  const BucketLaunches launches = bucket_launches(ddp_of(trainer).engine().timeline().events());
  CHECK(launches.comm_events == buckets);
  CHECK(launches.started_early + 1 >= buckets);  // all but the embeddings' bucket launch inside backward
}

TEST_CASE("the host-staging communicator's collectives give exact results", "[gpu_staging]") {
  Communicator& world = test_world();
  const int d = world.size(), r = world.rank();
  cuda::Stream stream;
  HostStagingCommunicator dev(world, stream.get());
  CHECK(dev.memory_space() == MemorySpace::kDevice);
  constexpr std::size_t n = 1001;  // not a multiple of the rank count
  // x_r[i] = (r + 1) * i: every sum below is an exact small integer in float.
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>((r + 1) * static_cast<int>(i));
  const float ranks_sum = static_cast<float>(d * (d + 1) / 2);
  auto expect_sum = [&](const std::vector<float>& got, std::size_t first, std::size_t count, const char* what) {
    std::vector<float> want(count);
    for (std::size_t i = 0; i < count; ++i) want[i] = ranks_sum * static_cast<float>(first + i);
    const Comparison c = compare_bitwise(std::string(what) + " on rank " + std::to_string(r), got.data(), want.data(),
                                         count);
    INFO(c.message());
    CHECK(c.ok);
  };
  SECTION("all_reduce and iall_reduce, in place") {
    DeviceBuffer<float> buf = cuda::to_device(x, MemCategory::kComm, nullptr);
    dev.all_reduce(buf.data(), n);
    expect_sum(buf.to_host(), 0, n, "all_reduce");
    buf.copy_from_host(x);
    Request req = dev.iall_reduce(buf.data(), buf.data(), n, DataType::kFloat32, ReduceOp::kSum);
    dev.wait(req);
    expect_sum(buf.to_host(), 0, n, "iall_reduce");
  }
  SECTION("reduce_scatter and all_gather") {
    const BlockPartition part = dev.partition(n);
    DeviceBuffer<float> whole = cuda::to_device(x, MemCategory::kComm, nullptr);
    DeviceBuffer<float> mine(part.size(r), MemCategory::kComm, nullptr);
    dev.reduce_scatter(whole.data(), mine.data(), n, DataType::kFloat32, ReduceOp::kSum);
    expect_sum(mine.to_host(), part.offset(r), part.size(r), "reduce_scatter");
    DeviceBuffer<float> gathered(n, MemCategory::kComm, nullptr);
    dev.all_gather(mine.data(), gathered.data(), n, DataType::kFloat32);
    expect_sum(gathered.to_host(), 0, n, "all_gather");
  }
  SECTION("broadcast and a send to the next rank") {
    DeviceBuffer<float> buf = cuda::to_device(x, MemCategory::kComm, nullptr);
    dev.broadcast(buf.data(), n, d - 1);
    std::vector<float> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<float>(d * static_cast<int>(i));
    const std::vector<float> got = buf.to_host();
    CHECK(compare_bitwise("broadcast from the last rank", got.data(), want.data(), n).ok);
    DeviceBuffer<float> out = cuda::to_device(x, MemCategory::kComm, nullptr), in(n, MemCategory::kComm, nullptr);
    Request recv = dev.irecv(in.data(), n, DataType::kFloat32, (r + d - 1) % d);
    Request send = dev.isend(out.data(), n, DataType::kFloat32, (r + 1) % d);
    dev.wait(send);
    dev.wait(recv);
    const int from = (r + d - 1) % d;
    for (std::size_t i = 0; i < n; ++i) want[i] = static_cast<float>((from + 1) * static_cast<int>(i));
    const std::vector<float> received = in.to_host();
    CHECK(compare_bitwise("message from the previous rank", received.data(), want.data(), n).ok);
  }
  // Wire bytes are the wrapped communicator's business; staging moved what the calls named.
  CHECK(dev.staging_stats().pinned_bytes > 0);
}

TEST_CASE("GPU DDP refuses what it cannot do with one clear message", "[gpu_ddp_errors]") {
  Communicator& world = test_world();
  MemoryTracker tracker;
  GpuTrainModel<float> model(config_from(kShape), &tracker);
  HostStagingCommunicator dev(world, model.stream());
  // A host communicator would be handed device pointers.
  CHECK_THROWS_WITH(DataParallel(world, model, gpu_buckets(DdpOptions::Mode::kBucketed)),
                    Catch::Contains("ddp: the model's gradients are in GPU memory but the '" +
                                    std::string(world.backend()) + "' communicator works on host memory"));
  DdpOptions ring = gpu_buckets(DdpOptions::Mode::kNaive);
  ring.algorithm = DdpOptions::Algorithm::kRing;
  CHECK_THROWS_WITH(DataParallel(dev, model, ring),
                    Catch::Contains("allreduce: ring adds the received pieces on the host"));
  // Mixed precision: the bf16 gradients are reduced in bf16 (no refusal), but not by the ring.
  GpuTrainModel<cuda::bf16> bf16_model(config_from(kShape), &tracker);
  CHECK_NOTHROW(DataParallel(dev, bf16_model, gpu_buckets(DdpOptions::Mode::kBucketed)));
  CHECK_THROWS_WITH(DataParallel(dev, bf16_model, ring), Catch::Contains("allreduce: ring adds the received pieces"));
  // Host buffers given to the adapter.
  std::vector<float> host(8, 1.0f);
  CHECK_THROWS_WITH(dev.all_reduce(host.data(), host.size()), Catch::Contains("was given a host pointer"));
  // A device communicator cannot be staged again.
  CHECK_THROWS_WITH(HostStagingCommunicator(dev, model.stream()), Catch::Contains("wraps a host-memory communicator"));
}
