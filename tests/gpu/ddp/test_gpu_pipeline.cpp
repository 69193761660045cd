// Stage 05 on the GPU: the GPU GPT's slices (kernels/model/gpu_gpt.hpp) and the pipeline of GPU
// chunks (kernels/dist/gpu_pipeline_chunk.hpp) that `scalelab train --pp P --device cuda` runs.
//   [gpu_slices]          two GPU slices chained on one process, two micro-batches in flight,
//                         against the whole GPU model accumulating the same two micro-batches
//   [gpu_pipeline_equal]  the pipeline over the world's ranks (sharing one GPU, their messages
//                         staged through host memory) against stage 01 on the CPU, m micro-batches
//   [gpu_pipeline_memory] the device's bytes: the stage's parameters and gradients, and the
//                         micro-batches in flight of its schedule
//   [gpu_pipeline_refusals] host pointers at the boundary, messages of the wrong size and the
//                         split backward, each refused by name; a chunk of each precision
//
// Tolerances, and why they are not bitwise:
//   slices vs the whole GPU model: every block runs the same kernels on the same inputs, so the
//     blocks' gradients are bitwise equal; wte's is summed in another order (the head's part and
//     the embedding's part are added on the host, as the pipeline adds its two copies), so relative
//     1e-6 by norm.
//   pipeline vs the CPU's stage 01: loss relative 1e-5, gradients relative 1e-4 by norm per tensor
//     (test_gpu_model's fp32 bounds: cuBLAS's and the reductions' summation orders, wte's atomics).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "dist/pipeline_strategy.hpp"
#include "io/checkpoint.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/dist/device_messages.hpp"
#include "kernels/dist/gpu_pipeline_chunk.hpp"
#include "kernels/model/gpu_gpt.hpp"
#include "model/gpt.hpp"
#include "strategy_harness.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;
using scalelab::cuda::GpuGPT;

namespace {
const prior::ModelShape kPipeShape{64, 16, 32, 4, 4};  // 4 blocks: 2 per stage on 2 ranks
constexpr int kRows = 8, kT = 16;
constexpr std::uint64_t kPipeSeed = 9;
constexpr double kLossTol = 1e-5, kGradTol = 1e-4, kTiedTol = 1e-6;

// The whole model's parameters `whole` (ParamLayout(config) order) into a slice's device buffer.
template <typename F>
void load_slice(GpuGPT<F>& gpt, const std::vector<float>& whole) {
  const std::vector<float> mine = held_by_name(gpt.config(), gpt.layout(), whole);
  gpt.params().copy_from_host(mine.data(), mine.size());
}

std::vector<float> grads_of(GpuGPT<float>& gpt) {
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(gpt.stream()));
  return gpt.grads().to_host();
}

// The pipeline of GPU chunks driven as the trainer drives it.
struct GpuPipelineHarness : StrategyHarness {
  std::unique_ptr<PipelineStrategy> strategy;
  GpuPipelineHarness(Communicator& world, int m, const std::string& schedule) {
    options.device = "cuda";
    options.batch = kRows;
    options.seq_len = kT;
    options.parallel.pp = world.size();
    options.parallel.micro_batches = m;
    options.parallel.schedule = schedule;
    // The ranks share one GPU: the messages are staged through the host (NCCL would refuse).
    strategy = std::make_unique<PipelineStrategy>(
        world, options, PipelineDevice{cuda::make_gpu_pipeline_chunk, {}, cuda::make_staged_pipeline_messages});
    start(*strategy, config_from(kPipeShape), kPipeSeed, {}, "GPU pipeline test");
  }
  PipelineStageModel& stage() { return strategy->stage(); }
};
}  // namespace

TEST_CASE("two GPU slices with micro-batches in flight equal the whole GPU model", "[gpu_slices]") {
  const GPTConfig config = config_from(kPipeShape);
  const int B = 2;  // two micro-batches of 2 rows
  const Batch batch = random_batch(kPipeShape.V, 2 * B, kT, 41);
  std::vector<float> init(ParamLayout(config).num_params());
  init_gpt2_weights(config, ParamLayout(config), init.data(), kPipeSeed);

  MemoryTracker tracker;
  GpuGPT<float> whole(config, &tracker);
  whole.params().copy_from_host(init.data(), init.size());
  whole.zero_grad();
  double whole_loss = 0;
  const std::size_t micro = static_cast<std::size_t>(B) * kT;
  for (int i = 0; i < 2; ++i) {
    whole_loss += whole.forward(batch.tokens.data() + i * micro, batch.targets.data() + i * micro, B, kT) / 2;
    whole.backward(0.5f);
  }

  cuda::GpuOptions first_options, last_options;
  first_options.slice = ModelSlice::layers(config, 0, 2);
  last_options.slice = ModelSlice::layers(config, 2, 2);
  GpuGPT<float> first(config, &tracker, first_options), last(config, &tracker, last_options);
  load_slice(first, init);
  load_slice(last, init);
  first.zero_grad();
  last.zero_grad();
  // GPipe's order on one process: both forwards (stashing each micro-batch), then both backwards.
  double slice_loss = 0;
  // Each slice computes on its own stream: a slice reads the other's output only after that
  // stream is done (the pipeline's messages wait the same way; without this the two streams race,
  // which showed on a GPU shared with another process).
  for (int i = 0; i < 2; ++i) {
    first.forward_slice(batch.tokens.data() + i * micro, nullptr, nullptr, B, kT);
    SCALELAB_CUDA_CHECK(cudaStreamSynchronize(first.stream()));
    slice_loss += last.forward_slice(nullptr, first.output(), batch.targets.data() + i * micro, B, kT) / 2;
    first.stash_activations(i);
    last.stash_activations(i);
  }
  CHECK(first.stashed_count() == 2);
  for (int i = 0; i < 2; ++i) {
    first.restore_activations(i);
    last.restore_activations(i);
    last.backward_slice(nullptr, 0.5f);
    SCALELAB_CUDA_CHECK(cudaStreamSynchronize(last.stream()));
    first.backward_slice(last.input_grad(), 0.5f);
  }
  first.release_activations();
  last.release_activations();
  CHECK(first.stashed_count() == 0);
  INFO("loss of the slices " << slice_loss << ", of the whole model " << whole_loss);
  CHECK(slice_loss == whole_loss);  // the same kernels on the same values

  const std::vector<float> want = grads_of(whole);
  const ParamLayout whole_layout(config);
  for (GpuGPT<float>* part : {&first, &last}) {
    const std::vector<float> got = grads_of(*part);
    for (const ParamTensor& t : part->layout().tensors()) {
      const ParamTensor& w = whole_layout.find(t.name);
      if (t.name == "transformer.wte.weight") continue;  // checked summed, below
      const Comparison c = compare_bitwise(t.name + " of slice " + part->slice().describe(config),
                                           got.data() + t.offset, want.data() + w.offset, t.numel);
      INFO(c.message());
      CHECK(c.ok);
    }
  }
  // The tied wte: the embedding's gradient plus the head's, as the pipeline sums its two copies.
  const std::vector<float> a = grads_of(first), b = grads_of(last);
  const ParamTensor& wte = whole_layout.find("transformer.wte.weight");
  std::vector<float> sum(wte.numel);
  for (std::size_t i = 0; i < wte.numel; ++i)
    sum[i] = a[first.layout().find(wte.name).offset + i] + b[last.layout().find(wte.name).offset + i];
  const double err = relative_norm_error(sum.data(), want.data() + wte.offset, wte.numel);
  INFO("wte's gradient summed from the two slices: relative error " << err << " (tolerance " << kTiedTol << ")");
  CHECK(err <= kTiedTol);
}

TEST_CASE("the GPU pipeline's gradients equal stage 01 on the CPU", "[gpu_pipeline_equal]") {
  Communicator& world = test_world();
  if (world.size() < 2) return;  // a pipeline needs two ranks: test_gpu_ddp_mpi_np2 runs this
  const Batch batch = random_batch(kPipeShape.V, kRows, kT, 43);
  for (const char* schedule : {"afab", "1f1b"}) {
    for (int m : {1, 4}) {
      INFO(where(world) << ", schedule " << schedule << ", " << m << " micro-batches");
      const prior::StepResult want = prior::stage01_step(kPipeShape, kPipeSeed, batch.tokens, batch.targets, kRows, kT,
                                                         m);
      GpuPipelineHarness h(world, m, schedule);
      const double loss = h.forward_backward(batch.tokens, batch.targets);
      CHECK(loss == Approx(want.loss).epsilon(kLossTol));
      const PipelineStageModel& stage = h.stage();
      const ParamLayout whole(config_from(kPipeShape));
      for (const ParamTensor& t : stage.layout().tensors()) {
        const double err = relative_norm_error(h.stage().fp32_grads() + t.offset,
                                               want.grads.data() + whole.find(t.name).offset, t.numel);
        INFO("gradient of " << t.name << ": relative error " << err << " vs stage 01 (tolerance " << kGradTol << ")");
        CHECK(err <= kGradTol);
      }
      // Both copies of the tied wte hold the same summed gradient (the head's and the embedding's).
      if (stage.holds_embeddings() || stage.holds_head()) {
        std::vector<float> mine(h.stage().fp32_grads() + stage.wte_offset(),
                                h.stage().fp32_grads() + stage.wte_offset() + stage.wte_numel());
        std::vector<float> first = mine;
        world.broadcast(first.data(), first.size(), 0);
        CHECK_MATCH(
            compare_bitwise("wte's gradient here vs on the first stage", mine.data(), first.data(), mine.size()));
      } else {
        std::vector<float> unused(stage.wte_numel());
        world.broadcast(unused.data(), unused.size(), 0);
      }
      h.update();  // the host's AdamW on the stage's flat buffers, loaded into the GPU next step
      const double second = h.forward_backward(batch.tokens, batch.targets);
      CHECK(std::isfinite(second));
      CHECK(second < loss);
    }
  }
}

TEST_CASE("the GPU pipeline's device memory: the stage's tensors and its micro-batches in flight",
          "[gpu_pipeline_memory]") {
  Communicator& world = test_world();
  if (world.size() < 2) return;
  const Batch batch = random_batch(kPipeShape.V, kRows, kT, 44);
  const int m = 4;
  GpuPipelineHarness h(world, m, "1f1b");
  h.forward_backward(batch.tokens, batch.targets);
  const MemoryTracker* device = h.stage().device_memory();
  REQUIRE(device != nullptr);
  const std::size_t n = h.stage().num_params();
  INFO(where(world) << ": device memory\n" << device->report());
  CHECK(device->current(MemCategory::kParams) == n * sizeof(float));
  CHECK(device->current(MemCategory::kGrads) == n * sizeof(float));
  CHECK(device->current(MemCategory::kOptimizer) == 0);    // AdamW steps on the host
  CHECK(device->current(MemCategory::kActivations) == 0);  // every micro-batch's freed after its backward
  // 1F1B keeps min(p - r, m) micro-batches in flight on rank r: the peak is that many sets of the
  // slice's saved activations (values and fp32 statistics alike 4 bytes in fp32, plus the head's
  // logits padding).
  const GPTConfig config = config_from(kPipeShape);
  const ModelSlice slice = h.stage().chunk_at(0).slice();
  const int rows = kRows / m, p = world.size(), r = world.rank();
  const std::size_t padding = slice.head ? cuda::gpu_logits_padding_elements(config, rows, kT) : 0;
  const std::size_t per_micro = (activation_elements(config, rows, kT, {}, slice, AttentionKind::kNaive) + padding) *
                                sizeof(float);
  const std::size_t in_flight = static_cast<std::size_t>(std::min(p - r, m));
  CHECK(device->peak(MemCategory::kActivations) == in_flight * per_micro);
}

TEST_CASE("a GPU pipeline chunk refuses host boundaries, wrong message sizes and the split backward, by name",
          "[gpu_pipeline_refusals]") {
  // Two chunks of the 4-block model, each on its own host copy: the first stage (embeddings,
  // blocks 0-1) and the last (blocks 2-3, the head). The pipeline strategy never makes these
  // calls; a caller that does gets one error naming what it did, not a wrong answer.
  using Catch::Matchers::Contains;
  const GPTConfig config = config_from(kPipeShape);
  MemoryTracker device;
  const auto make = [&](const ModelSlice& slice, std::vector<float>& params, std::vector<float>& grads) {
    const ParamLayout layout(config, slice);
    params.assign(layout.num_params(), 0.0f);
    grads.assign(layout.num_params(), 0.0f);
    return cuda::make_gpu_pipeline_chunk(config, "fp32", DeviceChunkStorage{slice, params.data(), grads.data(), {}},
                                         &device);
  };
  std::vector<float> p0, g0, p1, g1;
  const auto first = make(ModelSlice::layers(config, 0, 2), p0, g0);
  const auto last = make(ModelSlice::layers(config, 2, 2), p1, g1);
  first->init_weights(kPipeSeed);
  last->init_weights(kPipeSeed);
  const Batch batch = random_batch(kPipeShape.V, 2, kT, 77);
  const std::vector<float> host(static_cast<std::size_t>(2) * kT * kPipeShape.C, 0.5f);
  // Boundaries through host pointers.
  CHECK_THROWS_WITH(last->forward_slice(nullptr, host.data(), batch.targets.data(), 2, kT),
                    Contains("takes its input activations as a device message"));
  CHECK_THROWS_WITH(first->backward_slice(host.data(), 1.0f), Contains("takes d loss / d output as a device message"));
  // A message of the wrong size, after a forward that fixed the boundary at B T C.
  first->load_params();
  first->forward_slice(batch.tokens.data(), nullptr, nullptr, 2, kT);
  const std::size_t n = first->boundary_elements(2, kT);
  CHECK_THROWS_WITH(first->output_message(n + 1, MessagePlace{}),
                    Contains("output_message: ") && Contains(" elements asked"));
  CHECK_THROWS_WITH(first->input_grad_message(n, MessagePlace{}),
                    Contains("input_grad_message: "));                                       // the first has no input
  CHECK_THROWS_WITH(last->output_message(n, MessagePlace{}), Contains("output_message: "));  // the last has no output
  // ZB-H1's split backward.
  CHECK_THROWS_WITH(last->backward_input(host.data(), 1.0f), Contains("--schedule zb-h1") && Contains("1f1b"));
  CHECK_THROWS_WITH(last->backward_weight(), Contains("--schedule zb-h1"));
  // Each precision makes its own chunk, its boundary in that precision; an unknown one is refused.
  CHECK(first->boundary_type() == DataType::kFloat32);
  const ModelSlice slice = ModelSlice::layers(config, 0, 2);
  std::vector<std::uint16_t> half_params(p0.size()), half_grads(p0.size());
  DeviceChunkStorage mixed{slice, nullptr, nullptr, {}};
  mixed.mixed.param_data = half_params.data();
  mixed.mixed.grad_data = half_grads.data();
  CHECK(cuda::make_gpu_pipeline_chunk(config, "bf16", mixed, &device)->boundary_type() == DataType::kBFloat16);
  CHECK(cuda::make_gpu_pipeline_chunk(config, "fp16", mixed, &device)->boundary_type() == DataType::kFloat16);
  CHECK_THROWS_WITH(cuda::make_gpu_pipeline_chunk(config, "fp8", DeviceChunkStorage{}, &device), Contains("fp8"));
}
