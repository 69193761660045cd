// The layer kernels at the GPT-2 shape, forward and backward (see kernel_bench.hpp for what the
// byte and flop counts mean). Each layer's buffers live only in its own block, so the largest
// (cross-entropy's N x V logits) never coexist with the others.
#include <set>
#include <string>

#include "core/rng.hpp"
#include "kernels/bench/kernel_bench.hpp"
#include "kernels/core/blas.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/dtype.hpp"
#include "kernels/layers/attention.hpp"
#include "kernels/layers/attention_flash.hpp"
#include "kernels/layers/crossentropy.hpp"
#include "kernels/layers/encoder.hpp"
#include "kernels/layers/gelu.hpp"
#include "kernels/layers/layernorm.hpp"
#include "kernels/layers/matmul.hpp"
#include "kernels/layers/residual.hpp"
#include "kernels/model/gpu_gpt.hpp"

namespace scalelab::cuda {

namespace {

template <typename T>
DeviceBuffer<T> random_buffer(std::size_t n, std::uint64_t seed, float lo = 0.05f, float hi = 1.05f) {
  DeviceBuffer<T> d(n, MemCategory::kWorkspace, nullptr);
  fill_random(d, seed, lo, hi);
  return d;
}

template <typename T>
DeviceBuffer<T> empty_buffer(std::size_t n) {
  return DeviceBuffer<T>(n, MemCategory::kWorkspace, nullptr);
}

// Random tokens in [0, V) on the device, and how many distinct ones there are (the rows of wte
// that the encoder reads and its backward updates).
DeviceBuffer<int> random_tokens(std::size_t n, int V, std::uint64_t seed, std::size_t* distinct) {
  Rng rng(seed);
  std::vector<int> tokens(n);
  for (int& t : tokens) t = static_cast<int>(rng.below(static_cast<std::uint64_t>(V)));
  *distinct = std::set<int>(tokens.begin(), tokens.end()).size();
  return to_device(tokens, MemCategory::kWorkspace, nullptr);
}

}  // namespace

template <typename F>
std::vector<KernelRow> bench_layers(const BenchShape& shape, const BenchOptions& options, const Ceilings& ceilings) {
  const int B = shape.B, T = shape.T, C = shape.C, NH = shape.NH, V = shape.V;
  const int N = B * T;  // rows
  const double s = sizeof(F);
  const std::size_t NC = static_cast<std::size_t>(N) * C;
  const Stream stream;
  const cudaStream_t st = stream.get();
  const Blas blas(st, nullptr, /*allow_tf32=*/false);
  RowRecorder r(options, ceilings, st, DType<F>::name);

  {  // encoder: out = wte[tokens] + wpe
    std::size_t U = 0;
    DeviceBuffer<int> tokens = random_tokens(N, V, 11, &U);
    auto wte = random_buffer<F>(static_cast<std::size_t>(V) * C, 12), wpe = random_buffer<F>(std::size_t(T) * C, 13);
    auto out = empty_buffer<F>(NC), dout = random_buffer<F>(NC, 14);
    auto dwte = random_buffer<F>(wte.size(), 15), dwpe = random_buffer<F>(wpe.size(), 16);
    r.memory("encoder", "forward", 4.0 * N + (double(U) + T + N) * C * s,
             [&] { encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, st); });
    r.memory("encoder", "backward", 4.0 * N + NC * s + 2.0 * (double(T) + U) * C * s,
             [&] { encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C, st); });
  }
  {  // layernorm over (N, C)
    auto inp = random_buffer<F>(NC, 21, 0.05f, 3.0f), w = random_buffer<F>(C, 22), b = random_buffer<F>(C, 23);
    auto out = empty_buffer<F>(NC), dout = random_buffer<F>(NC, 24), dinp = random_buffer<F>(NC, 25);
    auto dw = random_buffer<F>(C, 26), db = random_buffer<F>(C, 27);
    auto mean = empty_buffer<float>(N), rstd = empty_buffer<float>(N);
    auto ln_scratch = empty_buffer<float>(layernorm_backward_scratch_elements(C));
    r.memory("layernorm", "forward", 2.0 * NC * s + 2.0 * C * s + 8.0 * N, [&] {
      layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C, st);
    });
    const double backward_bytes = 4.0 * NC * s + 5.0 * C * s + 8.0 * N;
    r.memory("layernorm", "backward", backward_bytes, [&] {
      layernorm_backward(dinp.data(), dw.data(), db.data(), ln_scratch.data(), dout.data(), inp.data(), w.data(),
                         mean.data(), rstd.data(), N, C, st);
    });
    // The row kernel for any C beside the one the launcher picks (the same where C is too wide).
    r.memory("layernorm (streamed)", "backward", backward_bytes, [&] {
      layernorm_backward(dinp.data(), dw.data(), db.data(), ln_scratch.data(), dout.data(), inp.data(), w.data(),
                         mean.data(), rstd.data(), N, C, st, LayerNormBackwardKernel::kStreamed);
    });
  }
  // The five linear layers of GPT-2 (per block: qkv, attention projection, fc, fc projection;
  // then the tied LM head, without a bias). The output's rows are ld >= oc elements apart.
  auto bench_matmul = [&](const std::string& name, int in, int oc, int ld, bool with_bias, std::uint64_t seed) {
    const std::size_t n_in = static_cast<std::size_t>(N) * in, n_out = static_cast<std::size_t>(N) * ld;
    auto inp = random_buffer<F>(n_in, seed), w = random_buffer<F>(static_cast<std::size_t>(oc) * in, seed + 1);
    auto bias = random_buffer<F>(oc, seed + 2), out = empty_buffer<F>(n_out), dout = random_buffer<F>(n_out, seed + 3);
    auto dinp = empty_buffer<F>(n_in), dw = random_buffer<F>(w.size(), seed + 4), db = random_buffer<F>(oc, seed + 5);
    const double flops = 2.0 * N * in * static_cast<double>(oc);
    r.compute("matmul " + name, "forward", flops, [&] {
      matmul_forward(out.data(), inp.data(), w.data(), with_bias ? bias.data() : nullptr, N, in, oc, ld, blas);
    });
    r.compute("matmul " + name, "backward", 2 * flops, [&] {  // dinp and dweight: two products
      matmul_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), inp.data(), w.data(), N, in,
                      oc, ld, blas);
    });
  };
  bench_matmul("qkv (C->3C)", C, 3 * C, 3 * C, true, 31);
  bench_matmul("attn proj (C->C)", C, C, C, true, 37);
  bench_matmul("fc (C->4C)", C, 4 * C, 4 * C, true, 43);
  bench_matmul("fc proj (4C->C)", 4 * C, C, C, true, 49);
  // The LM head as the model runs it (kernels/model/gpu_gpt.hpp): V columns of logits in rows Vp
  // apart, V rounded up to a multiple of 128. The unpadded row (rows V apart, misaligned for
  // cuBLAS when V is odd) is the before of that change: one run shows both.
  const int Vp = gpu_padded_vocab(V);
  bench_matmul("lm head (C->V, rows Vp=" + std::to_string(Vp) + " apart)", C, V, Vp, false, 55);
  bench_matmul("lm head (C->V, unpadded: rows V=" + std::to_string(V) + " apart)", C, V, V, false, 55);
  {  // attention
    const std::size_t n_att = static_cast<std::size_t>(B) * NH * T * T;
    auto qkv = random_buffer<F>(3 * NC, 61), out = empty_buffer<F>(NC), att = empty_buffer<F>(n_att);
    auto dout = random_buffer<F>(NC, 62), dqkv = empty_buffer<F>(3 * NC);
    auto scratch = empty_buffer<F>(attention_scratch_elements(T, NH));
    const double flops = 4.0 * B * T * static_cast<double>(T) * C;  // QK^T and AV, 2 T^2 hs each per head
    r.compute("attention", "forward", flops,
              [&] { attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, blas); });
    r.compute("attention", "backward", 2 * flops, [&] {
      attention_backward(dqkv.data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH, blas);
    });
    // Stage 08's flash kernels on the same inputs. They skip the tiles above the diagonal (about
    // half the work), but the rows count the same flops as the naive ones, so the two rows'
    // TFLOP/s compare as their speeds do.
    auto lse = empty_buffer<float>(static_cast<std::size_t>(B) * NH * T);
    r.compute("attention flash", "forward", flops,
              [&] { attention_flash_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, st); });
    r.compute("attention flash", "backward", 2 * flops, [&] {
      attention_flash_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, st);
    });
  }
  {  // GELU over the fc activations (N, 4C)
    const std::size_t n = 4 * NC;
    auto inp = random_buffer<F>(n, 71, 0.05f, 4.0f), out = empty_buffer<F>(n), dout = random_buffer<F>(n, 72);
    auto dinp = empty_buffer<F>(n);
    r.memory("gelu", "forward", 2.0 * n * s, [&] { gelu_forward(out.data(), inp.data(), n, st); });
    r.memory("gelu", "backward", 3.0 * n * s, [&] { gelu_backward(dinp.data(), dout.data(), inp.data(), n, st); });
  }
  {  // residual over (N, C)
    auto a = random_buffer<F>(NC, 81), b = random_buffer<F>(NC, 82), out = empty_buffer<F>(NC);
    auto dout = random_buffer<F>(NC, 83), da = random_buffer<F>(NC, 84), db = random_buffer<F>(NC, 85);
    r.memory("residual", "forward", 3.0 * NC * s, [&] { residual_forward(out.data(), a.data(), b.data(), NC, st); });
    r.memory("residual", "backward", 5.0 * NC * s,
             [&] { residual_backward(da.data(), db.data(), dout.data(), NC, st); });
  }
  {  // cross-entropy over (N, V), rows Vp apart as in the model; the bytes are the N V it touches
    const std::size_t NV = static_cast<std::size_t>(N) * V, NVp = static_cast<std::size_t>(N) * Vp;
    std::size_t unused = 0;
    DeviceBuffer<int> targets = random_tokens(N, V, 91, &unused);
    auto logits = random_buffer<F>(NVp, 92, 0.05f, 4.0f), probs = empty_buffer<F>(NVp), dlogits = empty_buffer<F>(NVp);
    auto losses = empty_buffer<float>(N);
    // The model's pair: the loss from one read of the logits; dlogits from the logits and losses.
    r.memory("crossentropy", "forward", NV * s + 8.0 * N,
             [&] { crossentropy_loss(losses.data(), logits.data(), targets.data(), N, V, Vp, st); });
    r.memory("crossentropy", "backward", 2.0 * NV * s + 8.0 * N, [&] {
      crossentropy_backward_logits(dlogits.data(), logits.data(), losses.data(), targets.data(), 1.0f / N, N, V, Vp,
                                   st);
    });
    // The pair with probabilities (the tensor-parallel head's backward; the earlier model's pair).
    r.memory("crossentropy (probs)", "forward", 2.0 * NV * s + 8.0 * N,
             [&] { crossentropy_forward(probs.data(), losses.data(), logits.data(), targets.data(), N, V, Vp, st); });
    r.memory("crossentropy (probs)", "backward", 2.0 * NV * s + 4.0 * N,
             [&] { crossentropy_backward(dlogits.data(), probs.data(), targets.data(), 1.0f / N, N, V, Vp, st); });
  }
  return r.take();
}

template std::vector<KernelRow> bench_layers<float>(const BenchShape&, const BenchOptions&, const Ceilings&);
template std::vector<KernelRow> bench_layers<bf16>(const BenchShape&, const BenchOptions&, const Ceilings&);

}  // namespace scalelab::cuda
