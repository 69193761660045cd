// Stage 05 in mixed precision: the mixed-precision GPT (stage 03) cut into slices of blocks,
// chained by hand, computes what the whole mixed-precision model computes. Each slice widens the
// same half tensors, runs the same fp32 layer calls and rounds at the same boundaries; what
// crosses between slices (the blocks' output forward, its gradient backward) is a tensor the
// whole model also stores as half, so it crosses exactly. The loss and every half gradient are
// therefore BITWISE equal, under every checkpoint policy and attention kind, except the tied wte:
// the whole model adds the LM head's part h and the embeddings' part e in fp32 and rounds once,
// round(h + e); the first and last slices round their parts apart, round(h) + round(e), so their
// sum is compared within the bound those three roundings allow (below).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "activation_formula.hpp"
#include "batch.hpp"
#include "compare.hpp"
#include "precision/mixed_model.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

constexpr int kB = 3, kT = 16;
constexpr std::uint64_t kSeed = 5;
const HalfFormat kFormats[] = {HalfFormat::kBF16, HalfFormat::kFP16};

// The tiny shape with 4 layers, so that 3 slices can have different lengths.
GPTConfig tiny4() {
  GPTConfig c = gpt_config_by_name("tiny");
  c.name = "tiny4";
  c.num_layers = 4;
  return c;
}

struct Whole {
  double loss = 0;
  std::vector<std::uint16_t> grads;
  std::unique_ptr<ParamLayout> layout;
};

Whole run_whole(const GPTConfig& c, HalfFormat f, const CheckpointPolicy& policy, AttentionKind attention,
                const Batch& batch, double loss_scale) {
  MixedPrecisionModel model(c, f, nullptr);
  model.init_weights(kSeed);
  model.set_checkpoint_policy(policy);
  model.set_attention(attention);
  Whole w;
  w.loss = model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
  model.backward(loss_scale);
  w.grads.assign(model.half_grads(), model.half_grads() + model.num_params());
  w.layout = std::make_unique<ParamLayout>(c);
  return w;
}

std::unique_ptr<MixedPrecisionModel> make_slice(const GPTConfig& c, HalfFormat f, int first, int n,
                                                MemoryTracker* tracker) {
  MixedStorage storage;
  storage.slice = ModelSlice::layers(c, first, n);
  auto s = std::make_unique<MixedPrecisionModel>(c, f, tracker, storage);
  s->init_weights(kSeed);
  return s;
}

struct Chain {
  double loss = 0;
  std::vector<std::unique_ptr<MixedPrecisionModel>> slices;
};

// Slices of `lengths` blocks, forward from the first to the last, backward from the last to the first.
Chain run_chain(const GPTConfig& c, HalfFormat f, const std::vector<int>& lengths, const CheckpointPolicy& policy,
                AttentionKind attention, const Batch& batch, double loss_scale) {
  Chain ch;
  int first = 0;
  for (int n : lengths) {
    ch.slices.push_back(make_slice(c, f, first, n, nullptr));
    ch.slices.back()->set_checkpoint_policy(policy);
    ch.slices.back()->set_attention(attention);
    first += n;
  }
  const float* input = nullptr;
  for (auto& s : ch.slices) {
    ch.loss = s->forward_slice(batch.tokens.data(), input, batch.targets.data(), kB, kT);
    input = s->output();
  }
  const float* doutput = nullptr;
  for (auto it = ch.slices.rbegin(); it != ch.slices.rend(); ++it) {
    (*it)->backward_slice(doutput, loss_scale);
    doutput = (*it)->input_grad();
  }
  return ch;
}

std::vector<float> widened(const std::uint16_t* h, std::size_t n, HalfFormat f) {
  std::vector<float> out(n);
  half_to_float(out.data(), h, n, f);
  return out;
}

// The tied wte's two halves against the whole model's: with u the unit roundoff of the format
// (2^-8 for bf16, 2^-11 for fp16), a = round(h), b = round(e), W = round(h + e):
//   |a + b - W| <= u|h| + u|e| + u|h + e| <= 2u(|h| + |e|) <= 2u(1 + u)(|a| + |b|),
// plus fp16's subnormal spacing 2^-24 for each of the three roundings.
Comparison compare_tied(const std::string& what, const float* a, const float* b, const float* W, std::size_t n,
                        HalfFormat f) {
  const double u = f == HalfFormat::kBF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  const double tiny = f == HalfFormat::kFP16 ? 3 * std::ldexp(1.0, -24) : 0.0;
  Comparison c;
  c.what = what;
  c.count = n;
  for (std::size_t i = 0; i < n; ++i) {
    const double got = static_cast<double>(a[i]) + b[i], want = W[i];
    const double err = std::abs(got - want), bound = 2 * u * (1 + u) * (std::abs(a[i]) + std::abs(b[i])) + tiny;
    c.max_abs_err = std::max(c.max_abs_err, err);
    if (want != 0) c.max_rel_err = std::max(c.max_rel_err, err / std::abs(want));
    if (!(err <= bound)) {
      if (c.mismatches++ == 0) {
        c.first_bad = i;
        c.got_at_first = got;
        c.want_at_first = want;
      }
      c.ok = false;
    }
  }
  return c;
}

}  // namespace

TEST_CASE("mixed-precision slices chained by hand: loss and half gradients bitwise equal to the whole model",
          "[mixed_slices]") {
  const GPTConfig c = tiny4();
  const Batch batch = random_batch(c.vocab_size, kB, kT, 11);
  const std::pair<const char*, AttentionKind> cases[] = {
      {"none", AttentionKind::kNaive},      {"sqrt", AttentionKind::kNaive}, {"every:3", AttentionKind::kNaive},
      {"selective", AttentionKind::kNaive}, {"none", AttentionKind::kFlash}, {"every", AttentionKind::kChunked}};
  for (HalfFormat f : kFormats) {
    // fp16 with a loss scale, as it trains (stage 03's scaler); bf16 without.
    const double loss_scale = f == HalfFormat::kFP16 ? 1024.0 : 1.0;
    for (const auto& [policy_text, attention] : cases) {
      const CheckpointPolicy policy = CheckpointPolicy::parse(policy_text);
      const Whole whole = run_whole(c, f, policy, attention, batch, loss_scale);
      for (const std::vector<int>& lengths :
           {std::vector<int>{2, 2}, std::vector<int>{1, 2, 1}, std::vector<int>{3, 1}}) {
        INFO(half_format_name(f) << ", policy " << policy_text << ", attention " << attention_kind_name(attention)
                                 << ", " << lengths.size() << " slices, the first of " << lengths[0] << " blocks");
        const Chain ch = run_chain(c, f, lengths, policy, attention, batch, loss_scale);
        CHECK(ch.loss == whole.loss);
        for (const auto& s : ch.slices)
          for (const auto& t : s->layout().tensors()) {
            if (t.name == "transformer.wte.weight") continue;  // the tied weight: below
            CHECK_MATCH(compare_bitwise(t.name + " half gradient of slice " + s->slice().describe(c),
                                        s->half_grads() + t.offset,
                                        whole.grads.data() + whole.layout->find(t.name).offset, t.numel));
          }
        const MixedPrecisionModel& first = *ch.slices.front();
        const MixedPrecisionModel& last = *ch.slices.back();
        const std::size_t n = static_cast<std::size_t>(c.vocab_size) * c.channels;
        const std::vector<float> a = widened(first.half_grads() + first.layout().find("transformer.wte.weight").offset,
                                             n, f);
        const std::vector<float> b = widened(last.half_grads() + last.layout().find("transformer.wte.weight").offset, n,
                                             f);
        const std::vector<float> W = widened(whole.grads.data() + whole.layout->find("transformer.wte.weight").offset,
                                             n, f);
        CHECK_MATCH(compare_tied("wte gradient, first + last slice", a.data(), b.data(), W.data(), n, f));
      }
    }
  }
}

TEST_CASE("mixed-precision slices start from the whole model's initial half weights", "[mixed_slices]") {
  const GPTConfig c = tiny4();
  MixedPrecisionModel whole(c, HalfFormat::kBF16, nullptr);
  whole.init_weights(kSeed);
  for (auto [first, n] : {std::pair{0, 1}, std::pair{1, 2}, std::pair{3, 1}}) {
    const auto slice = make_slice(c, HalfFormat::kBF16, first, n, nullptr);
    for (const auto& t : slice->layout().tensors()) {
      const std::size_t w = whole.layout().find(t.name).offset;
      CHECK_MATCH(compare_bitwise("initial " + t.name + " of slice " + slice->slice().describe(c),
                                  slice->half_params() + t.offset, whole.half_params() + w, t.numel));
      CHECK_MATCH(compare_bitwise("initial master " + t.name + " of slice " + slice->slice().describe(c),
                                  slice->master_params() + t.offset, whole.master_params() + w, t.numel));
    }
  }
}

TEST_CASE("mixed-precision slices: two micro-batches in flight give the gradients of one after the other",
          "[mixed_slices]") {
  // Forward of micro-batch 0 and 1 with their activations stashed, then both backwards (the
  // order 1F1B's warm-up gives a pipeline stage), against forward-backward of each in turn.
  const GPTConfig c = tiny4();
  const Batch b0 = random_batch(c.vocab_size, kB, kT, 21), b1 = random_batch(c.vocab_size, kB, kT, 22);
  const Shape shape{static_cast<std::size_t>(c.vocab_size), static_cast<std::size_t>(c.channels), 2,
                    static_cast<std::size_t>(c.num_heads)};
  for (HalfFormat f : kFormats) {
    for (const bool head : {false, true}) {
      INFO(half_format_name(f) << (head ? ", the last slice (blocks 2-3 and the head)"
                                        : ", the first slice (blocks 0-1)"));
      const int first = head ? 2 : 0;
      // A fixed input and output gradient stand in for the neighbours (half values, as they send).
      std::vector<float> input(static_cast<std::size_t>(kB) * kT * c.channels), dout(input.size());
      for (std::size_t i = 0; i < input.size(); ++i) {
        input[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
        dout[i] = static_cast<float>(1e-3 * std::cos(0.11 * static_cast<double>(i)));
      }
      round_to_half(input.data(), input.size(), f);
      round_to_half(dout.data(), dout.size(), f);
      auto run = [&](MixedPrecisionModel& m, const Batch& b) {
        return m.forward_slice(b.tokens.data(), head ? input.data() : nullptr, b.targets.data(), kB, kT);
      };
      MemoryTracker in_turn_tracker, in_flight_tracker;
      auto in_turn = make_slice(c, f, first, 2, &in_turn_tracker);
      auto in_flight = make_slice(c, f, first, 2, &in_flight_tracker);
      std::vector<double> losses_in_turn, losses_in_flight;
      for (const Batch* b : {&b0, &b1}) {
        losses_in_turn.push_back(run(*in_turn, *b));
        in_turn->backward_slice(head ? nullptr : dout.data(), 1.0);
      }
      losses_in_flight.push_back(run(*in_flight, b0));
      in_flight->stash_activations(0);
      losses_in_flight.push_back(run(*in_flight, b1));
      in_flight->stash_activations(1);
      CHECK(in_flight->stashed_count() == 2);
      for (int key : {0, 1}) {
        in_flight->restore_activations(key);
        in_flight->backward_slice(head ? nullptr : dout.data(), 1.0);
        in_flight->release_activations();
      }
      CHECK(in_flight->stashed_count() == 0);
      CHECK(losses_in_flight == losses_in_turn);
      CHECK_MATCH(compare_bitwise("half gradients after two micro-batches in flight", in_flight->half_grads(),
                                  in_turn->half_grads(), in_turn->num_params()));
      // Activations: two micro-batches' sets at once, each in half: the slice's blocks, its input
      // (B,T,C) and, with the head, ln_f's output and statistics, the losses and the probabilities.
      const std::size_t B = kB, T = kT, BTC = B * T * c.channels;
      const std::size_t one_set = 2 * (BTC + 2 * block_elements(shape, B, T) +
                                       (head ? head_elements(shape, B, T) - BTC : 0));
      CHECK(in_turn_tracker.peak(MemCategory::kActivations) == one_set);
      CHECK(in_flight_tracker.peak(MemCategory::kActivations) == 2 * one_set);
      CHECK(in_flight_tracker.current(MemCategory::kActivations) == 0);
    }
  }
}

TEST_CASE("mixed-precision slices refuse what a slice cannot do, naming the slice", "[mixed_slices]") {
  const GPTConfig c = tiny4();
  const auto middle = make_slice(c, HalfFormat::kBF16, 1, 2, nullptr);
  const Batch batch = random_batch(c.vocab_size, kB, kT, 3);
  CHECK_THROWS_WITH(middle->forward_slice(batch.tokens.data(), nullptr, nullptr, kB, kT),
                    Catch::Contains("slice layers [1, 3) starts from input activations"));
  CHECK_THROWS_WITH(middle->backward(1.0), Catch::Contains("which has no head: use backward_slice(doutput)"));
  CHECK_THROWS_WITH(middle->backward_slice(nullptr, 1.0), Catch::Contains("backward_slice() called before"));
  CHECK_THROWS_WITH(middle->restore_activations(7), Catch::Contains("no activations stashed under key 7"));
}
