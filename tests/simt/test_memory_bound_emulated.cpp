// The bf16 step's memory-bound kernels run on the CPU by tests/simt's emulation of CUDA, against
// their CPU twins, with the GPU tests' tolerances (emulated_util.hpp): the elementwise kernel
// (kernels/core/elementwise_kernel.cuh) with GELU and the residual add
// (kernels/layers/elementwise_ops.cuh), the LayerNorm forward with and without the residual add
// before it and its backward, whose blocks work in thread block clusters
// (kernels/layers/layernorm_kernels.cuh), the bias gradient's two passes
// (kernels/layers/bias_grad_kernels.cuh), the softmax + cross-entropy with its mean loss
// (kernels/layers/crossentropy_kernels.cuh), and the optimizer step's gradient scaling and sum of
// squares (kernels/optim/grad_ops_kernels.cuh). Each at sizes off its blocks and its 16-byte packs, with
// tensors on 16-byte boundaries and off them, so both the packed and the scalar paths run. The
// GPU tests (tests/gpu/kernels/test_elementwise.cpp, test_layernorm.cpp, test_matmul.cpp,
// test_crossentropy.cpp, test_grad_ops.cpp) check the same on the hardware, where the bf16 GELU's tanh is the
// hardware's approximation.
#include "simt.hpp"  // first: it defines CUDA's keywords for the host compiler

#include <catch2/catch.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "emulated_util.hpp"
#include "kernels/core/elementwise_kernel.cuh"
#include "kernels/layers/bias_grad_kernels.cuh"
#include "kernels/layers/crossentropy_kernels.cuh"
#include "kernels/layers/elementwise_ops.cuh"
#include "kernels/layers/layernorm_kernels.cuh"
#include "kernels/optim/grad_ops.hpp"
#include "kernels/optim/grad_ops_kernels.cuh"
#include "model/layers/crossentropy.hpp"
#include "model/layers/gelu.hpp"
#include "model/layers/layernorm.hpp"
#include "model/layers/residual.hpp"

namespace {

namespace cuda = scalelab::cuda;
namespace simt = scalelab::simt;
using namespace scalelab_simt_test;

// Runs the elementwise kernel with Op over the tensors of t as launch_elementwise launches it.
template <typename F, typename Op>
void run_elementwise(Op op, const cuda::ElementwiseTensors<F, Op::kIn, Op::kOut>& t, std::size_t n) {
  const cuda::ElementwiseLaunch l = cuda::elementwise_launch(t, n);
  simt::launch(dim3(l.blocks), dim3(cuda::kThreads), 0, [&] { cuda::elementwise_kernel<F, Op>(op, t, n, l.split); });
}

// Sizes: one element, less than a bf16 pack, just over a warp, off the 256-thread block and the
// pack, and 100,003 (several blocks, each thread 4 packs, the last round not full, a tail).
// Layouts: inputs and outputs at element offsets `in` and `out` past a 16-byte boundary.
struct Layout {
  std::size_t in, out;
  const char* name;
};
const std::vector<std::size_t> kSizes = {1, 7, 33, 1000 + 3, 100000 + 3};
const std::vector<Layout> kLayouts = {{0, 0, "aligned"},
                                      {1, 1, "one element off alignment"},
                                      {1, 0, "inputs and outputs at different offsets"}};

TEMPLATE_TEST_CASE("emulated gelu and residual kernels match the CPU twins", "[simt][gelu][residual]", float, bf16,
                   fp16) {
  using F = TestType;
  for (const std::size_t N : kSizes)
    for (const Layout& at : kLayouts) {
      const std::string label = std::string(dtype_name<F>()) + " N=" + std::to_string(N) + " " + at.name;
      scalelab::Rng rng(N * 7 + at.in * 3 + at.out);
      const std::vector<float> x = random_inputs<F>(N, rng, 0.05f, 4.0f), y = random_inputs<F>(N, rng);
      const std::vector<float> dout = random_inputs<F>(N, rng);
      const std::vector<F> x_t = to_tensor<F>(x, at.in), y_t = to_tensor<F>(y, at.in);

      // GELU forward and backward, and the backward in place of dout (as the model runs it).
      std::vector<float> want(N), dwant(N);
      scalelab::gelu_forward(want.data(), x.data(), N);
      scalelab::gelu_backward(dwant.data(), dout.data(), x.data(), N);
      std::vector<F> out(at.out + N), din(at.out + N), dout_t = to_tensor<F>(dout, at.in);
      poison(out);
      poison(din);
      run_elementwise(cuda::GeluForward<F>{},
                      cuda::ElementwiseTensors<F, 1, 1>{{x_t.data() + at.in}, {out.data() + at.out}}, N);
      run_elementwise(
          cuda::GeluBackward{},
          cuda::ElementwiseTensors<F, 2, 1>{{dout_t.data() + at.in, x_t.data() + at.in}, {din.data() + at.out}}, N);
      check_close("gelu " + label + " out", widen(out, at.out), want, rel_tolerance<F>());
      check_close("gelu " + label + " dinp", widen(din, at.out), dwant, rel_tolerance<F>());
      run_elementwise(
          cuda::GeluBackward{},
          cuda::ElementwiseTensors<F, 2, 1>{{dout_t.data() + at.in, x_t.data() + at.in}, {dout_t.data() + at.in}}, N);
      check_close("gelu " + label + " dinp in place of dout", widen(dout_t, at.in), dwant, rel_tolerance<F>());

      // Residual forward, and the backward adding dout into both branches in place.
      scalelab::residual_forward(want.data(), x.data(), y.data(), N);
      poison(out);
      run_elementwise(
          cuda::ResidualForward{},
          cuda::ElementwiseTensors<F, 2, 1>{{x_t.data() + at.in, y_t.data() + at.in}, {out.data() + at.out}}, N);
      check_close("residual " + label + " out", widen(out, at.out), want, rel_tolerance<F>());
      std::vector<float> da = random_inputs<F>(N, rng), db = random_inputs<F>(N, rng);
      std::vector<F> da_t = to_tensor<F>(da, at.out), db_t = to_tensor<F>(db, at.out), d_t = to_tensor<F>(dout, at.in);
      scalelab::residual_backward(da.data(), db.data(), dout.data(), N);
      run_elementwise(cuda::ResidualBackward{},
                      cuda::ElementwiseTensors<F, 3, 2>{{da_t.data() + at.out, db_t.data() + at.out,
                                                         d_t.data() + at.in},
                                                        {da_t.data() + at.out, db_t.data() + at.out}},
                      N);
      check_close("residual " + label + " da", widen(da_t, at.out), da, rel_tolerance<F>());
      check_close("residual " + label + " db", widen(db_t, at.out), db, rel_tolerance<F>());
    }
}

// The LayerNorm forward kernel as layernorm.cu launches it: 16-byte accesses where every
// tensor's rows allow them. kResidual: inp is made as a + b into `residual` first.
template <typename F, bool kResidual>
void run_layernorm(F* out, float* mean, float* rstd, const F* inp, F* residual, const F* a, const F* b, const F* weight,
                   const F* bias, int N, int C, simt::Schedule schedule) {
  namespace lk = cuda::layernorm_kernels;
  const dim3 grid(lk::layernorm_forward_blocks(N)), block(lk::kRowsPerBlock * 32);
  if (lk::rows_on_16_bytes<F>(C, {out, inp, residual, a, b, weight, bias}))
    simt::launch(
        grid, block, 0,
        [&] {
          lk::layernorm_forward_kernel<F, cuda::Pack16<F>::kSize, kResidual>(out, mean, rstd, inp, residual, a, b,
                                                                             weight, bias, N, C);
        },
        schedule);
  else
    simt::launch(
        grid, block, 0,
        [&] {
          lk::layernorm_forward_kernel<F, 1, kResidual>(out, mean, rstd, inp, residual, a, b, weight, bias, N, C);
        },
        schedule);
}

TEMPLATE_TEST_CASE("emulated layernorm forward, alone and fused with the residual add", "[simt][layernorm]", float,
                   bf16, fp16) {
  using F = TestType;
  // (N, C, offset): one row; a partial block; C off the 16-byte pack (scalar accesses); GPT-2's C,
  // aligned and one element off (the scalar kernel on a shape that could take packs).
  struct Shape {
    int N, C;
    std::size_t offset;
  };
  for (const auto [N, C, offset] : std::vector<Shape>{{1, 33, 0}, {7, 100, 0}, {9, 64, 0}, {17, 768, 0}, {17, 768, 1}})
    for (const simt::Schedule schedule : simt::kAllSchedules) {
      const std::string label = std::string(dtype_name<F>()) + " N=" + std::to_string(N) + " C=" + std::to_string(C) +
                                (offset ? " off 16-byte alignment" : "") + " (" + simt::schedule_name(schedule) + ")";
      scalelab::Rng rng(static_cast<std::uint64_t>(N * 1000 + C + offset));
      const std::size_t NC = static_cast<std::size_t>(N) * C;
      const std::vector<float> a = random_inputs<F>(NC, rng, 0.05f, 1.5f), b = random_inputs<F>(NC, rng, 0.05f, 1.5f);
      const std::vector<float> weight = random_inputs<F>(C, rng), bias = random_inputs<F>(C, rng);
      const std::vector<F> a_t = to_tensor<F>(a, offset), b_t = to_tensor<F>(b, offset);
      const std::vector<F> w_t = to_tensor<F>(weight, offset), bias_t = to_tensor<F>(bias, offset);

      // The residual add, then the LayerNorm: against the CPU twins.
      std::vector<F> res(offset + NC), out(offset + NC);
      std::vector<float> mean(N), rstd(N);
      poison(res);
      poison(out);
      poison(mean);
      poison(rstd);
      run_elementwise(
          cuda::ResidualForward{},
          cuda::ElementwiseTensors<F, 2, 1>{{a_t.data() + offset, b_t.data() + offset}, {res.data() + offset}}, NC);
      run_layernorm<F, false>(out.data() + offset, mean.data(), rstd.data(), res.data() + offset, nullptr, nullptr,
                              nullptr, w_t.data() + offset, bias_t.data() + offset, N, C, schedule);
      std::vector<float> x(NC), want(NC), want_mean(N), want_rstd(N);
      scalelab::residual_forward(x.data(), a.data(), b.data(), NC);
      round_to<F>(x);
      scalelab::layernorm_forward(want.data(), want_mean.data(), want_rstd.data(), x.data(), weight.data(), bias.data(),
                                  N, C);
      check_close("layernorm " + label + " out", widen(out, offset), want, rel_tolerance<F>());
      check_close("layernorm " + label + " mean", mean, want_mean, rel_tolerance<float>());
      check_close("layernorm " + label + " rstd", rstd, want_rstd, rel_tolerance<float>());

      // Fused: the same bits as the two kernels, in every output.
      std::vector<F> res2(offset + NC), out2(offset + NC);
      std::vector<float> mean2(N), rstd2(N);
      poison(res2);
      poison(out2);
      run_layernorm<F, true>(out2.data() + offset, mean2.data(), rstd2.data(), res2.data() + offset,
                             res2.data() + offset, a_t.data() + offset, b_t.data() + offset, w_t.data() + offset,
                             bias_t.data() + offset, N, C, schedule);
      check_bitwise("residual+layernorm " + label + " residual", widen(res2), widen(res));
      check_bitwise("residual+layernorm " + label + " out", widen(out2), widen(out));
      check_bitwise("residual+layernorm " + label + " mean", mean2, mean);
      check_bitwise("residual+layernorm " + label + " rstd", rstd2, rstd);
    }
}

// The LayerNorm backward as layernorm.cu launches it: the row kernel it picks for `choice` in
// clusters of kClusterBlocks blocks (partial sums in a scratch that starts NaN), then the total of
// the slots.
template <typename F>
void run_layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                            const float* mean, const float* rstd, int N, int C, cuda::LayerNormBackwardKernel choice,
                            simt::Schedule schedule) {
  namespace lk = cuda::layernorm_kernels;
  const lk::BackwardLaunch l = lk::layernorm_backward_launch(N, C);
  std::vector<float> scratch(cuda::layernorm_backward_scratch_elements(C));
  poison(scratch);
  float* partial_w = scratch.data();
  float* partial_b = partial_w + static_cast<std::size_t>(cuda::kLayerNormParamChunks) * C;
  const lk::BackwardRowKernel<F> rows = lk::pick_backward_row_kernel(C, dinp, dout, inp, weight, choice);
  simt::launch(
      dim3(l.blocks), dim3(l.warps * 32), l.shared_bytes,
      [&] { rows(dinp, partial_w, partial_b, dout, inp, weight, mean, rstd, N, C, l.block_rows); }, schedule,
      dim3(lk::kClusterBlocks));
  simt::launch(dim3((C + 31) / 32), dim3(32, 8), 0,
               [&] { lk::layernorm_backward_params_total_kernel(dweight, dbias, partial_w, partial_b, C, l.slots); });
}

TEMPLATE_TEST_CASE("emulated layernorm backward matches the CPU twin", "[simt][layernorm]", float, bf16, fp16) {
  using F = TestType;
  // (N, C, offset): one row; rows and C off the pack (scalar accesses); rows over several slots of
  // the parameter sums, with 2 rows a block; enough rows (9 a block) for every warp of a block to
  // have some, and some warps two (at C = 256, the resident kernel's sums and next-row prefetch
  // over rows); C = 512, the resident kernel's largest fp32 row (4 packs a lane; bf16: 2); GPT-2's
  // C (bf16: resident, 3 packs a lane; fp32: streamed), aligned and off alignment; C = 1600, whose
  // sums leave room for 7 warps a block. dinp, dweight and dbias start non-zero (the kernels add
  // into them). Each shape runs the kernel the launcher picks and the streamed one.
  struct Shape {
    int N, C;
    std::size_t offset;
  };
  for (const auto [N, C, offset] : std::vector<Shape>{{1, 33, 0},
                                                      {7, 100, 0},
                                                      {300, 64, 0},
                                                      {2100, 32, 0},
                                                      {2100, 256, 0},
                                                      {40, 512, 0},
                                                      {33, 768, 0},
                                                      {33, 768, 1},
                                                      {9, 1600, 0}}) {
    // The warps at three relative speeds on one shape (the others: round robin), for time.
    const bool all_orders = N == 33 && offset == 0;
    for (const simt::Schedule schedule : simt::kAllSchedules) {
      if (!all_orders && schedule != simt::Schedule::kRoundRobin) continue;
      const std::string label = std::string(dtype_name<F>()) + " N=" + std::to_string(N) + " C=" + std::to_string(C) +
                                (offset ? " off 16-byte alignment" : "") + " (" + simt::schedule_name(schedule) + ")";
      scalelab::Rng rng(static_cast<std::uint64_t>(N * 1000 + C + offset));
      const std::size_t NC = static_cast<std::size_t>(N) * C;
      const std::vector<float> inp = random_inputs<F>(NC, rng, 0.05f, 3.0f), dout = random_inputs<F>(NC, rng);
      const std::vector<float> weight = random_inputs<F>(C, rng), bias = random_inputs<F>(C, rng);
      std::vector<float> dinp = random_inputs<F>(NC, rng), dweight = random_inputs<F>(C, rng);
      std::vector<float> dbias = random_inputs<F>(C, rng);
      std::vector<float> out(NC), mean(N), rstd(N);
      scalelab::layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), weight.data(), bias.data(), N, C);

      const std::vector<F> inp_t = to_tensor<F>(inp, offset), dout_t = to_tensor<F>(dout, offset);
      const std::vector<F> w_t = to_tensor<F>(weight, offset);
      std::vector<F> dinp_t = to_tensor<F>(dinp, offset), dw_t = to_tensor<F>(dweight, offset);
      std::vector<F> db_t = to_tensor<F>(dbias, offset);
      // The streamed kernel on copies of the accumulated tensors.
      std::vector<F> dinp_s = dinp_t, dw_s = dw_t, db_s = db_t;
      run_layernorm_backward<F>(dinp_t.data() + offset, dw_t.data() + offset, db_t.data() + offset,
                                dout_t.data() + offset, inp_t.data() + offset, w_t.data() + offset, mean.data(),
                                rstd.data(), N, C, cuda::LayerNormBackwardKernel::kAuto, schedule);
      run_layernorm_backward<F>(dinp_s.data() + offset, dw_s.data() + offset, db_s.data() + offset,
                                dout_t.data() + offset, inp_t.data() + offset, w_t.data() + offset, mean.data(),
                                rstd.data(), N, C, cuda::LayerNormBackwardKernel::kStreamed, schedule);
      scalelab::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(), weight.data(),
                                   mean.data(), rstd.data(), N, C);
      check_close("layernorm backward " + label + " dinp", widen(dinp_t, offset), dinp, rel_tolerance<F>());
      check_close("layernorm backward " + label + " dweight", widen(dw_t, offset), dweight, rel_tolerance<F>());
      check_close("layernorm backward " + label + " dbias", widen(db_t, offset), dbias, rel_tolerance<F>());
      // The two row kernels: the same arithmetic in the same order.
      check_bitwise("layernorm backward streamed vs picked " + label + " dinp", widen(dinp_s), widen(dinp_t));
      check_bitwise("layernorm backward streamed vs picked " + label + " dweight", widen(dw_s), widen(dw_t));
      check_bitwise("layernorm backward streamed vs picked " + label + " dbias", widen(db_s), widen(db_t));
    }
  }
}

// The bias gradient as matmul.cu launches it: pass 1 into the partial sums (a workspace of
// workspace_bytes, NaN where nothing is written), pass 2 adding them into dbias in order.
template <typename F, int kPack>
void run_bias_grad(F* dbias, const F* dout, int N, int OC, int ld, std::size_t workspace_bytes,
                   simt::Schedule schedule) {
  namespace bg = cuda::bias_grad;
  const bg::Launch l = bg::launch_shape<kPack>(N, OC, workspace_bytes);
  std::vector<float> partials(workspace_bytes / sizeof(float));
  poison(partials);
  simt::launch(
      dim3(l.strips, l.chunks), dim3(32, bg::kRowLanes), 0,
      [&] { bg::partials_kernel<F, kPack>(partials.data(), dout, N, OC, ld, l.rows_per_chunk); }, schedule);
  simt::launch(dim3((OC + 255) / 256), dim3(256), 0, [&] { bg::sum_kernel(dbias, partials.data(), l.chunks, OC); });
}

TEMPLATE_TEST_CASE("emulated bias gradient matches the column sums", "[simt][matmul]", float, bf16, fp16) {
  using F = TestType;
  constexpr int kPack = cuda::Pack16<F>::kSize;
  // (N, OC, ld): one row; a column count off the strip and the pack (scalar loads); GPT-2's 768
  // with rows in several chunks; the LM head's padded rows (ld > OC) with 16-byte loads.
  struct Shape {
    int N, OC, ld;
  };
  for (const auto [N, OC, ld] : std::vector<Shape>{{1, 5, 5}, {37, 100, 100}, {300, 768, 768}, {70, 1000, 1024}})
    for (const simt::Schedule schedule : simt::kAllSchedules) {
      const std::string label = std::string(dtype_name<F>()) + " N=" + std::to_string(N) + " OC=" + std::to_string(OC) +
                                " ld=" + std::to_string(ld) + " (" + simt::schedule_name(schedule) + ")";
      scalelab::Rng rng(static_cast<std::uint64_t>(N * 10000 + OC));
      const std::vector<float> dout = random_inputs<F>(static_cast<std::size_t>(N) * ld, rng);
      const std::vector<float> dbias = random_inputs<F>(OC, rng);  // += into it
      std::vector<float> want(dbias);
      for (int i = 0; i < N; ++i)
        for (int j = 0; j < OC; ++j) want[j] += dout[static_cast<std::size_t>(i) * ld + j];
      const std::vector<F> dout_t = to_tensor<F>(dout);
      std::vector<F> dbias_t = to_tensor<F>(dbias);
      if (OC % kPack == 0 && ld % kPack == 0)
        run_bias_grad<F, kPack>(dbias_t.data(), dout_t.data(), N, OC, ld, std::size_t{1} << 20, schedule);
      else
        run_bias_grad<F, 1>(dbias_t.data(), dout_t.data(), N, OC, ld, std::size_t{1} << 20, schedule);
      check_close("bias gradient " + label, widen(dbias_t), want, rel_tolerance<F>());
    }
  // A workspace too small for one chunk of partial sums is an error that says so.
  REQUIRE_THROWS_WITH(cuda::bias_grad::launch_shape<1>(10, 1000, 1024),
                      Catch::Matchers::Contains("a bias of 1000 columns has no room for its partial sums"));
}

TEMPLATE_TEST_CASE("emulated cross-entropy (both kernel pairs) matches the CPU twin", "[simt][crossentropy]", float,
                   bf16, fp16) {
  using F = TestType;
  namespace ck = cuda::crossentropy_kernels;
  // (N, V, ld): a row under a block's chunks; V off the pack; GPT-2's V with the LM head's padded
  // rows (ld a multiple of 128), the logits written in place as the model does.
  struct Shape {
    int N, V, ld;
  };
  for (const auto [N, V, ld] : std::vector<Shape>{{1, 257, 257}, {7, 1003, 1003}, {2, 50257, 50304}})
    for (const simt::Schedule schedule : simt::kAllSchedules) {
      const std::string label = std::string(dtype_name<F>()) + " N=" + std::to_string(N) + " V=" + std::to_string(V) +
                                " ld=" + std::to_string(ld) + " (" + simt::schedule_name(schedule) + ")";
      scalelab::Rng rng(static_cast<std::uint64_t>(N * 100000 + V));
      const CrossEntropyCase c = crossentropy_case<F>(N, V, rng);
      const std::vector<int>& targets = c.targets;

      // The logits in rows ld apart, NaN in the padding (which no kernel may read or write).
      std::vector<F> buffer = to_tensor<F>(pad_rows(c.logits, N, V, ld));
      std::vector<float> losses_got(N), mean_got(1);
      poison(losses_got);
      poison(mean_got);
      simt::launch(
          dim3(N), dim3(ck::kRowThreads), 0,
          [&] {
            ck::crossentropy_forward_kernel<F>(buffer.data(), losses_got.data(), buffer.data(), targets.data(), V, ld);
          },
          schedule);
      simt::launch(
          dim3(1), dim3(1024), 0, [&] { ck::mean_loss_kernel(mean_got.data(), losses_got.data(), N); }, schedule);
      // The rows' first V columns, having checked that the padding is still NaN.
      const auto unpad = [&](const std::string& what, const std::vector<F>& x) {
        const std::vector<float> wide = widen(x);
        check_padding_unwritten("crossentropy " + label + " " + what, wide, N, V, ld);
        return unpad_rows(wide, N, V, ld);
      };
      check_close("crossentropy " + label + " probs", unpad("probs", buffer), c.probs, rel_tolerance<F>());
      check_close("crossentropy " + label + " losses", losses_got, c.losses, rel_tolerance<float>());
      check_close("crossentropy " + label + " mean loss", mean_got, {c.mean_loss}, rel_tolerance<float>());

      // The backward in place of the probabilities, from the CPU's probabilities rounded to F.
      buffer = to_tensor<F>(pad_rows(c.probs, N, V, ld));
      std::vector<float> probs = c.probs, dlogits(c.dlogits.size());
      round_to<F>(probs);
      scalelab::crossentropy_backward(dlogits.data(), probs.data(), targets.data(), c.dloss, N, V);
      simt::launch(
          ck::backward_grid<F>(N, V), dim3(ck::kBackThreads), 0,
          [&] { ck::crossentropy_backward_kernel<F>(buffer.data(), buffer.data(), targets.data(), c.dloss, V, ld); },
          schedule);
      check_close("crossentropy " + label + " dlogits", unpad("dlogits", buffer), dlogits, rel_tolerance<F>());

      // The pair the GPU model runs, which writes no probabilities: the loss from one read of the
      // logits, then dlogits from the logits and the losses, into a buffer of their own and over
      // the logits (as the model does). It recomputes each probability in fp32, so its dlogits are
      // checked against the CPU's from unrounded probabilities.
      const std::vector<F> padded = to_tensor<F>(pad_rows(c.logits, N, V, ld));
      buffer = padded;
      poison(losses_got);
      simt::launch(
          dim3(N), dim3(ck::kRowThreads), 0,
          [&] { ck::crossentropy_loss_kernel<F>(losses_got.data(), buffer.data(), targets.data(), V, ld); }, schedule);
      check_close("crossentropy loss " + label + " losses", losses_got, c.losses, rel_tolerance<float>());
      check_bitwise("crossentropy loss " + label + " logits left as they were", widen(buffer), widen(padded));
      std::vector<F> separate(padded.size());
      poison(separate);                                  // NaN, padding included: it must stay NaN
      for (F* out : {separate.data(), buffer.data()}) {  // out of place first: it must not change the logits
        simt::launch(
            dim3(N), dim3(ck::kRowThreads), 0,
            [&] {
              ck::crossentropy_backward_logits_kernel<F>(out, buffer.data(), losses_got.data(), targets.data(), c.dloss,
                                                         V, ld);
            },
            schedule);
      }
      check_close("crossentropy from logits " + label + " dlogits", unpad("dlogits from logits", separate), c.dlogits,
                  rel_tolerance<F>());
      check_close("crossentropy from logits " + label + " dlogits over the logits",
                  unpad("dlogits over the logits", buffer), c.dlogits, rel_tolerance<F>());
    }
}

TEMPLATE_TEST_CASE("emulated gradient scaling and sum of squares", "[simt][grad_ops]", float, bf16, fp16) {
  using F = TestType;
  namespace gk = cuda::grad_ops_kernels;
  // Sizes off the pack and the block, at an offset off 16-byte alignment too (a scalar head).
  // The sum of squares runs on a grid of 8 blocks, not the launcher's kSumSquaresBlocks = 512
  // (the kernel is grid-stride; 512 blocks of fibers would take the emulation several seconds).
  for (const std::size_t n : {std::size_t{1}, std::size_t{33}, std::size_t{10000 + 3}})
    for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      const std::string label = std::string(dtype_name<F>()) + " n=" + std::to_string(n) +
                                (offset ? " off alignment" : "");
      scalelab::Rng rng(n * 2 + offset);
      const std::vector<float> x = random_inputs<F>(n, rng, 0.05f, 3.0f);
      std::vector<F> x_t = to_tensor<F>(x, offset);
      F* body = x_t.data() + offset;
      const cuda::Split split = cuda::split_at_16_bytes(body, n);

      double want = 0;
      for (const float v : x) want += static_cast<double>(v) * v;  // squares exact in double
      constexpr int kBlocks = 8;
      std::vector<double> partials(kBlocks), out(1);
      poison(partials);
      poison(out);
      simt::launch(dim3(kBlocks), dim3(cuda::kThreads), 0, [&] {
        gk::sum_squares_partial_kernel<F>(partials.data(), body, n, split.head, split.packs, split.tail_begin);
      });
      simt::launch(dim3(1), dim3(cuda::kThreads), 0,
                   [&] { gk::sum_partials_kernel(out.data(), partials.data(), kBlocks); });
      INFO("sum of squares " << label << ": " << out[0] << " against " << want);
      CHECK(std::fabs(out[0] - want) <= 1e-12 * want);  // the same squares in another order

      // x *= factor, each product rounded to F once: exactly the CPU's rounding of x * factor.
      const float factor = 0.37f;
      std::vector<float> scaled(x);
      for (float& v : scaled) v *= factor;
      round_to<F>(scaled);
      simt::launch(dim3(static_cast<unsigned>((split.packs + cuda::kThreads - 1) / cuda::kThreads + 1)),
                   dim3(cuda::kThreads), 0,
                   [&] { gk::scale_kernel<F>(body, factor, n, split.head, split.packs, split.tail_begin); });
      check_bitwise("scale " + label, widen(x_t, offset), scaled);  // scaled holds values of F
    }
}

}  // namespace
