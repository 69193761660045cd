// Stage 06 on the GPU: the tensor-parallel shard that `scalelab train --tp T --device cuda` runs
// (kernels/dist/gpu_tp_chunk.hpp), over the world's ranks sharing one GPU, their collectives
// staged through host memory (NCCL needs one GPU per rank).
//   [gpu_tp_equal]   against stage 01 on the CPU: the loss, every gradient gathered back into the
//                    whole tensors, the ledger (its count by the formula, each entry against the
//                    CPU shard's), a second step after the host's AdamW against the CPU shard's
//                    (loss; fp32 gradients)
//   [gpu_tp_pp]      tp 2 x pp 2 on 4 ranks (test_gpu_ddp_mpi_np4) through the trainer against
//                    stage 01 on the CPU
//   [gpu_tp_memory]  the device's bytes: the shard's parameters and gradients, and its saved
//                    activations by this file's own count of the tensors a rank keeps
//   [gpu_tp_settings] flash attention and checkpointing (every block, selective): the loss, the
//                    gradients, the blocks run forward and the change in saved activations
//                    against the CPU shard's under the same setting
//   [gpu_tp_large_logits] the vocabulary-parallel loss for logits of several hundred
//
// Each with and without sequence parallelism.
// Tolerances (not bitwise: cuBLAS's and the reductions' summation orders, the embedding's
// atomics, and the all-reduces' partial sums): fp32 loss relative 1e-5 and gradients relative
// 1e-4 by norm per tensor, test_gpu_model's bounds; bf16 loss relative 2e-2 (half activations).
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "ddp_fixtures.hpp"
#include "kernels/dist/device_messages.hpp"
#include "kernels/dist/gpu_pipeline_chunk.hpp"
#include "kernels/dist/gpu_tp_chunk.hpp"
#include "kernels/dist/host_staging_communicator.hpp"
#include "parallel/strategy_factory.hpp"
#include "tp_harness.hpp"
#include "train/trainer.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
// V = 65 is padded on every t > 1 (Vl = 33: one padding row on rank 1 of 2); 4 heads split 1, 2 or 4 ways.
const prior::ModelShape kTpShape{65, 16, 32, 2, 4};
constexpr int kRows = 4, kT = 16;
constexpr std::uint64_t kTpSeed = 12;
constexpr double kLossTol = 1e-5, kGradTol = 1e-4, kHalfLossTol = 2e-2;

DeviceTpChunkFactory gpu_chunks() {
  return [](const GPTConfig& config, const std::string& precision, const DeviceChunkStorage& storage, Communicator& tp,
            bool sequence_parallel, MemoryTracker* device) {
    const cuda::DeviceCommFactory staging = [](Communicator& host,
                                               cudaStream_t stream) -> std::unique_ptr<Communicator> {
      return std::make_unique<cuda::HostStagingCommunicator>(host, stream);
    };
    return cuda::make_gpu_tp_chunk(config, precision, storage, tp, sequence_parallel, staging, device);
  };
}
}  // namespace

TEST_CASE("the GPU tensor-parallel shard's gradients equal stage 01 on the CPU", "[gpu_tp_equal]") {
  Communicator& world = test_world();
  const int t = world.size(), m = 2;
  if (kTpShape.NH % t != 0) return;
  const Batch batch = random_batch(kTpShape.V, kRows, kT, 51);
  const prior::StepResult want = prior::stage01_step(kTpShape, kTpSeed, batch.tokens, batch.targets, kRows, kT, m);
  for (const std::string precision : {"fp32", "bf16"})
    for (bool sp : {false, true}) {
      INFO(where(world) << ", t " << t << ", " << precision << (sp ? ", sequence parallel" : ""));
      TpHarness h(world, config_from(kTpShape), t, sp, m, kRows, kT, kTpSeed, {}, precision, 1.0, 0, gpu_chunks());
      const double loss = h.forward_backward(batch.tokens, batch.targets);
      CHECK(loss == Approx(want.loss).epsilon(precision == "fp32" ? kLossTol : kHalfLossTol));
      // The ledger: per micro-batch 1 + 2L collectives of N C forward (the embedding's reduction,
      // g twice a block), 2L + 1 backward (f twice a block, the head's), 3 of N (the cross-entropy).
      // Sequence parallelism turns f and g into all-gathers and reduce-scatters, so the identities
      // become collectives too: f forward and g backward, 2L more each way; ln_f's all-gather and
      // the embedding's backward all-gather add 2; once per step, the replicated gradients'
      // all-reduce.
      const std::size_t L = static_cast<std::size_t>(kTpShape.L), per_micro = (sp ? 8 : 4) * L + 2 + 3 + (sp ? 2 : 0);
      const std::vector<TpCollective>& ledger = h.strategy->step_ledger();
      CHECK(ledger.size() == static_cast<std::size_t>(m) * per_micro + (sp ? 1 : 0));
      // And entry for entry the CPU shard's ledger on the same batch: operation, elements, place
      // and element size.
      TpHarness cpu(world, config_from(kTpShape), t, sp, m, kRows, kT, kTpSeed, {}, precision);
      cpu.forward_backward(batch.tokens, batch.targets);
      const std::vector<TpCollective>& want_ledger = cpu.strategy->step_ledger();
      REQUIRE(ledger.size() == want_ledger.size());
      for (std::size_t i = 0; i < ledger.size(); ++i) {
        INFO("ledger entry " << i << ": " << comm_op_name(ledger[i].op) << " of " << ledger[i].elements << " at "
                             << ledger[i].where << ", CPU " << comm_op_name(want_ledger[i].op) << " of "
                             << want_ledger[i].elements << " at " << want_ledger[i].where);
        CHECK(ledger[i].op == want_ledger[i].op);
        CHECK(ledger[i].elements == want_ledger[i].elements);
        CHECK(ledger[i].where == want_ledger[i].where);
        CHECK(ledger[i].element_bytes == want_ledger[i].element_bytes);
      }
      if (precision == "fp32") {
        const std::vector<float> grads = h.gather_whole(h.model->fp32_grads());
        const ParamLayout whole(config_from(kTpShape));
        for (const ParamTensor& tensor : whole.tensors()) {
          const double err = relative_norm_error(grads.data() + tensor.offset, want.grads.data() + tensor.offset,
                                                 tensor.numel);
          INFO("gradient of " << tensor.name << ": relative error " << err << " vs stage 01 (tolerance " << kGradTol
                              << ")");
          CHECK(err <= kGradTol);
        }
      }
      h.update();  // the host's AdamW on the shard's flat buffers, loaded into the GPU next step
      const double second = h.forward_backward(batch.tokens, batch.targets);
      CHECK(std::isfinite(second));
      CHECK(second < loss);
      // And against the CPU shard's second step. The first step's forward cannot tell the
      // parameters that start equal apart (every bias 0, every LayerNorm weight 1): after one
      // AdamW step they differ, so a layer given another's bias or weight shows here.
      cpu.update();
      const double cpu_second = cpu.forward_backward(batch.tokens, batch.targets);
      INFO("second step's loss: GPU " << second << ", CPU shard " << cpu_second);
      CHECK(second == Approx(cpu_second).epsilon(precision == "fp32" ? kLossTol : kHalfLossTol));
      if (precision == "fp32") {  // the backward's use of those parameters: the second step's gradients
        const std::vector<float> got = h.gather_whole(h.model->fp32_grads());
        const std::vector<float> ref = cpu.gather_whole(cpu.model->fp32_grads());
        const ParamLayout whole(config_from(kTpShape));
        for (const ParamTensor& tensor : whole.tensors()) {
          const double err = relative_norm_error(got.data() + tensor.offset, ref.data() + tensor.offset, tensor.numel);
          INFO("second step's gradient of " << tensor.name << ": relative error " << err << " vs the CPU shard's");
          CHECK(err <= kGradTol);
        }
      }
    }
}

TEST_CASE("the GPU tensor-parallel shard's device memory: its tensors and its saved activations", "[gpu_tp_memory]") {
  Communicator& world = test_world();
  const int t = world.size();
  if (kTpShape.NH % t != 0) return;
  const Batch batch = random_batch(kTpShape.V, kRows, kT, 52);
  TpHarness h(world, config_from(kTpShape), t, false, 1, kRows, kT, kTpSeed, {}, "fp32", 1.0, 0, gpu_chunks());
  h.forward_backward(batch.tokens, batch.targets);
  const MemoryTracker* device = h.any_shard().device_memory();
  REQUIRE(device != nullptr);
  INFO(where(world) << ": device memory\n" << device->report());
  const std::size_t n = h.any_shard().num_params();
  CHECK(device->current(MemCategory::kParams) == n * sizeof(float));
  CHECK(device->current(MemCategory::kGrads) == n * sizeof(float));
  CHECK(device->current(MemCategory::kOptimizer) == 0);  // AdamW steps on the host
  // Saved per block (N = B T, Cl = C/t, NHl = NH/t): ln1, residual2, ln2, residual3 (N C); qkv
  // (N 3Cl); atty (N Cl); fch, fch_gelu (N 4Cl); att (NHl N T); 4 N LayerNorm statistics. Then the
  // embeddings' output (N C), ln_f's (N C) and statistics (2 N), the logits (N rows of V_real
  // rounded up to 128) and the losses (N).
  const std::size_t N = static_cast<std::size_t>(kRows) * kT, C = kTpShape.C, Cl = C / t,
                    NHl = static_cast<std::size_t>(kTpShape.NH / t);
  const std::size_t V_real = static_cast<std::size_t>(h.any_shard().shard().vocab().real());
  const std::size_t ld = (V_real + 127) / 128 * 128;
  const std::size_t per_block = 4 * N * C + 3 * N * Cl + N * Cl + 8 * N * Cl + NHl * N * kT + 4 * N;
  const std::size_t want = kTpShape.L * per_block + N * C + N * C + 2 * N + N * ld + N;
  CHECK(device->peak(MemCategory::kActivations) == want * sizeof(float));
}

TEST_CASE("the GPU tensor-parallel shard honours flash attention and checkpointing as the CPU shard does",
          "[gpu_tp_settings]") {
  // Each setting against the plain shard (naive attention, nothing recomputed), on the GPU shard
  // and the CPU shard alike: the loss, every gradient (a recomputation from the wrong input
  // changes no loss, only gradients), the blocks run forward (recomputations included), and the
  // change in saved activations (flash keeps a log-sum-exp per query instead of att; checkpointing
  // keeps segment boundaries). A setting the GPU shard ignored left its activations as the plain
  // shard's; one it half applied shows in the gradients or the count.
  Communicator& world = test_world();
  const int t = world.size();
  if (kTpShape.NH % t != 0) return;
  const Batch batch = random_batch(kTpShape.V, kRows, kT, 53);
  struct Setting {
    const char* name;
    AttentionKind attention;
    CheckpointPolicy policy;
  };
  const Setting plain{"plain", AttentionKind::kNaive, CheckpointPolicy{}};
  const Setting settings[] = {{"flash attention", AttentionKind::kFlash, CheckpointPolicy{}},
                              {"checkpoint every block", AttentionKind::kNaive, CheckpointPolicy::parse("every")},
                              {"selective checkpointing", AttentionKind::kNaive, CheckpointPolicy::parse("selective")},
                              {"flash and checkpoint every block", AttentionKind::kFlash,
                               CheckpointPolicy::parse("every")}};
  struct Outcome {
    double loss;
    std::ptrdiff_t activation_bytes;
    std::size_t block_forwards;
    std::vector<float> grads;  // gathered into the whole model's tensors
  };
  for (bool sp : {false, true}) {
    const auto run = [&](const Setting& s, bool gpu) {
      TpHarness h(world, config_from(kTpShape), t, sp, 1, kRows, kT, kTpSeed, s.policy, "fp32", 1.0, 0,
                  gpu ? gpu_chunks() : DeviceTpChunkFactory{});
      h.any_shard().set_attention(s.attention);
      Outcome out;
      out.loss = h.forward_backward(batch.tokens, batch.targets);
      const MemoryTracker* tracker = gpu ? h.any_shard().device_memory() : &h.tracker;
      REQUIRE(tracker != nullptr);
      out.activation_bytes = static_cast<std::ptrdiff_t>(tracker->peak(MemCategory::kActivations));
      out.block_forwards = h.any_shard().block_forward_count();
      out.grads = h.gather_whole(h.model->fp32_grads());
      return out;
    };
    const Outcome gpu_plain = run(plain, true), cpu_plain = run(plain, false);
    CHECK(gpu_plain.loss == Approx(cpu_plain.loss).epsilon(kLossTol));
    for (const Setting& s : settings) {
      const Outcome gpu = run(s, true), cpu = run(s, false);
      INFO(where(world) << ", t " << t << (sp ? ", sequence parallel" : "") << ", " << s.name << ": activations GPU "
                        << gpu_plain.activation_bytes << " -> " << gpu.activation_bytes << " bytes, CPU "
                        << cpu_plain.activation_bytes << " -> " << cpu.activation_bytes << "; loss GPU " << gpu.loss
                        << ", CPU " << cpu.loss << "; blocks run forward GPU " << gpu.block_forwards << ", CPU "
                        << cpu.block_forwards);
      CHECK(gpu.loss == Approx(cpu.loss).epsilon(kLossTol));
      CHECK(gpu.block_forwards == cpu.block_forwards);
      CHECK(cpu.activation_bytes != cpu_plain.activation_bytes);  // the setting does change what the CPU keeps
      CHECK(gpu.activation_bytes - gpu_plain.activation_bytes == cpu.activation_bytes - cpu_plain.activation_bytes);
      const ParamLayout whole(config_from(kTpShape));
      for (const ParamTensor& tensor : whole.tensors()) {
        const double err = relative_norm_error(gpu.grads.data() + tensor.offset, cpu.grads.data() + tensor.offset,
                                               tensor.numel);
        INFO("gradient of " << tensor.name << ": relative error " << err << " vs the CPU shard's");
        CHECK(err <= kGradTol);
      }
    }
  }
}

TEST_CASE("the GPU tensor-parallel shard's vocabulary-parallel loss stays finite for large logits",
          "[gpu_tp_large_logits]") {
  // ln_f's weight multiplied by 3000 makes logits of several hundred: exp() of those overflows in
  // fp32 unless each row's maximum (over every rank's slice of the vocabulary) is taken out first.
  Communicator& world = test_world();
  const int t = world.size();
  if (kTpShape.NH % t != 0) return;
  const Batch batch = random_batch(kTpShape.V, kRows, kT, 54);
  const auto loss_of = [&](bool gpu, bool sp) {
    TpHarness h(world, config_from(kTpShape), t, sp, 1, kRows, kT, kTpSeed, {}, "fp32", 1.0, 0,
                gpu ? gpu_chunks() : DeviceTpChunkFactory{});
    std::vector<float> params(h.model->master_params(), h.model->master_params() + h.model->num_params());
    for (const ParamTensor& tensor : h.model->layout().tensors())
      if (tensor.name == "transformer.ln_f.weight")
        for (std::size_t i = 0; i < tensor.numel; ++i) params[tensor.offset + i] *= 3000.0f;
    h.model->set_master_params(params.data());
    return h.forward_backward(batch.tokens, batch.targets);
  };
  for (bool sp : {false, true}) {
    const double want = loss_of(false, sp), got = loss_of(true, sp);
    INFO(where(world) << ", t " << t << (sp ? ", sequence parallel" : "") << ": loss GPU " << got << ", CPU " << want);
    REQUIRE(std::isfinite(want));
    CHECK(want > 50);  // the logits are large: the loss of a confident wrong guess
    CHECK(got == Approx(want).epsilon(kLossTol));
  }
}

TEST_CASE("tp x pp on the GPU: tensor-parallel pipeline stages train as stage 01 on the CPU", "[gpu_tp_pp]") {
  // 4 ranks sharing the GPU (test_gpu_ddp_mpi_np4): tp 2 x pp 2, each stage's chunk a GPU shard
  // of its slice, against the same run on one CPU process (stage 01, the same micro-batches):
  // the loss of 3 steps within 1e-4 relative (fp32; cuBLAS's and the reductions' orders, compounded
  // over 3 AdamW steps).
  Communicator& world = test_world();
  if (world.size() != 4) return;
  TrainOptions o;
  o.config = "tiny";
  o.shape.num_layers = 4;
  o.batch = 8;
  o.steps = 3;
  o.seed = 77;
  o.data = tiny_token_shard(world, "scalelab_gpu_tp_pp.bin");
  o.parallel.tp = 2;
  o.parallel.pp = 2;
  o.parallel.micro_batches = 4;
  TrainOptions single = o;
  single.parallel = ParallelOptions{};
  single.grad_accum = o.micro_batches();
  TrainOptions gpu = o;
  gpu.device = "cuda";
  DeviceFactories device;
  device.pipeline_chunks = cuda::make_gpu_pipeline_chunk;
  device.tp_chunks = gpu_chunks();
  device.pipeline_messages = cuda::make_staged_pipeline_messages;
  const TrainModelFactory unused = [](const GPTConfig&, const std::string&,
                                      MemoryTracker*) -> std::unique_ptr<TrainModel> {
    throw Error("the pipeline builds its own stage");
  };
  MemoryTracker t1, t2;
  Trainer want(single, &t1);
  Trainer got(gpu, &t2, unused, make_strategy_factory(&world, device));
  for (int s = 0; s < o.steps; ++s) {
    const double a = want.step().loss, b = got.step().loss;
    INFO(where(world) << ", step " << s << ": loss " << b << " on the GPU, " << a << " on the CPU");
    CHECK(std::fabs(b - a) <= 1e-4 * std::fabs(a));
  }
}
