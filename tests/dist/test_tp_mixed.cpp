// Stage 06 with stage 03: tensor (and sequence) parallelism in mixed precision (bf16, and fp16
// with a loss scale), under mpiexec with t = 1, 2, 3 or 4 ranks in one tensor-parallel group
// (and 2 x 2 as dp x tp on 4), against the whole mixed-precision model (stage 03) with the same
// micro-batches (stage 01) on the same batch.
//
// Nothing here can be bitwise: besides the reorderings of the fp32 shard (tests/dist/test_tp.cpp),
// each row-parallel layer rounds its partial sums to half before the group adds them (in half, as
// a GPU's bf16 all-reduce adds them), where the whole model rounds the layer's whole sum once,
// and its bias is added after that rounding. Each such rounding is a relative error of at most
// u (2^-8 bf16, 2^-11 fp16) on the layer's output, and the backward carries the forward's
// differences into every gradient. So every gradient tensor is compared by the relative norm of
// its difference, <= 8u (kGradBound, with the measured values); a missing reduction, a bias
// added t times, a wrong split or an unscaled fp16 gradient is off by 30% or more. The first
// step is bitwise stage 03's on the same gradients. The master weights after 3 steps: by the
// relative norm per tensor (kMasterBounds; tests/dist/mixed_reference.hpp says why they are
// loose), the key bias only bounded by 6 lr.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "dist/distributed_optimizer.hpp"
#include "mixed_reference.hpp"
#include "optim/adamw.hpp"
#include "precision/half.hpp"
#include "precision/mixed_model.hpp"
#include "tp_harness.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
// V T C L NH as test_tp.cpp's: 12 heads split 1, 2, 3 and 4 ways; V = 65 padded for every t > 1.
constexpr int kV = 65, kT = 8, kC = 48, kL = 2, kNH = 12;
constexpr int kBatch = 6;  // B x T = 48 token rows: divisible by t = 1..4 (sequence parallelism)
constexpr std::uint64_t kSeed = 21;
const HalfFormat kFormats[] = {HalfFormat::kBF16, HalfFormat::kFP16};

GPTConfig config() { return gpt_config_of_shape(kV, kT, kC, kL, kNH, "tp-mixed-test"); }

std::vector<int> tp_sizes(int world) {
  std::vector<int> s = {world};
  if (world == 4) s.push_back(2);
  return s;
}

std::string mode(bool sp) { return sp ? "with sequence parallelism" : "without sequence parallelism"; }

// The gradients' bound, relative norm of the difference per tensor, in units of u (measured: 2.1u
// to 3.2u over t = 2, 3, 4, with and without sequence parallelism, bf16 and fp16; 0 at t = 1).
constexpr double kGradBound = 8;
// After 3 steps (measured: weights up to 1.3e-2, bias thirds of c_attn up to 0.16, the LayerNorm
// biases up to 0.1): every gradient differs by ~2u here, where the pipeline's are bitwise but
// wte's, so more of the near-zero gradients flip their AdamW step.
const MasterBounds kMasterBounds{3e-2, 0.3};

void check_against_whole(Communicator& world, HalfFormat f, int t, bool sp, int m) {
  const int dp = world.size() / t, B = kBatch * dp;
  const Batch batch = random_batch(kV, B, kT, 40 + m);
  const double scale = loss_scale_of(f);
  TpHarness h(world, config(), t, sp, m, B, kT, kSeed, CheckpointPolicy{}, half_format_name(f), scale);
  const MixedWhole want = run_mixed_whole(config(), f, kSeed, batch, B, kT, m * dp, scale, h.options.adamw);
  INFO(where(world) << ", " << half_format_name(f) << ", t " << t << ", dp " << dp << ", m " << m << ", " << mode(sp));
  const double loss = h.forward_backward(batch.tokens, batch.targets);
  INFO("loss " << loss << ", the whole mixed model's " << want.first_loss);
  CHECK(std::fabs(loss - want.first_loss) <= 4 * unit_roundoff(f) * std::fabs(want.first_loss));
  const std::vector<float> mine = h.mixed_shard().grads_as_float();
  const std::vector<float> grads = h.gather_whole(mine.data());
  const ParamLayout whole(config());
  for (const auto& tensor : whole.tensors()) {
    const double err = relative_norm_error(grads.data() + tensor.offset, want.first_grads.data() + tensor.offset,
                                           tensor.numel);
    INFO("gradient of " << tensor.name << ": relative norm error " << err << " = " << err / unit_roundoff(f) << " u");
    CHECK(err <= kGradBound * unit_roundoff(f));
  }
  // The step: stage 03's on the same gradients, element by element (AdamW and the unscaling are
  // elementwise, and nothing is clipped), so the master weights after it are bitwise the whole
  // model's stepped on the gathered gradients.
  h.update();
  const std::vector<float> stepped = h.gather_whole(h.model->master_params());
  MixedPrecisionModel reference(config(), f, nullptr);
  reference.init_weights(kSeed);
  float_to_half(reference.half_grads(), grads.data(), grads.size(), f);  // exact: they are half values
  AdamW optimizer(reference.num_params(), h.options.adamw, nullptr);
  reference.optimizer_step(optimizer, h.options.adamw.lr, 1.0 / scale, 0.0);
  CHECK_MATCH(compare_bitwise("master weights after the first step, vs stage 03's step on the same gradients",
                              stepped.data(), reference.master_params(), stepped.size()));
  for (int step = 1; step < 3; ++step) {
    h.forward_backward(batch.tokens, batch.targets);
    h.update();
  }
  const std::vector<float> params = h.gather_whole(h.model->master_params());
  for (const auto& tensor : whole.tensors())
    check_master_after(tensor.name, params.data() + tensor.offset, want.master_after.data() + tensor.offset,
                       tensor.numel, kC, h.options.adamw.lr, kMasterBounds);
}

}  // namespace

TEST_CASE("mixed-precision tensor parallelism: loss, gradients and updates of the whole mixed model", "[tp_mixed]") {
  Communicator& world = test_world();
  for (HalfFormat f : kFormats)
    for (int t : tp_sizes(world.size()))
      for (bool sp : {false, true}) {
        if (sp && t == 1) continue;
        for (int m : {1, 2})
          if (f == HalfFormat::kBF16 || m == 2) check_against_whole(world, f, t, sp, m);  // fp16: its scale, m = 2
      }
}

TEST_CASE("mixed-precision tensor parallelism: the fp32 shard's collectives, activations in half", "[tp_mixed]") {
  Communicator& world = test_world();
  const int t = world.size();
  if (t < 2) return;
  const Batch batch = random_batch(kV, kBatch, kT, 6);
  for (bool sp : {false, true}) {
    INFO(where(world) << ", t " << t << ", " << mode(sp));
    TpHarness fp32(world, config(), t, sp, 1, kBatch, kT, kSeed);
    TpHarness bf16(world, config(), t, sp, 1, kBatch, kT, kSeed, CheckpointPolicy{}, "bf16");
    fp32.forward_backward(batch.tokens, batch.targets);
    const CommStats before = bf16.tp().stats();
    bf16.forward_backward(batch.tokens, batch.targets);
    const CommStats& after = bf16.tp().stats();
    // The same collectives in the same places (test_tp.cpp holds the fp32 ledger to the formula);
    // in half but the cross-entropy's three reductions of N statistics.
    const std::vector<TpCollective>&want = fp32.strategy->step_ledger(), &got = bf16.strategy->step_ledger();
    REQUIRE(got.size() == want.size());
    std::uint64_t ring_bytes[kCommOpCount] = {};  // what each rank sends, by the ring's formula
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("collective " << i << ": got " << comm_op_name(got[i].op) << " of " << got[i].elements << " x "
                         << got[i].element_bytes << " bytes at '" << got[i].where << "', fp32's "
                         << comm_op_name(want[i].op) << " of " << want[i].elements << " at '" << want[i].where << "'");
      CHECK(got[i].op == want[i].op);
      CHECK(got[i].elements == want[i].elements);
      CHECK(got[i].where == want[i].where);
      CHECK(want[i].element_bytes == 4);
      CHECK(got[i].element_bytes == (got[i].where == "cross-entropy" ? 4u : 2u));
      // A ring all-reduce sends 2 (t-1)/t of the buffer, an all-gather or a reduce-scatter (t-1)/t.
      const std::uint64_t bytes = got[i].elements * got[i].element_bytes * static_cast<std::uint64_t>(t - 1) / t;
      ring_bytes[static_cast<int>(got[i].op)] += got[i].op == CommOp::kAllReduce ? 2 * bytes : bytes;
    }
    for (CommOp op : {CommOp::kAllReduce, CommOp::kAllGather, CommOp::kReduceScatter}) {
      INFO(comm_op_name(op) << ": sent " << after[op].bytes_sent - before[op].bytes_sent << " bytes, the ledger's "
                            << ring_bytes[static_cast<int>(op)]);
      CHECK(after[op].bytes_sent - before[op].bytes_sent == ring_bytes[static_cast<int>(op)]);
    }
  }
}

TEST_CASE("mixed-precision tensor parallelism: 2 + 2 + 12 bytes per parameter of the shard, half activations",
          "[tp_mixed]") {
  Communicator& world = test_world();
  const int t = world.size();
  const Batch batch = random_batch(kV, kBatch, kT, 2);
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;
    for (const char* attention : {"naive", "flash"}) {
      INFO(where(world) << ", t " << t << ", " << mode(sp) << ", " << attention << " attention");
      TpHarness fp32(world, config(), t, sp, 1, kBatch, kT, kSeed);
      TpHarness bf16(world, config(), t, sp, 1, kBatch, kT, kSeed, CheckpointPolicy{}, "bf16");
      for (TpHarness* h : {&fp32, &bf16}) {
        h->model->set_attention(parse_attention_kind(attention));
        h->forward_backward(batch.tokens, batch.targets);
      }
      const std::uint64_t n = bf16.model->num_params();
      REQUIRE(n == fp32.model->num_params());  // test_tp.cpp holds n to the formula
      CHECK(bf16.tracker.current(MemCategory::kParams) == 2 * n);
      CHECK(bf16.tracker.current(MemCategory::kGrads) == 2 * n);
      CHECK(bf16.tracker.current(MemCategory::kOptimizer) == 4 * n + 8 * n);  // master weights, AdamW's m and v
      // The fp32 shard's saved elements at 2 bytes, but flash's lse (B, NH/t, T) per block in fp32.
      const std::uint64_t lse = std::string(attention) == "flash" ? kL * (kNH / t) * kBatch * kT : 0;
      const std::uint64_t fp32_bytes = fp32.tracker.current(MemCategory::kActivations);
      INFO("activations: fp32 " << fp32_bytes << " bytes, bf16 " << bf16.tracker.current(MemCategory::kActivations));
      CHECK(bf16.tracker.current(MemCategory::kActivations) == (fp32_bytes / 4 - lse) * 2 + lse * 4);
      // The half collectives' send and receive buffers, counted as communication buffers: grown to
      // the largest collective, an (N, C) activation each way (f's and g's all-reduces, or with
      // sequence parallelism the all-gather's output and the reduce-scatter's input), 2 bytes an
      // element. The fp32 shard sends its own buffers and has none of them.
      const std::uint64_t NC = static_cast<std::uint64_t>(kBatch) * kT * kC;
      const std::uint64_t staging = bf16.tracker.current(MemCategory::kComm) - fp32.tracker.current(MemCategory::kComm);
      INFO("communication buffers: fp32 " << fp32.tracker.current(MemCategory::kComm) << " bytes, bf16 "
                                          << bf16.tracker.current(MemCategory::kComm));
      CHECK(staging == 2 * (NC + NC));
    }
  }
}

TEST_CASE("mixed-precision tensor parallelism: replicated tensors stay bitwise equal on every rank", "[tp_mixed]") {
  Communicator& world = test_world();
  const int t = world.size();
  if (t < 2) return;
  const Batch batch = random_batch(kV, kBatch, kT, 12);
  for (HalfFormat f : kFormats)
    for (bool sp : {false, true}) {
      INFO(where(world) << ", " << half_format_name(f) << ", t " << t << ", " << mode(sp));
      TpHarness h(world, config(), t, sp, 1, kBatch, kT, kSeed, CheckpointPolicy{}, half_format_name(f),
                  loss_scale_of(f));
      for (int step = 0; step < 3; ++step) {
        h.forward_backward(batch.tokens, batch.targets);
        h.update();
      }
      // Rank 0's master weights of every replicated tensor (LayerNorms, wpe, the c_proj biases).
      const float* master = h.model->master_params();
      for (const auto& [begin, end] : replicated_ranges(h.any_shard().shard())) {
        std::vector<float> rank0(master + begin, master + end);
        h.tp().broadcast(rank0.data(), rank0.size(), 0);
        CHECK_MATCH(compare_bitwise("replicated master weights [" + std::to_string(begin) + ", " + std::to_string(end) +
                                        ") after 3 steps, this rank's vs rank 0's",
                                    master + begin, rank0.data(), end - begin));
      }
    }
}

TEST_CASE("mixed-precision dp x tp with ZeRO-1: the master weights of dp x tp bitwise, 12/d optimizer bytes",
          "[tp_mixed]") {
  Communicator& world = test_world();
  if (world.size() != 4) return;  // 2 replicas x 2 tp ranks
  const int B = 2 * kBatch, m = 2;
  const Batch batch = random_batch(kV, B, kT, 16);
  for (HalfFormat f : kFormats) {
    INFO(where(world) << ", " << half_format_name(f));
    const double scale = loss_scale_of(f);
    TpHarness plain(world, config(), 2, false, m, B, kT, kSeed, CheckpointPolicy{}, half_format_name(f), scale);
    TpHarness zero(world, config(), 2, false, m, B, kT, kSeed, CheckpointPolicy{}, half_format_name(f), scale, 1);
    for (int step = 0; step < 3; ++step)
      for (TpHarness* h : {&plain, &zero}) {
        h->forward_backward(batch.tokens, batch.targets);
        h->update();
      }
    auto& dist = dynamic_cast<DistributedOptimizer&>(*zero.model);
    // With d = 2 the reduce-scatter adds the same two half values the all-reduce adds.
    const std::vector<float> gathered = dist.gathered_params();
    CHECK_MATCH(compare_bitwise("master weights after 3 steps, ZeRO-1 vs none", gathered.data(),
                                plain.model->master_params(), plain.model->num_params()));
    const std::uint64_t n = plain.model->num_params(), shard = dist.shard_size();
    CHECK(zero.tracker.current(MemCategory::kParams) == 2 * n);
    CHECK(zero.tracker.current(MemCategory::kGrads) == 2 * n);
    CHECK(zero.tracker.current(MemCategory::kOptimizer) == 12 * shard);  // master, m and v of the shard
  }
}

TEST_CASE("mixed-precision tensor parallelism: checkpointing recomputes the same half gradients, bit for bit",
          "[tp_mixed]") {
  // A recomputed block widens the same half inputs and rounds at the same places, and its
  // collectives add the same half partial sums: nothing may change by a bit (stage 02's promise).
  Communicator& world = test_world();
  const int t = world.size();
  const Batch batch = random_batch(kV, kBatch, kT, 14);
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;
    TpHarness plain(world, config(), t, sp, 1, kBatch, kT, kSeed, CheckpointPolicy{}, "bf16");
    plain.forward_backward(batch.tokens, batch.targets);
    const std::vector<float> want = plain.mixed_shard().grads_as_float();
    for (const std::string policy : {"every:1", "sqrt", "selective"}) {
      INFO(where(world) << ", t " << t << ", " << mode(sp) << ", --checkpoint " << policy);
      TpHarness h(world, config(), t, sp, 1, kBatch, kT, kSeed, CheckpointPolicy::parse(policy), "bf16");
      h.forward_backward(batch.tokens, batch.targets);
      const std::vector<float> got = h.mixed_shard().grads_as_float();
      CHECK_MATCH(compare_bitwise("half gradients", got.data(), want.data(), want.size()));
      CHECK(h.tracker.peak(MemCategory::kActivations) <= plain.tracker.peak(MemCategory::kActivations));
      if (policy != "selective")  // selective recomputes the attention only
        CHECK(h.model->block_forward_count() > plain.model->block_forward_count());
    }
  }
}
