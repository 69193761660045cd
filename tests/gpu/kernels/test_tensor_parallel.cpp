// Stage 06's kernels (kernels/layers/tensor_parallel.hpp) against host formulas and CPU twins.
// The tensor-parallel ranks are simulated on one process: each rank's part runs as its own
// launch, and what the group's collectives would add is added on the host in fp32.
//   the masked lookup: bitwise (a copy or a zero); wpe added by row offset; the backward's
//     scattered rows and position sums (rows > T, so several rows fold onto one position)
//   the vocab-parallel cross-entropy: the vocabulary split over 3 "ranks" (widths 100, 100 and
//     57 real columns, rows 128 apart), maxima combined by max, sums and target logits by +: the
//     probabilities and losses against the whole-vocabulary CPU twin (model/layers/crossentropy.hpp)
//   the row-parallel bias add and matmul_backward_bias's column sums
// Tolerances: gpu_test_util.hpp's rel_tolerance<F>() (the kernels' own summation orders and
// roundings to F), the lookup bitwise.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/device.hpp"
#include "kernels/layers/matmul.hpp"
#include "kernels/layers/tensor_parallel.hpp"
#include "model/layers/crossentropy.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

TEMPLATE_TEST_CASE("the vocab-parallel embedding's kernels match their host formulas", "[gpu][tensor_parallel]", float,
                   bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  // (N, T, C, V, begin): a rank's vocabulary rows [begin, V) of V ids, over N token rows; the
  // region (sequence parallelism's) holds rows = N/2 of them from first_row = N - rows, more than T.
  const std::vector<std::array<int, 5>> shapes = {{24, 8, 33, 13, 7}, {96, 16, 64, 101, 51}, {130, 40, 768, 257, 129}};
  for (const auto& [N, T, C, V, begin] : shapes) {
    const int local = V - begin, rows = N / 2, first_row = N - rows;
    const std::string label = std::string("vocab embedding ") + dtype_name<F>() + " N=" + std::to_string(N) +
                              " C=" + std::to_string(C) + " V=" + std::to_string(V);
    Rng rng(seed_for(label));
    const std::size_t NC = static_cast<std::size_t>(N) * C;
    const std::vector<int> tokens = random_ints(static_cast<std::size_t>(N), rng, V);
    std::vector<int> localised(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i)
      localised[i] = tokens[i] >= begin && tokens[i] < begin + local ? tokens[i] - begin : -1;
    const std::vector<float> wte = random_inputs<F>(static_cast<std::size_t>(local) * C, rng);
    const std::vector<float> wpe = random_inputs<F>(static_cast<std::size_t>(T) * C, rng);
    const std::vector<float> dout = random_inputs<F>(NC, rng);
    std::vector<float> dwte = random_inputs<F>(wte.size(), rng), dwpe = random_inputs<F>(wpe.size(), rng);  // +=
    std::vector<float> region = random_inputs<F>(static_cast<std::size_t>(rows) * C, rng);

    DeviceBuffer<int> d_tokens = cuda::to_device(localised, MemCategory::kActivations, nullptr);
    DeviceBuffer<F> d_wte = upload<F>(wte), d_wpe = upload<F>(wpe), d_dout = upload<F>(dout);
    DeviceBuffer<F> d_dwte = upload<F>(dwte), d_dwpe = upload<F>(dwpe), d_region = upload<F>(region);
    DeviceBuffer<F> d_out(NC, MemCategory::kActivations, nullptr);
    poison(d_out);
    cuda::vocab_embedding_forward(d_out.data(), d_tokens.data(), d_wte.data(), N, C, stream.get());
    cuda::add_position_embedding(d_region.data(), d_wpe.data(), first_row, rows, T, C, stream.get());
    cuda::vocab_embedding_backward(d_dwte.data(), d_dout.data(), d_tokens.data(), N, C, stream.get());
    cuda::position_embedding_backward(d_dwpe.data(), d_dout.data(), first_row, rows, T, C, stream.get());
    stream.synchronize();

    std::vector<float> out(NC, 0.0f);
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) {
        const std::size_t at = static_cast<std::size_t>(n) * C + c;
        if (localised[n] >= 0) {
          out[at] = wte[static_cast<std::size_t>(localised[n]) * C + c];
          dwte[static_cast<std::size_t>(localised[n]) * C + c] += dout[at];
        }
        if (n < rows) {  // row n of the region sits at position (first_row + n) mod T
          const std::size_t t = static_cast<std::size_t>((first_row + n) % T);
          region[static_cast<std::size_t>(n) * C + c] += wpe[t * C + c];
          dwpe[t * C + c] += dout[at];
        }
      }
    round_to<F>(region);
    check_close(label + " lookup", download(d_out), out, 0.0);  // a copy or a zero: exact
    check_close(label + " + wpe by row offset", download(d_region), region, rel_tolerance<F>());
    check_close(label + " dwte", download(d_dwte), dwte, rel_tolerance<F>());
    check_close(label + " dwpe", download(d_dwpe), dwpe, rel_tolerance<F>());
  }
}

TEMPLATE_TEST_CASE("the vocab-parallel cross-entropy over 3 ranks' columns equals the whole-vocabulary CPU twin",
                   "[gpu][tensor_parallel]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  const int N = 37, V = 257;
  const std::array<int, 3> begins = {0, 100, 200}, widths = {100, 100, 57};
  const std::string label = std::string("vocab-parallel cross-entropy ") + dtype_name<F>();
  Rng rng(seed_for(label));
  const std::vector<float> logits = random_inputs<F>(static_cast<std::size_t>(N) * V, rng, 0.05f, 4.0f);
  const std::vector<int> targets = random_ints(static_cast<std::size_t>(N), rng, V);
  std::vector<float> want_probs(logits.size()), want_losses(static_cast<std::size_t>(N));
  scalelab::crossentropy_forward(want_probs.data(), want_losses.data(), logits.data(), targets.data(), N, V);

  // Pass 1 on every rank, then the group's MAX; pass 2, then the group's sums; pass 3.
  std::vector<DeviceBuffer<F>> parts;
  std::vector<DeviceBuffer<int>> local_targets;
  std::vector<float> row_max(N, -INFINITY), sum_exp(N, 0.0f), target_logit(N, 0.0f);
  for (int r = 0; r < 3; ++r) {
    const int ld = padded_stride(widths[r]);
    std::vector<float> cols(static_cast<std::size_t>(N) * widths[r]);
    std::vector<int> mine(static_cast<std::size_t>(N));
    for (int i = 0; i < N; ++i) {
      std::copy_n(logits.begin() + static_cast<std::ptrdiff_t>(i) * V + begins[r], widths[r],
                  cols.begin() + static_cast<std::ptrdiff_t>(i) * widths[r]);
      const int local = targets[i] - begins[r];
      mine[i] = local >= 0 && local < widths[r] ? local : -1;
    }
    parts.push_back(upload<F>(pad_rows(cols, N, widths[r], ld)));  // NaN padding: never read
    local_targets.push_back(cuda::to_device(mine, MemCategory::kActivations, nullptr));
    DeviceBuffer<float> d_max(N, MemCategory::kWorkspace, nullptr);
    cuda::vocab_ce_row_max(d_max.data(), parts[r].data(), N, widths[r], ld, stream.get());
    const std::vector<float> m = download(d_max);
    for (int i = 0; i < N; ++i) row_max[i] = std::max(row_max[i], m[i]);
  }
  DeviceBuffer<float> d_row_max = upload<float>(row_max);
  for (int r = 0; r < 3; ++r) {
    DeviceBuffer<float> d_sum(N, MemCategory::kWorkspace, nullptr), d_target(N, MemCategory::kWorkspace, nullptr);
    poison(d_sum);
    poison(d_target);
    cuda::vocab_ce_row_sums(d_sum.data(), d_target.data(), parts[r].data(), d_row_max.data(), local_targets[r].data(),
                            N, widths[r], padded_stride(widths[r]), stream.get());
    const std::vector<float> s = download(d_sum), t = download(d_target);
    for (int i = 0; i < N; ++i) {
      sum_exp[i] += s[i];
      target_logit[i] += t[i];  // one rank's logit, the others' 0
    }
  }
  DeviceBuffer<float> d_sum = upload<float>(sum_exp), d_target = upload<float>(target_logit);
  std::vector<float> got_probs(logits.size()), got_losses;
  for (int r = 0; r < 3; ++r) {
    const int ld = padded_stride(widths[r]);
    DeviceBuffer<float> d_losses(N, MemCategory::kWorkspace, nullptr);
    poison(d_losses);
    cuda::vocab_ce_finish(parts[r].data(), d_losses.data(), parts[r].data(), d_row_max.data(), d_sum.data(),
                          d_target.data(), N, widths[r], ld, stream.get());  // in place, as the chunk runs it
    const std::vector<float> padded = download(parts[r]);
    check_padding_unwritten(label + " rank " + std::to_string(r) + " padding", padded, N, widths[r], ld);
    const std::vector<float> cols = unpad_rows(padded, N, widths[r], ld);
    for (int i = 0; i < N; ++i)
      std::copy_n(cols.begin() + static_cast<std::ptrdiff_t>(i) * widths[r], widths[r],
                  got_probs.begin() + static_cast<std::ptrdiff_t>(i) * V + begins[r]);
    got_losses = download(d_losses);  // every rank computes the same losses
    check_close(label + " losses on rank " + std::to_string(r), got_losses, want_losses, rel_tolerance<F>());
  }
  check_close(label + " probabilities", got_probs, want_probs, rel_tolerance<F>());
}

TEMPLATE_TEST_CASE("the row-parallel bias add and the bias gradient's column sums match the host",
                   "[gpu][tensor_parallel]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  cuda::Blas blas(stream.get(), nullptr);  // matmul_backward_bias keeps its partial sums in the workspace
  for (const auto& [N, C] : std::vector<std::pair<int, int>>{{7, 33}, {130, 768}}) {
    const std::string label = std::string("bias ") + dtype_name<F>() + " N=" + std::to_string(N) +
                              " C=" + std::to_string(C);
    Rng rng(seed_for(label));
    std::vector<float> y = random_inputs<F>(static_cast<std::size_t>(N) * C, rng);
    const std::vector<float> bias = random_inputs<F>(static_cast<std::size_t>(C), rng);
    std::vector<float> dbias = random_inputs<F>(static_cast<std::size_t>(C), rng);  // +=
    DeviceBuffer<F> d_y = upload<F>(y), d_bias = upload<F>(bias), d_dbias = upload<F>(dbias);
    cuda::matmul_backward_bias(d_dbias.data(), d_y.data(), N, C, blas);  // the sums of y before the add
    cuda::add_bias(d_y.data(), d_bias.data(), N, C, stream.get());
    stream.synchronize();
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) dbias[c] += y[static_cast<std::size_t>(n) * C + c];
    for (int n = 0; n < N; ++n)
      for (int c = 0; c < C; ++c) y[static_cast<std::size_t>(n) * C + c] += bias[c];
    round_to<F>(y);
    check_close(label + " y + bias", download(d_y), y, rel_tolerance<F>());
    check_close(label + " dbias", download(d_dbias), dbias, rel_tolerance<F>());
  }
}

}  // namespace
