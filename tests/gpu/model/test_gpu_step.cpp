// The GPU GPT (kernels/model) against the CPU models from the same weights and batch.
//
// Tolerances, and why they are not bitwise:
//   fp32 loss          relative 1e-5   cuBLAS and the block reductions sum in other orders
//   fp32 gradients     relative 1e-4   by norm, per tensor (wte also gets atomicAdds in any order)
//   bf16 vs the CPU's mixed model: loss 1e-2, gradients 3e-2 by norm per tensor (every layer
//   output is rounded to bf16 on both, but after sums in different orders, so about one bf16
//   ulp (2^-8) per rounding; the GPU also keeps LayerNorm statistics in fp32 where the CPU
//   rounds them to bf16).
//   Parameters after 3 AdamW steps: relative to how far the steps moved them (|p - p0|), by norm
//   per tensor. Adam divides by sqrt(v) + eps, so an element whose gradient is rounding noise
//   (the key bias of c_attn has an exactly zero gradient in exact arithmetic: softmax ignores a
//   shift common to a row) moves by up to lr on either side; those elements (|g| below 1e-5 of
//   the tensor's largest at some step) are checked against that bound instead.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "compare.hpp"
#include "core/rng.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/model/gpu_train_model.hpp"
#include "model/gpt.hpp"
#include "precision/mixed_model.hpp"
#include "train/fp32_model.hpp"
#include "train/trainer.hpp"

namespace {

using namespace scalelab;
using scalelab::cuda::GpuTrainModel;

constexpr int kB = 4, kT = 16, kSteps = 3;
constexpr double kLr = 1e-3, kClip = 1.0;

struct Batch {
  std::vector<int> tokens, targets;
};

Batch random_batch(int V, std::uint64_t seed) {
  Rng rng(seed);
  Batch b;
  for (int i = 0; i < kB * kT; ++i) {
    b.tokens.push_back(static_cast<int>(rng.below(V)));
    b.targets.push_back(static_cast<int>(rng.below(V)));
  }
  return b;
}

double relative(double a, double b) { return std::fabs(a - b) / std::max(std::fabs(b), 1e-30); }

// ||a - b|| / ||b|| over one tensor; when ||b|| is 0, a must be exactly 0 too.
double tensor_error(const float* a, const float* b, std::size_t n) {
  return scalelab_test::relative_norm_error(a, b, n);
}

void check_by_tensor(const ParamLayout& layout, const float* gpu, const float* cpu, double tol, const char* what) {
  for (const ParamTensor& t : layout.tensors()) {
    const double err = tensor_error(gpu + t.offset, cpu + t.offset, t.numel);
    INFO(what << " of " << t.name << ": relative error " << err << " (tolerance " << tol << ")");
    CHECK(err <= tol);
  }
}

// Marks elements whose gradient was rounding noise at some step (see the header).
void mark_noise(const ParamLayout& layout, const float* g, std::vector<char>& noise) {
  for (const ParamTensor& t : layout.tensors()) {
    float gmax = 0;
    for (std::size_t i = 0; i < t.numel; ++i) gmax = std::max(gmax, std::fabs(g[t.offset + i]));
    for (std::size_t i = 0; i < t.numel; ++i)
      if (std::fabs(g[t.offset + i]) <= 1e-5f * gmax) noise[t.offset + i] = 1;
  }
}

void check_params(const ParamLayout& layout, const float* gpu, const float* cpu, const std::vector<float>& start,
                  const std::vector<char>& noise, double tol) {
  for (const ParamTensor& t : layout.tensors()) {
    double d = 0, moved = 0, worst_noise = 0;
    std::size_t noisy = 0;
    for (std::size_t j = 0; j < t.numel; ++j) {
      const std::size_t i = t.offset + j;
      const double diff = static_cast<double>(gpu[i]) - cpu[i];
      if (noise[i]) {
        ++noisy;
        worst_noise = std::max(worst_noise, std::fabs(diff));
        continue;
      }
      d += diff * diff;
      moved += (static_cast<double>(cpu[i]) - start[i]) * (static_cast<double>(cpu[i]) - start[i]);
    }
    const double err = moved > 0 ? std::sqrt(d / moved) : std::sqrt(d);
    INFO("parameters " << t.name << " after " << kSteps << " steps: error relative to the update " << err
                       << " (tolerance " << tol << "); " << noisy << " elements with noise gradients differ by at most "
                       << worst_noise << " (bound " << 2 * kSteps * kLr << ")");
    CHECK(err <= tol);
    CHECK(worst_noise <= 2 * kSteps * kLr);
  }
}

struct Tolerances {
  double loss, grads, params;
};

// One full comparison: loss and gradients of the first step, then parameters after kSteps
// AdamW steps (with clipping), each step on a new batch. Returns nothing; CHECKs inside.
template <typename F>
void compare_with_cpu(TrainModel& cpu, const std::function<std::vector<float>()>& cpu_grads, GpuTrainModel<F>& gpu,
                      const Tolerances& tol) {
  const GPTConfig& c = cpu.config();
  const std::size_t n = cpu.num_params();
  const AdamWConfig adamw{.lr = kLr, .weight_decay = 0.1};
  AdamW cpu_opt(n, adamw, nullptr), gpu_opt(n, adamw, nullptr);
  cpu.init_weights(7);
  // GPT-2's initialisation starts every bias at 0 and every LayerNorm weight at 1, so a layer
  // handed another layer's bias or weight would compute the same first step (and, a few AdamW
  // steps on, nearly the same). Each parameter first moves by up to 0.01 at random, so that no
  // two tensors start equal.
  std::vector<float> start(cpu.master_params(), cpu.master_params() + n);
  Rng jitter(8);
  for (float& w : start) w += static_cast<float>(0.02 * (jitter.uniform() - 0.5));
  cpu.set_master_params(start.data());
  std::copy(cpu.master_params(), cpu.master_params() + n, start.begin());  // as the model keeps them
  gpu.set_master_params(start.data());
  std::vector<char> noise(n, 0);
  for (int step = 0; step < kSteps; ++step) {
    const Batch b = random_batch(c.vocab_size, 100 + step);
    cpu.zero_grad();
    gpu.zero_grad();
    const double cpu_loss = cpu.forward(b.tokens.data(), b.targets.data(), kB, kT);
    const double gpu_loss = gpu.forward(b.tokens.data(), b.targets.data(), kB, kT);
    cpu.backward(1.0);
    gpu.backward(1.0);
    const std::vector<float> gc = cpu_grads(), gg = gpu.grads_to_host();
    mark_noise(cpu.layout(), gc.data(), noise);
    if (step == 0) {
      INFO("loss: GPU " << gpu_loss << ", CPU " << cpu_loss << ", relative error " << relative(gpu_loss, cpu_loss)
                        << " (tolerance " << tol.loss << ")");
      CHECK(relative(gpu_loss, cpu_loss) <= tol.loss);
      check_by_tensor(cpu.layout(), gg.data(), gc.data(), tol.grads, "gradient");
    }
    const auto co = cpu.optimizer_step(cpu_opt, kLr, 1.0, kClip);
    const auto go = gpu.optimizer_step(gpu_opt, kLr, 1.0, kClip);
    REQUIRE_FALSE(co.skipped);
    REQUIRE_FALSE(go.skipped);
    INFO("step " << step << " gradient norm: GPU " << go.grad_norm << ", CPU " << co.grad_norm);
    CHECK(relative(go.grad_norm, co.grad_norm) <= tol.grads);
  }
  const std::vector<float> pc(cpu.master_params(), cpu.master_params() + n);
  check_params(cpu.layout(), gpu.master_params(), pc.data(), start, noise, tol.params);
}

}  // namespace

TEST_CASE("GPU fp32 GPT: loss, gradients and AdamW steps equal the CPU's", "[gpu][model]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  Fp32TrainModel cpu(c, nullptr);
  GpuTrainModel<float> gpu(c, nullptr);
  compare_with_cpu(cpu, [&cpu] { return std::vector<float>(cpu.gpt().grads(), cpu.gpt().grads() + cpu.num_params()); },
                   gpu, {.loss = 1e-5, .grads = 1e-4, .params = 1e-3});
}

TEST_CASE("GPU bf16 GPT: within bf16 rounding of the CPU's mixed-precision model", "[gpu][model][bf16]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  MixedPrecisionModel cpu(c, HalfFormat::kBF16, nullptr);
  GpuTrainModel<cuda::bf16> gpu(c, nullptr);
  compare_with_cpu(cpu, [&cpu] { return cpu.grads_as_float(); }, gpu, {.loss = 1e-2, .grads = 3e-2, .params = 0.2});
}

TEST_CASE("GPU memory by category equals the CPU model's", "[gpu][model][memory]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  const Batch b = random_batch(c.vocab_size, 1);
  const std::size_t BT = static_cast<std::size_t>(kB) * kT;
  for (const char* precision : {"fp32", "bf16"}) {
    for (const char* policy : {"none", "every:1", "sqrt", "selective"}) {
      MemoryTracker cm, gm;
      std::unique_ptr<TrainModel> cpu = make_train_model(c, precision, &cm);
      std::unique_ptr<TrainModel> gpu = cuda::make_gpu_train_model(c, precision, &gm);
      AdamW cpu_opt(cpu->num_params(), AdamWConfig{}, &cm);  // the GPU model holds its own m and v
      const CheckpointPolicy p = CheckpointPolicy::parse(policy);
      for (TrainModel* m : {cpu.get(), gpu.get()}) {
        m->set_checkpoint_policy(p);
        m->init_weights(3);
        m->forward(b.tokens.data(), b.targets.data(), kB, kT);
        m->backward(1.0);
      }
      INFO(precision << ", checkpoint " << policy << "\nCPU:\n" << cm.report() << "GPU:\n" << gm.report());
      for (MemCategory k : {MemCategory::kParams, MemCategory::kGrads, MemCategory::kOptimizer})
        CHECK(gm.peak(k) == cm.peak(k));
      // Activations: the CPU's bytes plus two terms. The LayerNorm statistics and the per-row
      // losses, which the GPU keeps in fp32 (bf16: 2 bytes more per element than the CPU's), and
      // the LM head's padding: the logits' rows are Vp apart (tiny: V = 64, Vp = 128), B T (Vp - V)
      // more elements of the storage type (kernels/model/gpu_gpt.hpp).
      const std::size_t stats = cuda::gpu_stat_elements(c, kB, kT, p);
      const std::size_t width = std::string(precision) == "fp32" ? 4 : 2;
      const std::size_t padding = cuda::gpu_logits_padding_elements(c, kB, kT);
      const std::size_t extra = (std::string(precision) == "fp32" ? 0 : 2 * stats) + padding * width;
      CHECK(gm.peak(MemCategory::kActivations) == cm.peak(MemCategory::kActivations) + extra);
      CHECK(gm.peak(MemCategory::kActivations) == activation_elements(c, kB, kT, p) * width + extra);
      CHECK(padding == BT * static_cast<std::size_t>(cuda::gpu_padded_vocab(c.vocab_size) - c.vocab_size));
      CHECK(stats == (static_cast<std::size_t>(p.kind == CheckpointPolicy::Kind::kNone ||
                                                       p.kind == CheckpointPolicy::Kind::kSelective
                                                   ? c.num_layers
                                                   : p.segment_blocks(c.num_layers)) *
                          4 +
                      3) *
                         BT);
    }
  }
}

TEST_CASE("GPU LM head: the logits' rows are padded, and the padding changes neither loss nor gradients",
          "[gpu][model][vocab]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  const Batch b = random_batch(c.vocab_size, 13);
  GpuTrainModel<float> m(c, nullptr);
  const int V = c.vocab_size, Vp = m.gpt().padded_vocab(), N = kB * kT;
  CHECK(Vp % cuda::kVocabAlign == 0);
  CHECK(Vp >= V);
  CHECK(Vp - V < cuda::kVocabAlign);
  REQUIRE(Vp > V);  // tiny's V = 64: the padding is not empty, so the rest of this test means something
  CHECK(cuda::gpu_padded_vocab(gpt_config_by_name("gpt2").vocab_size) == 50304);
  m.init_weights(17);
  m.zero_grad();
  const double clean_loss = m.forward(b.tokens.data(), b.targets.data(), kB, kT);
  m.backward(1.0);
  const std::vector<float> clean = m.grads_to_host();
  // The same batch again (the buffers are kept: same B, T and policy) with NaN in every padding
  // element of the logits' buffer: forward writes only the first V columns of a row, so the NaN
  // stays there through forward and backward, and any read of it would reach the loss or wte's
  // gradient.
  float* const probs = m.gpt().acts().probs;
  SCALELAB_CUDA_CHECK(cudaMemset2D(probs + V, Vp * sizeof(float), 0xFF, (Vp - V) * sizeof(float), N));
  m.zero_grad();
  const double loss = m.forward(b.tokens.data(), b.targets.data(), kB, kT);
  REQUIRE(m.gpt().acts().probs == probs);
  std::vector<float> padding(static_cast<std::size_t>(N) * (Vp - V));
  SCALELAB_CUDA_CHECK(cudaMemcpy2D(padding.data(), (Vp - V) * sizeof(float), probs + V, Vp * sizeof(float),
                                   (Vp - V) * sizeof(float), N, cudaMemcpyDeviceToHost));
  CHECK(std::all_of(padding.begin(), padding.end(), [](float x) { return std::isnan(x); }));  // not written
  CHECK(loss == clean_loss);  // no atomics in forward: the same kernels give the same bits
  m.backward(1.0);
  // Only wte's atomicAdds may land in another order (as in the checkpoint test below).
  check_by_tensor(ParamLayout(c), m.grads_to_host().data(), clean.data(), 1e-6, "gradient with NaN padding");
}

TEST_CASE("GPU checkpoint policies give the gradients of no checkpointing", "[gpu][model][checkpoint]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  const Batch b = random_batch(c.vocab_size, 5);
  auto grads_with = [&](const char* policy, std::size_t* forwards) {
    GpuTrainModel<float> m(c, nullptr);
    m.set_checkpoint_policy(CheckpointPolicy::parse(policy));
    m.init_weights(11);
    m.forward(b.tokens.data(), b.targets.data(), kB, kT);
    m.backward(1.0);
    *forwards = m.block_forward_count();
    return m.grads_to_host();
  };
  std::size_t base_forwards = 0;
  const std::vector<float> base = grads_with("none", &base_forwards);
  CHECK(base_forwards == static_cast<std::size_t>(c.num_layers));
  const ParamLayout layout(c);
  for (const char* policy : {"every:1", "sqrt", "selective"}) {
    std::size_t forwards = 0;
    const std::vector<float> g = grads_with(policy, &forwards);
    INFO("checkpoint " << policy << ": " << forwards << " block forwards");
    // The same kernels on the same inputs; only wte's atomicAdds may land in another order.
    check_by_tensor(layout, g.data(), base.data(), 1e-6, "gradient");
    const CheckpointPolicy p = CheckpointPolicy::parse(policy);
    if (p.kind != CheckpointPolicy::Kind::kSelective) {
      const int k = p.segment_blocks(c.num_layers), last = c.num_layers - (c.num_layers - 1) / k * k;
      CHECK(forwards == static_cast<std::size_t>(2 * c.num_layers - last));
    }
  }
}

TEST_CASE("GPU fp16: an overflowing loss scale skips the step and changes nothing", "[gpu][model][fp16]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  const Batch b = random_batch(c.vocab_size, 9);
  GpuTrainModel<cuda::fp16> m(c, nullptr);
  m.init_weights(5);
  const std::vector<float> before(m.master_params(), m.master_params() + m.num_params());
  AdamW opt(m.num_params(), AdamWConfig{}, nullptr);
  m.forward(b.tokens.data(), b.targets.data(), kB, kT);
  m.backward(1e30);  // far beyond fp16's 65504: the gradients overflow to inf
  const auto out = m.optimizer_step(opt, 1e-3, 1e-30, 0.0);
  CHECK(out.skipped);
  CHECK(opt.step_count() == 0);
  const std::vector<float> after(m.master_params(), m.master_params() + m.num_params());
  CHECK(after == before);
}

TEST_CASE("GPU bf16: a NaN gradient skips the step and changes nothing", "[gpu][model][bf16]") {
  // bf16 has fp32's range, so an overflowing loss scale as above is no sure way to an inf: a NaN
  // loss scale puts NaN in every gradient instead. The step has no inf/NaN scan of its own; the
  // norm's sum of squares (in double) turning NaN is what skips it.
  const GPTConfig c = gpt_config_by_name("tiny");
  const Batch b = random_batch(c.vocab_size, 10);
  GpuTrainModel<cuda::bf16> m(c, nullptr);
  m.init_weights(6);
  const std::vector<float> before(m.master_params(), m.master_params() + m.num_params());
  AdamW opt(m.num_params(), AdamWConfig{}, nullptr);
  m.forward(b.tokens.data(), b.targets.data(), kB, kT);
  m.backward(std::nan(""));
  const auto out = m.optimizer_step(opt, 1e-3, 1.0, 1.0);
  CHECK(out.skipped);
  CHECK(!std::isfinite(out.grad_norm));
  CHECK(opt.step_count() == 0);
  const std::vector<float> after(m.master_params(), m.master_params() + m.num_params());
  CHECK(after == before);
}

TEST_CASE("Trainer with --device cuda follows the CPU run (accumulation, checkpointing)", "[gpu][model][trainer]") {
  const std::string text_path = "test_gpu_model_corpus.txt";
  TrainOptions o;
  o.config = "tiny";
  o.steps = 3;
  o.batch = 4;
  o.data = text_path;
  o.adamw.lr = 1e-3;
  o.adamw.grad_clip = 1.0;
  o.grad_accum = 2;  // stage 01: backward accumulates (+=) over the micro-batches on the GPU too
  o.checkpoint = CheckpointPolicy::parse("sqrt");  // stage 02
  {  // a text file's bytes are its tokens, and tiny has V = 64: bytes 32..63 only
    std::ofstream f(text_path);
    Rng rng(3);
    for (int i = 0; i < 20000; ++i) f << static_cast<char>(' ' + rng.below(32));
  }
  for (const char* attention : {"naive", "flash"}) {  // stage 08: the same with flash attention
    o.attention = attention;
    o.device = "cpu";
    MemoryTracker cm, gm;
    Trainer cpu(o, &cm);
    o.device = "cuda";
    Trainer gpu(o, &gm, [](const GPTConfig& c, const std::string& p, MemoryTracker* t) {
      return cuda::make_gpu_train_model(c, p, t);
    });
    for (int i = 0; i < o.steps; ++i) {
      const StepStats a = cpu.step(), g = gpu.step();
      INFO("attention " << attention << ", step " << i << ": loss CPU " << a.loss << ", GPU " << g.loss);
      CHECK(relative(g.loss, a.loss) <= 1e-4);
    }
    // The checkpoint reads the device's m and v through the mirror (both compared: with v alone,
    // a mirror that skipped m passed).
    const TrainCheckpoint cc = cpu.checkpoint(), gc = gpu.checkpoint();
    CHECK(tensor_error(gc.adam_m.data(), cc.adam_m.data(), cc.adam_m.size()) <= 1e-3);
    CHECK(tensor_error(gc.adam_v.data(), cc.adam_v.data(), cc.adam_v.size()) <= 1e-3);
    CHECK(gm.peak(MemCategory::kOptimizer) == cm.peak(MemCategory::kOptimizer));
    // And back: a GPU trainer resumed from that checkpoint (parameters, m and v uploaded) takes
    // the next step as the one that wrote it does (up to the embedding gradient's atomics).
    MemoryTracker rm;
    Trainer resumed(o, &rm, [](const GPTConfig& c, const std::string& p, MemoryTracker* t) {
      return cuda::make_gpu_train_model(c, p, t);
    });
    resumed.restore(gc);
    const StepStats next = gpu.step(), again = resumed.step();
    INFO("attention " << attention << ", the step after the checkpoint: loss " << next.loss << ", resumed "
                      << again.loss);
    CHECK(relative(again.loss, next.loss) <= 1e-6);
    const TrainCheckpoint after = gpu.checkpoint(), after_resumed = resumed.checkpoint();
    CHECK(tensor_error(after_resumed.adam_m.data(), after.adam_m.data(), after.adam_m.size()) <= 1e-5);
    CHECK(tensor_error(after_resumed.params.data(), after.params.data(), after.params.size()) <= 1e-5);
  }
  std::remove(text_path.c_str());
}

// Stage 08 on the GPU: flash attention in the model (kernels/layers/attention_flash.hpp).
TEST_CASE("GPU fp32 GPT with flash attention equals the CPU's flash model", "[gpu][model][flash]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  Fp32TrainModel cpu(c, nullptr);
  GpuTrainModel<float> gpu(c, nullptr);
  cpu.set_attention(AttentionKind::kFlash);
  gpu.set_attention(AttentionKind::kFlash);
  compare_with_cpu(cpu, [&cpu] { return std::vector<float>(cpu.gpt().grads(), cpu.gpt().grads() + cpu.num_params()); },
                   gpu, {.loss = 1e-5, .grads = 1e-4, .params = 1e-3});
}

TEST_CASE("GPU bf16 GPT with flash attention: within bf16 rounding of the CPU's mixed model", "[gpu][model][flash]") {
  // The CPU's mixed model runs the naive attention: the two differ by the order of the softmax's
  // sums and by P and dS rounded to bf16 before their products, well inside the bf16 tolerances.
  const GPTConfig c = gpt_config_by_name("tiny");
  MixedPrecisionModel cpu(c, HalfFormat::kBF16, nullptr);
  GpuTrainModel<cuda::bf16> gpu(c, nullptr);
  gpu.set_attention(AttentionKind::kFlash);
  compare_with_cpu(cpu, [&cpu] { return cpu.grads_as_float(); }, gpu, {.loss = 1e-2, .grads = 3e-2, .params = 0.2});
}

TEST_CASE("GPU bf16 GPT with flash attention at head size 16: the register-resident kernels in the model",
          "[gpu][model][flash]") {
  // tiny's head size is 8, which the register-resident kernels (attention_flash_mma.hpp) do not
  // take; with 2 heads of 16 the model's aligned buffers send every attention call to them.
  const GPTConfig c = gpt_config_of_shape(64, 16, 32, 2, 2, "tiny, 2 heads of 16");
  MixedPrecisionModel cpu(c, HalfFormat::kBF16, nullptr);
  GpuTrainModel<cuda::bf16> gpu(c, nullptr);
  gpu.set_attention(AttentionKind::kFlash);
  compare_with_cpu(cpu, [&cpu] { return cpu.grads_as_float(); }, gpu, {.loss = 1e-2, .grads = 3e-2, .params = 0.2});
}

TEST_CASE("GPU flash attention: activation bytes equal the formula, the (T,T) probabilities gone",
          "[gpu][model][flash][memory]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  const Batch b = random_batch(c.vocab_size, 2);
  const std::size_t BT = static_cast<std::size_t>(kB) * kT;
  for (const char* precision : {"fp32", "bf16"}) {
    for (const char* policy : {"none", "sqrt"}) {
      const CheckpointPolicy p = CheckpointPolicy::parse(policy);
      std::size_t peak[2] = {0, 0};
      for (AttentionKind kind : {AttentionKind::kNaive, AttentionKind::kFlash}) {
        MemoryTracker gm;
        std::unique_ptr<TrainModel> gpu = cuda::make_gpu_train_model(c, precision, &gm);
        gpu->set_checkpoint_policy(p);
        gpu->set_attention(kind);
        gpu->init_weights(3);
        gpu->forward(b.tokens.data(), b.targets.data(), kB, kT);
        gpu->backward(1.0);
        const std::size_t width = std::string(precision) == "fp32" ? 4 : 2;
        const std::size_t stats = cuda::gpu_stat_elements(c, kB, kT, p, kind);
        const std::size_t padding = cuda::gpu_logits_padding_elements(c, kB, kT);  // the LM head's logits rows
        const std::size_t want = (activation_elements(c, kB, kT, p, ModelSlice{}, kind) - stats + padding) * width +
                                 stats * 4;
        INFO(precision << ", checkpoint " << policy << ", attention " << attention_kind_name(kind) << "\n"
                       << gm.report());
        CHECK(gm.peak(MemCategory::kActivations) == want);
        peak[kind == AttentionKind::kFlash] = gm.peak(MemCategory::kActivations);
      }
      // Per block slot: NH B T T probabilities of F out, NH B T log-sum-exps of fp32 in.
      const std::size_t slots = activation_slots(p, c.num_layers), width = std::string(precision) == "fp32" ? 4 : 2;
      const std::size_t per_slot = static_cast<std::size_t>(c.num_heads) * BT;
      INFO(precision << ", checkpoint " << policy << ": naive " << peak[0] << " bytes, flash " << peak[1]);
      CHECK(peak[0] - peak[1] == slots * (per_slot * kT * width - per_slot * 4));
    }
  }
}

TEST_CASE("GPU attention choices that have no kernel are refused by name", "[gpu][model][flash]") {
  const GPTConfig c = gpt_config_by_name("tiny");
  GpuTrainModel<float> gpu(c, nullptr);
  CHECK_THROWS_WITH(gpu.set_attention(AttentionKind::kChunked),
                    Catch::Contains("--attention chunked") && Catch::Contains("--attention flash"));
  gpu.set_attention(AttentionKind::kFlash);
  CHECK_THROWS_WITH(gpu.set_checkpoint_policy(CheckpointPolicy::parse("selective")),
                    Catch::Contains("--checkpoint") && Catch::Contains("--attention"));
}
