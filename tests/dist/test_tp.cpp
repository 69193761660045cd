// Stage 06, tensor (and sequence) parallelism, under mpiexec with t = 1, 2, 3 or 4 ranks in one
// tensor-parallel group (and 2 x 2 as dp x tp on 4), against stage 00/01 from the reference on
// the same batch.
//
// Bitwise: what no reduction and no matrix product touches: the embedding's output (its
// all-reduce adds one row and t - 1 rows of zeros: exact) and block 0's ln_1 (the same rows).
// The column-parallel c_attn output computes each output feature as the same dot product as the
// whole layer, but not bit for bit here: the BLAS (OpenBLAS, oneDNN: SCALELAB_BLAS) picks its
// sgemm kernel, and with it the order of the C-long sums, by the matrix's size, and a (N, 3C/t)
// product is another size than (N, 3C). Measured with OpenBLAS: 154 of 3456 elements differ, by
// at most 9e-8 (t = 2). So c_attn's and the
// attention's outputs are compared within |a - b| <= 1e-5 |b| + 1e-7 (a wrong head, a missing
// bias or a transposed split is off by O(1)).
// Tolerance: everything after the first row-parallel layer. Its all-reduce adds t partial sums
// of C/t (or 4C/t) products each, where the whole layer adds C products in one BLAS order, and
// the bias is added after the sum instead of before; the vocab-parallel cross-entropy sums its
// exponentials per rank. These are float reorderings, of relative size ~1e-7 per operation:
// loss within 1e-6 relative, every gradient within |a - b| <= 1e-4 |b| + 1e-5 max|b| (the
// second term covers gradients that are sums of cancelling terms, e.g. the key bias, whose exact
// gradient is zero), parameters after 3 AdamW steps by the relative norm of the difference per
// tensor, <= 1e-3 (the pipeline test's argument: AdamW's step m/sqrt(v) has size lr whatever the
// gradient's size, so rounding noise in a near-zero gradient moves a parameter by up to lr).
// A missing reduction, a bias added t times or a wrong split is off by O(1).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "ddp_fixtures.hpp"
#include "dist/tp_linear.hpp"
#include "dist/vocab_parallel.hpp"
#include "io/safetensors.hpp"
#include "model/layers/crossentropy.hpp"
#include "parallel/strategy_factory.hpp"
#include "prior_stage.hpp"
#include "resume_runs.hpp"
#include "tp_harness.hpp"
#include "train/trainer.hpp"
#include "world.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {
// V T C L NH: 12 heads split 1, 2, 3 and 4 ways; V = 65 needs padding for every t > 1
// (Vl = 33, 22, 17: 1, 1 and 3 padding rows).
const prior::ModelShape kShape{65, 8, 48, 2, 12};
constexpr int kBatch = 6;  // B x T = 48 token rows: divisible by t = 1..4 (sequence parallelism)
constexpr std::uint64_t kSeed = 21;

GPTConfig config() { return gpt_config_of_shape(kShape.V, kShape.T, kShape.C, kShape.L, kShape.NH, "tp-test"); }

// The tp group sizes this world runs: all ranks in one group, and 2 x 2 (dp x tp) on 4.
std::vector<int> tp_sizes(int world) {
  std::vector<int> s = {world};
  if (world == 4) s.push_back(2);
  return s;
}

std::string mode(bool sp) { return sp ? "with sequence parallelism" : "without sequence parallelism"; }

// Stage 01 on replica d's rows would differ from the whole batch's only by the 1/dp split, which
// the strategy's sync undoes: the whole batch's gradient is what every replica ends with.
void check_against_stage01(Communicator& world, int t, bool sp, int m) {
  const Batch batch = random_batch(kShape.V, kBatch * (world.size() / t), kShape.T, 30 + m);
  const int B = kBatch * (world.size() / t);
  const prior::StepsResult want = prior::stage01_steps(kShape, kSeed, batch.tokens, batch.targets, B, kShape.T,
                                                       m * (world.size() / t), 3);
  TpHarness h(world, config(), t, sp, m, B, kShape.T, kSeed);
  INFO(where(world) << ", t " << t << ", dp " << world.size() / t << ", m " << m << ", " << mode(sp));
  const double loss = h.forward_backward(batch.tokens, batch.targets);
  CHECK(std::fabs(loss - want.first_loss) <= 1e-6 * std::fabs(want.first_loss));
  const std::vector<float> grads = h.gather_whole(h.model->fp32_grads());
  const double atol = 1e-5 * max_abs(want.first_grads);
  const ParamLayout whole(config());
  for (const auto& tensor : whole.tensors())
    CHECK_MATCH(compare_close("gradient of " + tensor.name, grads.data() + tensor.offset,
                              want.first_grads.data() + tensor.offset, tensor.numel, 1e-4, atol));
  h.update();
  for (int step = 1; step < 3; ++step) {
    h.forward_backward(batch.tokens, batch.targets);
    h.update();
  }
  const std::vector<float> params = h.gather_whole(h.model->master_params());
  for (const auto& tensor : whole.tensors()) {
    const double err = relative_norm_error(params.data() + tensor.offset, want.params_after.data() + tensor.offset,
                                           tensor.numel);
    INFO("params after 3 steps, " << tensor.name << ": relative norm error " << err);
    CHECK(err <= 1e-3);
  }
}
}  // namespace

TEST_CASE("tensor-parallel loss, gradients and updates equal stage 01", "[graded][tp_equal]") {
  Communicator& world = test_world();
  for (int t : tp_sizes(world.size()))
    for (bool sp : {false, true}) {
      if (sp && t == 1) continue;  // sequence parallelism splits a group of at least 2
      for (int m : {1, 2}) check_against_stage01(world, t, sp, m);
    }
}

TEST_CASE("the embedding and ln_1 are bit for bit, column-parallel outputs the whole layer's columns",
          "[graded][tp_bitwise]") {
  Communicator& world = test_world();
  const int t = world.size();
  const Batch batch = random_batch(kShape.V, kBatch, kShape.T, 4);
  const prior::ForwardSnapshot want = prior::stage00_forward(kShape, kSeed, batch.tokens, batch.targets, kBatch,
                                                             kShape.T);
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;
    INFO(where(world) << ", t " << t << ", " << mode(sp));
    TpHarness h(world, config(), t, sp, 1, kBatch, kShape.T, kSeed);
    h.model->forward(batch.tokens.data(), batch.targets.data(), kBatch, kShape.T);
    const TpDims& d = h.shard().dims();
    const std::size_t N = d.N(), C = kShape.C, Cl = d.Cl(), r = static_cast<std::size_t>(world.rank());
    const std::size_t first = sp ? r * (N / t) : 0;
    CHECK_MATCH(compare_bitwise("embedding output (this rank's rows)", h.shard().encoded(),
                                want.encoded.data() + first * C, d.rows() * C));
    const BlockActs<float>& a = h.shard().block_acts(0);
    CHECK_MATCH(
        compare_bitwise("block 0 ln_1 (all rows, gathered under sequence parallelism)", a.ln1, want.ln1.data(), N * C));
    // This rank's heads: columns [r Cl, (r+1) Cl) of q, of k and of v, and of the attention output.
    std::vector<float> qkv_cols, atty_cols;
    for (std::size_t i = 0; i < N; ++i) {
      for (std::size_t part = 0; part < 3; ++part) {
        const float* row = want.qkv.data() + i * 3 * C + part * C + r * Cl;
        qkv_cols.insert(qkv_cols.end(), row, row + Cl);
      }
      const float* row = want.atty.data() + i * C + r * Cl;
      atty_cols.insert(atty_cols.end(), row, row + Cl);
    }
    CHECK_MATCH(
        compare_close("block 0 c_attn output, this rank's heads", a.qkv, qkv_cols.data(), N * 3 * Cl, 1e-5, 1e-7));
    CHECK_MATCH(
        compare_close("block 0 attention output, this rank's heads", a.atty, atty_cols.data(), N * Cl, 1e-5, 1e-7));
    // The softmax over the padded vocabulary: this rank's real columns of the whole softmax.
    const VocabRange& v = h.shard().shard().vocab();
    std::vector<float> probs_cols;
    for (std::size_t i = 0; i < N; ++i) {
      const float* row = want.probs.data() + i * kShape.V + v.begin;
      probs_cols.insert(probs_cols.end(), row, row + v.real());
      probs_cols.insert(probs_cols.end(), static_cast<std::size_t>(v.local - v.real()), 0.0f);  // padding
    }
    CHECK_MATCH(compare_close("softmax of the logits, this rank's columns (padding 0)", h.shard().probs(),
                              probs_cols.data(), N * v.local, 1e-5, 1e-7));
  }
}

TEST_CASE("padded vocabulary rows never change the loss and never learn", "[graded][tp_vocab]") {
  Communicator& world = test_world();
  const int t = world.size();
  if (t < 2) return;
  const Batch batch = random_batch(kShape.V, kBatch, kShape.T, 8);
  for (bool sp : {false, true}) {
    INFO(where(world) << ", t " << t << ", " << mode(sp));
    TpHarness h(world, config(), t, sp, 1, kBatch, kShape.T, kSeed);
    const double clean = h.forward_backward(batch.tokens, batch.targets);
    // Garbage in the padding rows of this rank's wte (large enough to win any max if not masked).
    const VocabRange& v = h.shard().shard().vocab();
    const ParamTensor& wte = h.model->layout().find("transformer.wte.weight");
    float* w = h.shard().params() + wte.offset;
    for (std::size_t i = static_cast<std::size_t>(v.real()) * kShape.C; i < wte.numel; ++i) w[i] = 50.0f;
    const double dirty = h.forward_backward(batch.tokens, batch.targets);
    CHECK(dirty == clean);
    const float* g = h.shard().grads() + wte.offset;
    for (std::size_t i = static_cast<std::size_t>(v.real()) * kShape.C; i < wte.numel; ++i) {
      INFO("gradient of padding element " << i << " of this rank's wte");
      REQUIRE(g[i] == 0.0f);
    }
  }
}

TEST_CASE("the vocab-parallel cross-entropy equals stage 00's on the whole vocabulary", "[graded][tp_vocab]") {
  Communicator& world = test_world();
  const int t = world.size(), N = 5;
  // 29 rows of vocabulary: padded for t = 2, 3, 4. 4 rows on 3 ranks: blocks of 2, so the last
  // rank holds padding only (its real() is 0).
  for (const int V : {29, 4}) {
    TpGroup tp;
    tp.comm = &world;
    const VocabRange v = vocab_range(V, t, world.rank());
    std::vector<float> logits(static_cast<std::size_t>(N) * V);
    // Rows 1 and 3 sit 300 above and below the rest: exp overflows (inf) or underflows (a sum of
    // 0) unless each row's maximum over all ranks is subtracted first (softmax does not change).
    const float row_offset[N] = {0.0f, 300.0f, 0.0f, -300.0f, 0.0f};
    for (std::size_t i = 0; i < logits.size(); ++i)
      logits[i] = std::sin(0.7f * static_cast<float>(i)) * 4.0f + row_offset[i / V];
    const std::vector<int> targets = {0, V - 1, V / 2, V / 2 + 1, V - 2};
    std::vector<float> probs(logits.size()), losses(N);
    const float want = crossentropy_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V);
    // The padding columns hold a value that would win any maximum they entered.
    // The outputs run on past their N rows with guard values, which must stay.
    constexpr std::size_t kGuards = 8;
    constexpr float kGuard = 7.5f;
    std::vector<float> mine(static_cast<std::size_t>(N) * v.local, 1e30f), my_probs(mine.size() + kGuards, kGuard),
        my_losses(N);
    for (int i = 0; i < N; ++i)
      std::copy(logits.begin() + i * V + v.begin, logits.begin() + i * V + v.begin + v.real(),
                mine.begin() + i * v.local);
    const float got = vocab_parallel_cross_entropy_forward(tp, my_probs.data(), my_losses.data(), mine.data(),
                                                           targets.data(), v, N);
    INFO(where(world) << ", V " << V << ": this rank's columns [" << v.begin << ", " << v.begin + v.local << "), "
                      << v.real() << " real; mean loss " << got << ", stage 00's " << want);
    CHECK(std::fabs(got - want) <= 1e-6f * std::fabs(want));
    CHECK_MATCH(compare_close("per-row losses", my_losses.data(), losses.data(), N, 1e-6, 1e-7));
    REQUIRE(tp.ledger.size() == 3);  // max, target logit, sum of exponentials
    std::vector<float> dlogits(mine.size() + kGuards, kGuard), want_d(logits.size());
    crossentropy_backward(want_d.data(), probs.data(), targets.data(), 0.2f, N, V);
    vocab_parallel_cross_entropy_backward(dlogits.data(), my_probs.data(), targets.data(), v, 0.2f, N);
    CHECK(tp.ledger.size() == 3);                                         // none in backward
    CHECK_MATCH(compare_guards("probs", my_probs, mine.size(), kGuard));  // nothing past N rows
    CHECK_MATCH(compare_guards("dlogits", dlogits, mine.size(), kGuard));
    for (int i = 0; i < N; ++i) {
      INFO("row " << i);
      CHECK_MATCH(compare_close("dlogits, this rank's columns", dlogits.data() + i * v.local,
                                want_d.data() + i * V + v.begin, static_cast<std::size_t>(v.real()), 1e-5, 1e-7));
      for (int j = v.real(); j < v.local; ++j) CHECK(dlogits[static_cast<std::size_t>(i) * v.local + j] == 0.0f);
    }
  }
}

namespace {
// The collectives of one step by the formula (one micro-batch), in order: see dist/tp_model.hpp.
std::vector<TpCollective> ledger_formula(int L, std::size_t N, std::size_t C, bool sp, std::size_t replicated) {
  const std::size_t NC = N * C;
  const CommOp sum_into_mine = sp ? CommOp::kReduceScatter : CommOp::kAllReduce;
  std::vector<TpCollective> f;
  auto add = [&](CommOp op, std::size_t n, const std::string& where) { f.push_back({op, n, where}); };
  add(sum_into_mine, NC, "embedding");  // g forward of the vocab-parallel lookup
  for (int l = 0; l < L; ++l) {
    const std::string b = "block " + std::to_string(l);
    if (sp) add(CommOp::kAllGather, NC, b);  // f before c_attn
    add(sum_into_mine, NC, b);               // g after attn.c_proj
    if (sp) add(CommOp::kAllGather, NC, b);  // f before c_fc
    add(sum_into_mine, NC, b);               // g after mlp.c_proj
  }
  if (sp) add(CommOp::kAllGather, NC, "head");  // f before the LM head
  for (int i = 0; i < 3; ++i) add(CommOp::kAllReduce, N, "cross-entropy");
  add(sum_into_mine, NC, "head");  // f backward of the LM head
  for (int l = L - 1; l >= 0; --l) {
    const std::string b = "block " + std::to_string(l);
    if (sp) add(CommOp::kAllGather, NC, b);  // g backward of mlp.c_proj
    add(sum_into_mine, NC, b);               // f backward of c_fc
    if (sp) add(CommOp::kAllGather, NC, b);  // g backward of attn.c_proj
    add(sum_into_mine, NC, b);               // f backward of c_attn
  }
  if (sp) add(CommOp::kAllGather, NC, "embedding");  // g backward of the lookup
  if (sp) add(CommOp::kAllReduce, replicated, "sequence-parallel gradients");
  return f;
}
}  // namespace

TEST_CASE("the communication ledger and bytes per rank equal the formula", "[graded][tp_ledger]") {
  Communicator& world = test_world();
  const int t = world.size();
  if (t < 2) return;
  const Batch batch = random_batch(kShape.V, kBatch, kShape.T, 6);
  for (bool sp : {false, true}) {
    INFO(where(world) << ", t " << t << ", " << mode(sp));
    TpHarness h(world, config(), t, sp, 1, kBatch, kShape.T, kSeed);
    const CommStats before = h.tp().stats();
    h.forward_backward(batch.tokens, batch.targets);
    const CommStats& after = h.tp().stats();
    const std::size_t N = static_cast<std::size_t>(kBatch) * kShape.T, C = kShape.C;
    const std::size_t R = h.shard().shard().replicated_elements();
    const std::vector<TpCollective> want = ledger_formula(kShape.L, N, C, sp, R);
    const std::vector<TpCollective>& got = h.strategy->step_ledger();
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      INFO("collective " << i << ": got " << comm_op_name(got[i].op) << " of " << got[i].elements << " at '"
                         << got[i].where << "', the formula's " << comm_op_name(want[i].op) << " of "
                         << want[i].elements << " at '" << want[i].where << "'");
      CHECK(got[i].op == want[i].op);
      CHECK(got[i].elements == want[i].elements);
      CHECK(got[i].where == want[i].where);
    }
    // Bytes per rank (every count here divides by t): a ring all-reduce sends 2 (t-1)/t of the
    // buffer, an all-gather or a reduce-scatter (t-1)/t. 4L + 2 all-reduces of N C either way:
    // sequence parallelism sends the same bytes as 4L + 2 all-gathers plus 4L + 2 reduce-scatters.
    const std::uint64_t big = (4 * kShape.L + 2) * N * C * 4, small = 3 * N * 4;
    const std::uint64_t ring = static_cast<std::uint64_t>(t - 1);
    auto sent = [&](CommOp op) { return after[op].bytes_sent - before[op].bytes_sent; };
    if (!sp) {
      CHECK(sent(CommOp::kAllReduce) == 2 * ring * (big + small) / t);
      CHECK(sent(CommOp::kAllGather) + sent(CommOp::kReduceScatter) == 0);
    } else {
      CHECK(sent(CommOp::kAllGather) == ring * big / t);
      CHECK(sent(CommOp::kReduceScatter) == ring * big / t);
      CHECK(sent(CommOp::kAllReduce) == 2 * ring * (small + R * 4) / t);
    }
  }
}

namespace {
// Parameters per rank by the formula: split tensors / t, replicated ones whole, wte's padded rows.
std::size_t params_formula(int t) {
  const std::size_t C = kShape.C, T = kShape.T, L = kShape.L, n = static_cast<std::size_t>(t);
  const std::size_t Vl = (kShape.V + n - 1) / n;
  const std::size_t block = 4 * C                      // ln_1, ln_2 (replicated)
                            + (3 * C * C + 3 * C) / n  // c_attn (heads)
                            + C * C / n + C            // attn.c_proj (columns) + bias (replicated)
                            + (4 * C * C + 4 * C) / n  // c_fc (rows)
                            + 4 * C * C / n + C;       // mlp.c_proj (columns) + bias (replicated)
  return Vl * C + T * C + L * block + 2 * C;
}
// Saved activations per rank (no checkpointing, one micro-batch of B rows), derived in
// docs/stages/06-tensor-parallel.md: N = B T rows, Nl = N (N/t with sequence parallelism).
std::size_t activations_formula(int t, bool sp, int B) {
  const std::size_t n = static_cast<std::size_t>(t), T = kShape.T, C = kShape.C, L = kShape.L;
  const std::size_t N = static_cast<std::size_t>(B) * T, rows = sp ? N / n : N, Cl = C / n;
  const std::size_t Vl = (kShape.V + n - 1) / n;
  const std::size_t block = 2 * N * C + 2 * rows * C + 12 * N * Cl + 4 * rows + (kShape.NH / n) * B * T * T;
  return L * block + rows * C + N * C + 2 * rows + N * Vl + N;
}
}  // namespace

TEST_CASE("per-rank weight, gradient, Adam and activation bytes equal the formulas", "[graded][tp_memory]") {
  Communicator& world = test_world();
  const int t = world.size();
  const Batch batch = random_batch(kShape.V, kBatch, kShape.T, 2);
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;
    INFO(where(world) << ", t " << t << ", " << mode(sp));
    TpHarness h(world, config(), t, sp, 1, kBatch, kShape.T, kSeed);
    h.forward_backward(batch.tokens, batch.targets);
    const std::size_t P = params_formula(t);
    CHECK(h.tracker.current(MemCategory::kParams) == 4 * P);
    CHECK(h.tracker.current(MemCategory::kGrads) == 4 * P);
    CHECK(h.tracker.current(MemCategory::kOptimizer) == 8 * P);
    INFO("activations: measured " << h.tracker.current(MemCategory::kActivations) << " bytes, formula "
                                  << 4 * activations_formula(t, sp, kBatch));
    CHECK(h.tracker.current(MemCategory::kActivations) == 4 * activations_formula(t, sp, kBatch));
  }
}

TEST_CASE("replicated tensors stay bitwise equal on every tensor-parallel rank", "[graded][tp_sp_grads]") {
  Communicator& world = test_world();
  const int t = world.size();
  if (t < 2) return;
  const Batch batch = random_batch(kShape.V, kBatch, kShape.T, 12);
  for (bool sp : {false, true}) {
    INFO(where(world) << ", t " << t << ", " << mode(sp));
    TpHarness h(world, config(), t, sp, 1, kBatch, kShape.T, kSeed);
    for (int step = 0; step < 3; ++step) {
      h.forward_backward(batch.tokens, batch.targets);
      h.update();
    }
    // Rank 0's copy of every replicated tensor (LayerNorms, wpe, the c_proj biases), to all.
    const TpLayout& shard = h.shard().shard();
    for (std::size_t i = 0; i < shard.layout().tensors().size(); ++i) {
      if (shard.split(i) != TpSplit::kReplicated) continue;
      const ParamTensor& tensor = shard.layout().tensors()[i];
      std::vector<float> rank0(h.shard().params() + tensor.offset, h.shard().params() + tensor.offset + tensor.numel);
      h.tp().broadcast(rank0.data(), rank0.size(), 0);
      CHECK_MATCH(compare_bitwise(tensor.name + " after 3 steps, this rank's vs rank 0's",
                                  h.shard().params() + tensor.offset, rank0.data(), tensor.numel));
    }
  }
}

TEST_CASE("checkpointing recomputes the same tensor-parallel gradients, bit for bit", "[tp_checkpoint]") {
  Communicator& world = test_world();
  const int t = world.size();
  const Batch batch = random_batch(kShape.V, kBatch, kShape.T, 14);
  for (bool sp : {false, true}) {
    if (sp && t == 1) continue;
    TpHarness plain(world, config(), t, sp, 1, kBatch, kShape.T, kSeed);
    plain.forward_backward(batch.tokens, batch.targets);
    for (const std::string policy : {"every:1", "sqrt", "selective"}) {
      INFO(where(world) << ", t " << t << ", " << mode(sp) << ", --checkpoint " << policy);
      TpHarness h(world, config(), t, sp, 1, kBatch, kShape.T, kSeed, CheckpointPolicy::parse(policy));
      h.forward_backward(batch.tokens, batch.targets);
      CHECK_MATCH(
          compare_bitwise("gradients", h.model->fp32_grads(), plain.model->fp32_grads(), h.model->num_params()));
      CHECK(h.tracker.peak(MemCategory::kActivations) <= plain.tracker.peak(MemCategory::kActivations));
    }
  }
}

TEST_CASE("a tensor-parallel run saved after 2 steps and resumed for 2 equals 4 steps", "[tp_resume]") {
  Communicator& world = test_world();
  const int t = world.size();
  if (t < 2) return;
  TrainOptions o;
  o.config = "tiny";
  o.shape.num_heads = 12;
  o.shape.channels = 48;
  o.batch = 6;  // 6 x 16 token rows split over 2, 3 and 4 ranks
  o.steps = 4;
  o.seed = kSeed;
  o.data = tiny_token_shard(world, "scalelab_tp_resume.bin");
  o.parallel.tp = t;
  o.parallel.sequence_parallel = true;
  const std::string state = per_world_temp_path(world, "scalelab_tp_resume.state");
  const std::string weights = per_world_temp_path(world, "scalelab_tp_resume.safetensors");
  const auto runs = run_straight_and_resumed(o, state, make_strategy_factory(&world));
  Trainer& straight = *runs->straight;
  INFO(where(world));
  CHECK_MATCH(compare_bitwise("this rank's shard, resumed vs straight", runs->resumed->model().master_params(),
                              straight.model().master_params(), straight.model().num_params()));
  // The weights file holds the whole model: one rank's load of it, cut to this rank's shard, is
  // the shard.
  straight.save_weights(weights);
  std::vector<float> whole(ParamLayout(straight.model().config()).num_params());
  load_weights(weights, straight.model().config(), whole.data());
  TpLayout layout(straight.model().config(), t, world.rank());
  std::vector<float> mine(layout.layout().num_params());
  layout.shard(whole.data(), mine.data());
  CHECK_MATCH(compare_bitwise("shard of the saved whole model vs this rank's", mine.data(),
                              straight.model().master_params(), mine.size()));
}

TEST_CASE("bad tensor-parallel settings fail on every rank with one message", "[tp_errors]") {
  Communicator& world = test_world();
  INFO(where(world));
  GPTConfig c = config();
  c.num_heads = 4;
  CHECK_THROWS_WITH(TpLayout(c, 8, 0), Catch::Contains("more ranks than the model's 4 attention heads"));
  CHECK_THROWS_WITH(TpLayout(c, 3, 0), Catch::Contains("does not divide the model's 4 heads"));
  TrainOptions o;
  o.parallel.tp = 2;
  o.device = "cuda";
  CHECK_THROWS_WITH(TensorParallelStrategy(world, o), Catch::Contains("gave it no GPU shards"));
  const int t = world.size();
  if (t < 2) return;
  // 5 x 8 = 40 token rows do not split over 3 ranks; 4 x 8 = 32 not over 3 either.
  const int B = t == 3 ? 5 : 3;
  TpHarness h(world, config(), t, true, 1, B, kShape.T, kSeed);
  const Batch batch = random_batch(kShape.V, B, kShape.T, 1);
  if ((B * kShape.T) % t != 0)
    CHECK_THROWS_WITH(h.model->forward(batch.tokens.data(), batch.targets.data(), B, kShape.T),
                      Catch::Contains("--sequence-parallel splits the"));
}
