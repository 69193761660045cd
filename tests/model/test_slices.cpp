// Model slices (the foundation of stage 05's pipeline): a GPT cut into 2 or 3 slices of blocks,
// chained by hand, computes what the whole model computes. Every slice runs the same float
// operations on the same inputs in the same order, so the loss and the gradients are BITWISE
// equal, under every checkpoint policy (each slice applies the policy to its own blocks, and
// checkpointing leaves the arithmetic unchanged). The one exception is the tied wte: the whole
// model accumulates the LM head's gradient and then the embeddings' into one tensor; the slices
// hold them apart (first slice: embeddings, last slice: head) and their sum adds the same terms
// in another order, so it is compared within a rounding tolerance.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "activation_formula.hpp"
#include "batch.hpp"
#include "compare.hpp"
#include "core/error.hpp"
#include "model/gpt.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

constexpr int kB = 3, kT = 16;
constexpr std::uint64_t kSeed = 5;

// The tiny shape with 4 layers, so that 3 slices can have different lengths.
GPTConfig tiny4() {
  GPTConfig c = gpt_config_by_name("tiny");
  c.name = "tiny4";
  c.num_layers = 4;
  return c;
}

const char* kPolicies[] = {"none", "every", "every:2", "every:3", "sqrt", "selective"};

// The whole model's loss and gradients, and its parameters (to check the slices' init).
struct Whole {
  float loss = 0;
  std::vector<float> params, grads;
  std::unique_ptr<ParamLayout> layout;
};

Whole run_whole(const GPTConfig& c, const CheckpointPolicy& policy, const Batch& batch) {
  MemoryTracker tracker;
  GPT model(c, &tracker);
  model.init_weights(kSeed);
  model.set_checkpoint_policy(policy);
  Whole w;
  w.loss = model.forward(batch.tokens.data(), batch.targets.data(), kB, kT);
  model.backward();
  w.params.assign(model.params(), model.params() + model.num_params());
  w.grads.assign(model.grads(), model.grads() + model.num_params());
  w.layout = std::make_unique<ParamLayout>(c);
  return w;
}

// Slices [first, first + n) for each n of `lengths`, chained by hand: forward from the first to
// the last, backward from the last to the first.
struct Chain {
  float loss = 0;
  std::vector<std::unique_ptr<GPT>> slices;
};

Chain run_chain(const GPTConfig& c, const std::vector<int>& lengths, const CheckpointPolicy& policy, const Batch& batch,
                MemoryTracker* tracker) {
  Chain ch;
  int first = 0;
  for (int n : lengths) {
    ch.slices.push_back(std::make_unique<GPT>(c, tracker, ModelSlice::layers(c, first, n)));
    ch.slices.back()->init_weights(kSeed);
    ch.slices.back()->set_checkpoint_policy(policy);
    first += n;
  }
  const float* input = nullptr;
  for (auto& s : ch.slices) {
    ch.loss = s->forward_slice(batch.tokens.data(), input, batch.targets.data(), kB, kT);
    input = s->output();
  }
  const float* doutput = nullptr;
  for (auto it = ch.slices.rbegin(); it != ch.slices.rend(); ++it) {
    (*it)->backward_slice(doutput);
    doutput = (*it)->input_grad();
  }
  return ch;
}

const float* tensor_in(const GPT& m, const std::vector<float>& flat_of_m, const std::string& name) {
  return flat_of_m.data() + m.layout().find(name).offset;
}

}  // namespace

TEST_CASE("slice layouts: the whole model's tensors, names and shapes, each held by exactly one slice") {
  const GPTConfig c = tiny4();
  const ParamLayout whole(c);
  for (const std::vector<int>& lengths : {std::vector<int>{2, 2}, std::vector<int>{1, 2, 1}, std::vector<int>{4}}) {
    INFO(lengths.size() << " slices");
    std::vector<std::string> names;  // in slice order, the head's wte copy left out
    int first = 0, wte_copies = 0;
    for (int n : lengths) {
      const ModelSlice s = ModelSlice::layers(c, first, n);
      const ParamLayout layout(c, s);
      std::size_t offset = 0;
      for (const auto& t : layout.tensors()) {
        INFO("slice " << s.describe(c) << ", tensor " << t.name);
        const ParamTensor& w = whole.find(t.name);  // throws if the name is not the whole model's
        CHECK(t.shape == w.shape);
        CHECK(t.layer == w.layer);
        CHECK(t.offset == offset);  // packed in the slice's own buffer, in order
        offset += t.numel;
        if (t.name == "transformer.wte.weight" && !s.embeddings) {
          ++wte_copies;
          CHECK(s.head);
          continue;
        }
        names.push_back(t.name);
      }
      CHECK(layout.num_params() == offset);
      first += n;
    }
    std::vector<std::string> whole_names;
    for (const auto& t : whole.tensors()) whole_names.push_back(t.name);
    CHECK(names == whole_names);  // nanoGPT order across the slices, every tensor once
    CHECK(wte_copies == (lengths.size() > 1 ? 1 : 0));
  }
  // Layer numbers stay global.
  const ParamLayout last(c, ModelSlice::layers(c, 3, 1));
  CHECK(last.tensors()[1].name == "transformer.h.3.ln_1.weight");
  CHECK(last.tensors().back().name == "transformer.ln_f.bias");
}

TEST_CASE("slices: bad ranges and misplaced embeddings or head are refused, naming the slice") {
  const GPTConfig c = tiny4();
  MemoryTracker tracker;
  CHECK_THROWS_WITH(GPT(c, &tracker, ModelSlice{3, 2, false, true}),
                    Catch::Contains("slice: layers [3, 5) are not inside [0, 4)"));
  CHECK_THROWS_WITH(GPT(c, &tracker, ModelSlice{1, 2, true, false}),
                    Catch::Contains("slice: holds the embeddings but starts at layer 1"));
  CHECK_THROWS_WITH(GPT(c, &tracker, ModelSlice{0, 2, true, true}),
                    Catch::Contains("slice: holds the head but ends at layer 2 of 4"));
  CHECK_THROWS_WITH(GPT(c, &tracker, ModelSlice{0, 0, true, false}), Catch::Contains("are not inside"));
}

TEST_CASE("slices start from the whole model's initial weights, tensor by tensor") {
  const GPTConfig c = tiny4();
  const Batch batch = random_batch(c.vocab_size, kB, kT, 11);
  const Whole whole = run_whole(c, CheckpointPolicy{}, batch);
  MemoryTracker tracker;
  for (auto [first, n] : {std::pair{0, 1}, std::pair{1, 2}, std::pair{3, 1}}) {
    GPT slice(c, &tracker, ModelSlice::layers(c, first, n));
    slice.init_weights(kSeed);
    const std::vector<float> p(slice.params(), slice.params() + slice.num_params());
    for (const auto& t : slice.layout().tensors()) {
      const ParamTensor& w = whole.layout->find(t.name);
      CHECK_MATCH(compare_bitwise("initial " + t.name + " of slice " + slice.slice().describe(c), p.data() + t.offset,
                                  whole.params.data() + w.offset, t.numel));
    }
  }
}

TEST_CASE("2 and 3 slices chained by hand: loss and gradients bitwise equal to the whole model") {
  const GPTConfig c = tiny4();
  const Batch batch = random_batch(c.vocab_size, kB, kT, 11);
  for (const char* policy_text : kPolicies) {
    const CheckpointPolicy policy = CheckpointPolicy::parse(policy_text);
    const Whole whole = run_whole(c, policy, batch);
    for (const std::vector<int>& lengths :
         {std::vector<int>{2, 2}, std::vector<int>{1, 2, 1}, std::vector<int>{3, 1}}) {
      INFO("policy " << policy_text << ", " << lengths.size() << " slices, the first of " << lengths[0] << " blocks");
      MemoryTracker tracker;
      const Chain ch = run_chain(c, lengths, policy, batch, &tracker);
      CHECK(ch.loss == whole.loss);
      const GPT& first = *ch.slices.front();
      const GPT& last = *ch.slices.back();
      for (const auto& s : ch.slices) {
        const std::vector<float> g(s->grads(), s->grads() + s->num_params());
        for (const auto& t : s->layout().tensors()) {
          if (t.name == "transformer.wte.weight") continue;  // the tied weight: below
          CHECK_MATCH(compare_bitwise(t.name + " gradient of slice " + s->slice().describe(c), g.data() + t.offset,
                                      whole.grads.data() + whole.layout->find(t.name).offset, t.numel));
        }
      }
      // wte: the whole model's gradient is (head part + the embeddings' part, token by token);
      // the sum of the two copies adds the same terms in another order. Each element is a sum of
      // at most B*T + 1 float terms of size ~1e-3, so 1e-6 absolute is ~100 float roundings.
      const std::vector<float> g_first(first.grads(), first.grads() + first.num_params());
      const std::vector<float> g_last(last.grads(), last.grads() + last.num_params());
      const std::size_t n = static_cast<std::size_t>(c.vocab_size) * c.channels;
      const float* a = tensor_in(first, g_first, "transformer.wte.weight");
      const float* b = tensor_in(last, g_last, "transformer.wte.weight");
      std::vector<float> sum(n);
      for (std::size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
      CHECK_MATCH(compare_close("wte gradient, first + last slice", sum.data(),
                                whole.grads.data() + whole.layout->find("transformer.wte.weight").offset, n, 1e-5,
                                1e-6));
    }
  }
}

TEST_CASE("a middle slice: input gradient and block counts as the policy says") {
  const GPTConfig c = tiny4();
  const Batch batch = random_batch(c.vocab_size, kB, kT, 11);
  MemoryTracker tracker;
  const Chain ch = run_chain(c, {1, 2, 1}, CheckpointPolicy::parse("every:1"), batch, &tracker);
  // Each slice recomputes all its segments but its last: 0, 1 and 0 extra block forwards.
  CHECK(ch.slices[0]->block_forward_count() == 1);
  CHECK(ch.slices[1]->block_forward_count() == 3);
  CHECK(ch.slices[2]->block_forward_count() == 1);
  CHECK_THROWS_WITH(ch.slices[1]->backward(1.0f), Catch::Contains("which has no head: use backward_slice"));
}

TEST_CASE("slice activation bytes: the slice's blocks, its input, and the head's part only with the head") {
  const GPTConfig c = tiny4();
  const Shape shape{64, 32, 2, 4};  // V, C, L = the slice's 2 blocks, NH
  const std::size_t B = kB, T = kT, BTC = B * T * 32;
  const std::size_t block = block_elements(shape, B, T);
  const Batch batch = random_batch(c.vocab_size, kB, kT, 11);
  const std::vector<float> input(BTC, 0.5f);
  struct Expect {
    ModelSlice slice;
    const char* policy;
    std::size_t bytes;
  };
  const Expect cases[] = {
      // The first slice: encoded (BTC) and its blocks; no head.
      {ModelSlice::layers(c, 0, 2), "none", 4 * (BTC + 2 * block)},
      // A middle slice under every:1: its input, one more boundary, the output, one slot.
      {ModelSlice::layers(c, 1, 2), "every", 4 * (BTC + BTC + BTC + block)},
      // The last slice: the whole model's formula with the slice's 2 blocks.
      {ModelSlice::layers(c, 2, 2), "none", act_bytes_none(shape, B, T)},
      {ModelSlice::layers(c, 2, 2), "selective", act_bytes_selective(shape, B, T)},
  };
  for (const Expect& e : cases) {
    INFO("slice " << e.slice.describe(c) << ", policy " << e.policy);
    MemoryTracker tracker;
    GPT m(c, &tracker, e.slice);
    m.init_weights(kSeed);
    m.set_checkpoint_policy(CheckpointPolicy::parse(e.policy));
    m.forward_slice(batch.tokens.data(), input.data(), batch.targets.data(), kB, kT);
    CHECK(tracker.peak(MemCategory::kActivations) == e.bytes);
  }
}
