// Stage 05 with stage 03: pipeline stages in mixed precision (bf16, fp16 with a loss scale), under
// mpiexec with p = 2, 3 or 4 ranks, against the whole mixed-precision model (stage 03) with the
// same m micro-batches accumulated (stage 01) on the same batch.
//
// Bitwise: the loss and every half gradient but the tied wte. Each stage runs the whole model's
// layer calls on the same half values, micro-batch after micro-batch, and the tensors between
// stages cross as half, which they already were (tests/precision/test_mixed_slices.cpp shows the
// slices alone). So is ZB-H1's split backward: its deferred weight gradients are widened, added in
// fp32 and rounded once per micro-batch, as the whole backward rounds every element of a block
// once (the LayerNorms' in the input pass, the linear layers' in the weight pass). The tied wte: the whole model rounds
// (its half gradient + the head's part + the embeddings' part) once per micro-batch; each pipeline copy rounds its own
// part per micro-batch, and the two copies' sums are added and rounded once more: 2m + 1 roundings of relative size u
// (2^-8 bf16, 2^-11 fp16) where the whole model has m. Compared by the relative norm of the
// difference, <= 4u (measured: 0.37u to 0.79u on 2, 3 and 4 ranks); a missing micro-batch or a
// copy left out is off by 10% or more. After an update every tensor carries the wte difference
// through the forward, and AdamW's m / sqrt(v) turns even a tiny gradient difference into one of
// up to lr when the gradient itself is tiny, so the master weights after 3 steps are compared per
// tensor by the relative norm, <= 2e-2 (measured up to 7.3e-3, on an MLP bias: biases start at
// zero, so their norm after 3 steps is a few lr and each flipped update weighs much). The key
// third of attn.c_attn.bias is only bounded (tests/dist/mixed_reference.hpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "ddp_fixtures.hpp"
#include "mixed_reference.hpp"
#include "parallel/strategy_factory.hpp"
#include "pipeline_harness.hpp"
#include "precision/mixed_model.hpp"
#include "resume_runs.hpp"
#include "train/accumulate.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
constexpr int kV = 64, kT = 8, kC = 16, kL = 8, kNH = 2;
constexpr int kRows = 2;  // per micro-batch
constexpr std::uint64_t kSeed = 11;
const HalfFormat kFormats[] = {HalfFormat::kBF16, HalfFormat::kFP16};

GPTConfig config() { return gpt_config_of_shape(kV, kT, kC, kL, kNH, "pipeline-mixed-test"); }

std::vector<std::string> schedules_for(int p, int m) {
  std::vector<std::string> s = {"afab", "1f1b", "zb-h1"};
  if (m % p == 0 && 2 * p <= kL) s.push_back("interleaved:2");
  return s;
}

void check_against_whole(Communicator& world, HalfFormat f, int m, const std::string& schedule) {
  const int B = kRows * m;
  const Batch batch = random_batch(kV, B, kT, 200 + m);
  PipelineHarness h(world, config(), world.size(), m, schedule, B, kT, kSeed, half_format_name(f), loss_scale_of(f));
  const MixedWhole want = run_mixed_whole(config(), f, kSeed, batch, B, kT, m, loss_scale_of(f), h.options.adamw);
  INFO(where(world) << ", " << half_format_name(f) << ", m " << m << ", schedule " << schedule);
  const double loss = h.forward_backward(batch.tokens, batch.targets);
  CHECK(loss == want.first_loss);  // the same micro-batch losses, summed in the same order
  std::vector<float> got(h.model->num_params());
  const TrainModel::GradBuffer g = h.model->typed_grads();
  REQUIRE(g.type == (f == HalfFormat::kBF16 ? DataType::kBFloat16 : DataType::kFloat16));
  half_to_float(got.data(), static_cast<const std::uint16_t*>(g.data), got.size(), f);
  const ParamLayout whole(config());
  for (const auto& t : h.model->layout().tensors()) {
    const float* want_t = want.first_grads.data() + whole.find(t.name).offset;
    if (t.name != "transformer.wte.weight") {
      CHECK_MATCH(compare_bitwise("half gradient " + t.name, got.data() + t.offset, want_t, t.numel));
      continue;
    }
    const double err = relative_norm_error(got.data() + t.offset, want_t, t.numel);
    INFO("the tied wte's gradient (this rank's copy after the sum): relative norm error "
         << err << " = " << err / unit_roundoff(f) << " u");
    CHECK(err <= 4 * unit_roundoff(f));
  }
  h.update();
  for (int step = 1; step < 3; ++step) {
    h.forward_backward(batch.tokens, batch.targets);
    h.update();
  }
  for (const auto& t : h.model->layout().tensors())
    check_master_after(t.name, h.model->master_params() + t.offset,
                       want.master_after.data() + whole.find(t.name).offset, t.numel, kC, h.options.adamw.lr);
}
}  // namespace

TEST_CASE("mixed-precision pipeline: gradients and updates equal the whole mixed model with m micro-batches",
          "[pipeline_mixed]") {
  Communicator& world = test_world();
  if (world.size() < 2) return;  // a pipeline needs two ranks
  for (HalfFormat f : kFormats)
    for (int m : {1, 3, 4})
      for (const std::string& schedule : schedules_for(world.size(), m)) check_against_whole(world, f, m, schedule);
}

TEST_CASE("mixed-precision dp x pp: one all-reduce per step in half, and the gradients of dp alone",
          "[pipeline_mixed]") {
  Communicator& world = test_world();
  if (world.size() != 4) return;  // 2 stages x 2 replicas
  const int m = 3, dp = 2, B = kRows * m * dp;
  const Batch batch = random_batch(kV, B, kT, 9);
  for (HalfFormat f : kFormats) {
    INFO(where(world) << ", " << half_format_name(f));
    const double scale = loss_scale_of(f);
    PipelineHarness h(world, config(), 2, m, "1f1b", B, kT, kSeed, half_format_name(f), scale);
    Communicator& dpc = h.strategy->grid().dp();
    const auto calls = dpc.stats()[CommOp::kAllReduce].calls;
    h.model->zero_grad();
    const GlobalBatch b{batch.tokens.data(), batch.targets.data(), B, kT, m};
    h.strategy->begin_step(b);
    h.strategy->run_micro_batches(*h.model, b, scale);
    CHECK(dpc.stats()[CommOp::kAllReduce].calls == calls);  // nothing during the micro-batches
    const std::uint64_t sent = dpc.stats()[CommOp::kAllReduce].bytes_sent;
    h.strategy->sync_gradients(*h.model);
    CHECK(dpc.stats()[CommOp::kAllReduce].calls == calls + 1);  // once, after the last backward
    const std::size_t n = h.model->num_params();
    // In half: 2 (d - 1) / d times the buffer's 2 n bytes (fp32 would send 4 n).
    CHECK(dpc.stats()[CommOp::kAllReduce].bytes_sent - sent == 2 * n);
    // dp alone: the whole mixed model on this replica's rows, m micro-batches (loss scaled by
    // scale / dp, as the strategy scales it), its half gradients all-reduced over the same group.
    MixedPrecisionModel whole(config(), f, nullptr);
    whole.init_weights(kSeed);
    const int local = B / dp;
    const std::size_t offset = static_cast<std::size_t>(h.strategy->grid().coord().dp) * local * kT;
    accumulate_gradients(whole, batch.tokens.data() + offset, batch.targets.data() + offset, local, kT, m, scale / dp);
    const TrainModel::GradBuffer wg = whole.typed_grads();
    dpc.all_reduce(wg.data, wg.data, whole.num_params(), wg.type, ReduceOp::kSum);
    const std::vector<float> want = whole.grads_as_float();
    std::vector<float> got(n);
    half_to_float(got.data(), static_cast<const std::uint16_t*>(h.model->typed_grads().data), n, f);
    const ParamLayout layout(config());
    for (const auto& t : h.model->layout().tensors()) {
      const float* want_t = want.data() + layout.find(t.name).offset;
      if (t.name == "transformer.wte.weight") {  // as in the pipeline alone (the file's header)
        CHECK(relative_norm_error(got.data() + t.offset, want_t, t.numel) <= 4 * unit_roundoff(f));
        continue;
      }
      CHECK_MATCH(compare_bitwise("dp x pp vs dp half gradient " + t.name, got.data() + t.offset, want_t, t.numel));
    }
  }
}

TEST_CASE("mixed-precision dp x pp with ZeRO-1: the updates of dp x pp bitwise, 2 + 2 + 12/d bytes per parameter",
          "[pipeline_mixed]") {
  // The distributed optimizer in mixed precision: half gradients reduce-scattered, stage 03's
  // step on the shard of the master weights, half parameters all-gathered. With d = 2 each sum
  // is one addition, so the reduce-scatter's shard is the all-reduce's bit for bit, and the step
  // runs the same arithmetic on every element (the norm's summation order differs, which only
  // clipping would read): master weights and half parameters bitwise those of plain dp x pp.
  Communicator& world = test_world();
  if (world.size() != 4) return;  // 2 stages x 2 replicas
  const int m = 2, dp = 2, B = kRows * m * dp;
  const Batch batch = random_batch(kV, B, kT, 13);
  for (HalfFormat f : kFormats) {
    INFO(where(world) << ", " << half_format_name(f));
    const double scale = loss_scale_of(f);
    PipelineHarness plain(world, config(), 2, m, "1f1b", B, kT, kSeed, half_format_name(f), scale);
    PipelineHarness zero(world, config(), 2, m, "1f1b", B, kT, kSeed, half_format_name(f), scale, 1);
    std::uint64_t plain_bytes = 0, zero_bytes = 0;
    for (int step = 0; step < 3; ++step) {
      plain.forward_backward(batch.tokens, batch.targets);
      plain.update();
      zero.forward_backward(batch.tokens, batch.targets);
      zero.update();
      plain_bytes += plain.strategy->step_report().bytes_sent;
      zero_bytes += zero.strategy->step_report().bytes_sent;
    }
    const std::size_t n = plain.model->num_params();  // the stage's
    const BlockPartition shard{n, dp};
    const int r = zero.strategy->grid().coord().dp;
    REQUIRE(zero.model->num_params() == shard.size(r));
    CHECK_MATCH(compare_bitwise("master weights: this replica's shard vs the same range of plain dp x pp",
                                zero.model->master_params(), plain.model->master_params() + shard.offset(r),
                                shard.size(r)));
    CHECK_MATCH(compare_bitwise("half parameters after the all-gather vs plain dp x pp", zero.stage().half_params(),
                                plain.stage().half_params(), n));
    // Memory: half parameters and gradients of the whole stage, the master weights and AdamW's m
    // and v of the shard only: 2 n + 2 n + 12 n/d.
    CHECK(zero.tracker.current(MemCategory::kParams) == 2 * n);
    CHECK(zero.tracker.current(MemCategory::kGrads) == 2 * n);
    CHECK(zero.tracker.current(MemCategory::kOptimizer) == 12 * shard.size(r));
    CHECK(plain.tracker.current(MemCategory::kOptimizer) == 12 * n);
    // Traffic: a reduce-scatter and an all-gather in half move what the all-reduce moved.
    CHECK(zero_bytes == plain_bytes);
  }
}

TEST_CASE("mixed-precision pipeline: half messages, 2 + 2 + 4 bytes per parameter, half activations in flight",
          "[pipeline_mixed]") {
  Communicator& world = test_world();
  const int p = world.size();
  if (p < 2) return;
  const int m = 4, B = kRows * m, r = world.rank();
  const Batch batch = random_batch(kV, B, kT, 5);
  for (HalfFormat f : kFormats) {
    PipelineHarness h(world, config(), world.size(), m, "1f1b", B, kT, kSeed, half_format_name(f), loss_scale_of(f));
    const CommStats before = h.strategy->grid().pp().stats();
    h.forward_backward(batch.tokens, batch.targets);
    INFO(where(world) << ", " << half_format_name(f));
    // Bytes: every message is a micro-batch's (rows, T, C) in half, 2 bytes an element.
    const std::uint64_t message = static_cast<std::uint64_t>(kRows) * kT * kC * 2;
    const PipelineStepStats& s = h.strategy->last_step();
    CHECK(s.activation_bytes_sent == (r == p - 1 ? 0 : m * message));
    CHECK(s.grad_bytes_sent == (r == 0 ? 0 : m * message));
    CHECK(s.activation_bytes_received == (r == 0 ? 0 : m * message));
    CHECK(s.grad_bytes_received == (r == p - 1 ? 0 : m * message));
    const std::uint64_t tied = (r == 0 || r == p - 1) ? h.stage().wte_numel() * 2 : 0;  // the copies' sum, in half
    CHECK(h.strategy->grid().pp().stats()[CommOp::kSend].bytes_sent - before[CommOp::kSend].bytes_sent ==
          s.activation_bytes_sent + s.grad_bytes_sent + tied);
    // Model state: half parameters and gradients, fp32 master weights, AdamW's m and v (the
    // trainer's, in the same tracker): 2 + 2 + (4 + 8) bytes per parameter of the stage.
    const std::size_t n = h.model->num_params();
    CHECK(h.tracker.current(MemCategory::kParams) == 2 * n);
    CHECK(h.tracker.current(MemCategory::kGrads) == 2 * n);
    CHECK(h.tracker.current(MemCategory::kOptimizer) == 12 * n);
    // Activations: 1F1B keeps min(p - r, m) micro-batches in flight, each its slice's fp32
    // element count (model/gpt.hpp, checked against the stage-00 formula elsewhere) at 2 bytes.
    const std::size_t one = 2 *
                            activation_elements(config(), kRows, kT, CheckpointPolicy{}, h.stage().chunk_at(0).slice());
    CHECK(h.tracker.peak(MemCategory::kActivations) == static_cast<std::size_t>(std::min(p - r, m)) * one);
  }
}

TEST_CASE("mixed-precision pipeline: the tied embedding's copies stay bitwise equal", "[pipeline_mixed]") {
  Communicator& world = test_world();
  const int p = world.size();
  if (p < 2) return;
  const int m = 3, B = kRows * m;
  const Batch batch = random_batch(kV, B, kT, 7);
  for (HalfFormat f : kFormats) {
    PipelineHarness h(world, config(), world.size(), m, "1f1b", B, kT, kSeed, half_format_name(f), loss_scale_of(f));
    for (int step = 0; step < 2; ++step) {
      h.forward_backward(batch.tokens, batch.targets);
      h.update();
    }
    INFO(where(world) << ", " << half_format_name(f));
    if (world.rank() != 0 && world.rank() != p - 1) {
      CHECK_FALSE((h.stage().holds_embeddings() || h.stage().holds_head()));
      continue;
    }
    const std::size_t n = h.stage().wte_numel();
    const float* mine = h.model->master_params() + h.model->layout().find("transformer.wte.weight").offset;
    std::vector<float> theirs(n);
    const int other = world.rank() == 0 ? p - 1 : 0;
    Request req = world.isend(mine, n, DataType::kFloat32, other, 3);
    world.recv(theirs.data(), n, DataType::kFloat32, other, 3);
    world.wait(req);
    CHECK_MATCH(compare_bitwise("wte master weights: this copy vs the other", mine, theirs.data(), n));
  }
}

TEST_CASE("a mixed-precision pipeline run saved after 2 steps and resumed for 2 equals 4 steps, bit for bit",
          "[pipeline_mixed]") {
  Communicator& world = test_world();
  const int p = world.size();
  if (p < 2) return;
  TrainOptions o = pipeline_resume_options(world, "scalelab_pipeline_mixed_resume.bin", kSeed);
  o.precision = "fp16";  // the loss scaler's state travels too
  const std::string state = per_world_temp_path(world, "scalelab_pipeline_mixed_resume.state");
  // p stages; on 4 ranks also 2 stages x 2 replicas with ZeRO-1 (each replica saves and reloads
  // its shard of the master weights and of AdamW's state).
  std::vector<std::pair<int, int>> layouts = {{p, 0}};
  if (p == 4) layouts.push_back({2, 1});
  for (const auto& [pp, zero] : layouts) {
    INFO(where(world) << ", pp " << pp << ", zero " << zero);
    o.parallel.pp = pp;
    o.parallel.zero = zero;
    check_resume(o, state, world);
  }
}
