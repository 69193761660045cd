// Fused softmax + cross-entropy on the GPU against its CPU twin
// (model/layers/crossentropy.hpp): vocabularies smaller than, just over, and far larger than the
// 512 threads of a row's block (50257, GPT-2's), in place and out of place; and with rows further
// apart than V (the LM head's padded logits), where the padding is neither read nor written. The
// pair the model runs, which writes no probabilities (crossentropy_loss, then
// crossentropy_backward_logits), against the same twin.
#include <catch2/catch.hpp>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gpu_test_util.hpp"
#include "kernels/core/device.hpp"
#include "kernels/layers/crossentropy.hpp"
#include "model/layers/crossentropy.hpp"

namespace {

using namespace scalelab_gpu_test;
namespace cuda = scalelab::cuda;
using scalelab::MemCategory;

TEMPLATE_TEST_CASE("crossentropy forward, backward and mean loss match the CPU twin", "[gpu][crossentropy]", float,
                   bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  const std::vector<std::pair<int, int>> shapes = {{1, 257}, {7, 257}, {33, 1000 + 3}, {5, 50257}};  // (N, V)
  for (auto [N, V] : shapes) {
    const std::string label = std::string("crossentropy ") + dtype_name<F>() + " N=" + std::to_string(N) +
                              " V=" + std::to_string(V);
    Rng rng(seed_for(label));
    const std::size_t NV = static_cast<std::size_t>(N) * V;
    const CrossEntropyCase c = crossentropy_case<F>(N, V, rng);
    const auto& [logits, targets, dloss, probs, losses, dlogits, mean] = std::tie(c.logits, c.targets, c.dloss, c.probs,
                                                                                  c.losses, c.dlogits, c.mean_loss);

    DeviceBuffer<int> d_targets = cuda::to_device(targets, MemCategory::kActivations, nullptr);
    DeviceBuffer<F> d_logits = upload<F>(logits);
    DeviceBuffer<F> d_probs(NV, MemCategory::kActivations, nullptr), d_dlogits(NV, MemCategory::kGrads, nullptr);
    DeviceBuffer<float> d_losses(N, MemCategory::kActivations, nullptr), d_mean(1, MemCategory::kActivations, nullptr);
    poison(d_probs);
    poison(d_dlogits);
    poison(d_losses);
    poison(d_mean);
    cuda::crossentropy_forward(d_probs.data(), d_losses.data(), d_logits.data(), d_targets.data(), N, V, stream.get());
    cuda::mean_loss(d_mean.data(), d_losses.data(), N, stream.get());
    cuda::crossentropy_backward(d_dlogits.data(), d_probs.data(), d_targets.data(), dloss, N, V, stream.get());
    stream.synchronize();
    check_close(label + " probs", download(d_probs), probs, rel_tolerance<F>());
    // The losses and their mean are fp32 whatever F is, computed from the same rounded logits.
    check_close(label + " losses", download(d_losses), losses, rel_tolerance<float>());
    check_close(label + " mean loss", download(d_mean), {mean}, rel_tolerance<float>());
    check_close(label + " dlogits", download(d_dlogits), dlogits, rel_tolerance<F>());

    // In place, as the model runs it: probs over the logits, then dlogits over the probs.
    cuda::crossentropy_forward(d_logits.data(), d_losses.data(), d_logits.data(), d_targets.data(), N, V, stream.get());
    stream.synchronize();
    check_close(label + " probs in place of logits", download(d_logits), probs, rel_tolerance<F>());
    check_close(label + " losses in place", download(d_losses), losses, rel_tolerance<float>());
    cuda::crossentropy_backward(d_logits.data(), d_logits.data(), d_targets.data(), dloss, N, V, stream.get());
    stream.synchronize();
    check_close(label + " dlogits in place of probs", download(d_logits), dlogits, rel_tolerance<F>());
  }
}

// The model runs the head with rows Vp > V apart (kernels/model/gpu_gpt.hpp). The kernels do
// the same arithmetic on the first V columns of each row whatever the stride, so the results
// are bitwise those of contiguous rows; NaN in the padding of the logits proves it is not read,
// NaN left in the padding of probs and dlogits that it is not written.
TEMPLATE_TEST_CASE("crossentropy with a row stride above V: bitwise the contiguous result, padding untouched",
                   "[gpu][crossentropy]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  const std::vector<std::pair<int, int>> shapes = {{7, 257}, {33, 1000 + 3}, {5, 50257}};  // (N, V)
  for (auto [N, V] : shapes) {
    const int ld = padded_stride(V);
    const std::string label = std::string("crossentropy ") + dtype_name<F>() + " N=" + std::to_string(N) +
                              " V=" + std::to_string(V) + " ld=" + std::to_string(ld);
    Rng rng(seed_for(label));
    const std::size_t NV = static_cast<std::size_t>(N) * V, NL = static_cast<std::size_t>(N) * ld;
    const CrossEntropyCase c = crossentropy_case<F>(N, V, rng);
    const auto& [logits, targets, dloss] = std::tie(c.logits, c.targets, c.dloss);
    DeviceBuffer<int> d_targets = cuda::to_device(targets, MemCategory::kActivations, nullptr);

    // Contiguous rows: the reference.
    DeviceBuffer<F> d_logits = upload<F>(logits);
    DeviceBuffer<F> d_probs(NV, MemCategory::kActivations, nullptr), d_dlogits(NV, MemCategory::kGrads, nullptr);
    DeviceBuffer<float> d_losses(N, MemCategory::kActivations, nullptr);
    cuda::crossentropy_forward(d_probs.data(), d_losses.data(), d_logits.data(), d_targets.data(), N, V, stream.get());
    cuda::crossentropy_backward(d_dlogits.data(), d_probs.data(), d_targets.data(), dloss, N, V, stream.get());
    stream.synchronize();
    const std::vector<float> probs = download(d_probs), losses = download(d_losses), dlogits = download(d_dlogits);

    // Rows ld apart, out of place: NaN in the logits' padding, probs and dlogits poisoned.
    DeviceBuffer<F> p_logits = upload<F>(pad_rows(logits, N, V, ld));
    DeviceBuffer<F> p_probs(NL, MemCategory::kActivations, nullptr), p_dlogits(NL, MemCategory::kGrads, nullptr);
    DeviceBuffer<float> p_losses(N, MemCategory::kActivations, nullptr);
    poison(p_probs);
    poison(p_dlogits);
    poison(p_losses);
    cuda::crossentropy_forward(p_probs.data(), p_losses.data(), p_logits.data(), d_targets.data(), N, V, ld,
                               stream.get());
    cuda::crossentropy_backward(p_dlogits.data(), p_probs.data(), d_targets.data(), dloss, N, V, ld, stream.get());
    stream.synchronize();
    const std::vector<float> got_probs = download(p_probs), got_dlogits = download(p_dlogits);
    check_bitwise(label + " probs", unpad_rows(got_probs, N, V, ld), probs);
    check_bitwise(label + " losses", download(p_losses), losses);
    check_bitwise(label + " dlogits", unpad_rows(got_dlogits, N, V, ld), dlogits);
    check_padding_unwritten(label + " probs", got_probs, N, V, ld);
    check_padding_unwritten(label + " dlogits", got_dlogits, N, V, ld);

    // In place, as the model runs it: probs over the logits, then dlogits over the probs.
    cuda::crossentropy_forward(p_logits.data(), p_losses.data(), p_logits.data(), d_targets.data(), N, V, ld,
                               stream.get());
    stream.synchronize();
    const std::vector<float> got_in_place = download(p_logits);
    check_bitwise(label + " probs in place", unpad_rows(got_in_place, N, V, ld), probs);
    check_bitwise(label + " losses in place", download(p_losses), losses);
    check_padding_unwritten(label + " probs in place", got_in_place, N, V, ld);
    cuda::crossentropy_backward(p_logits.data(), p_logits.data(), d_targets.data(), dloss, N, V, ld, stream.get());
    stream.synchronize();
    const std::vector<float> got_d_in_place = download(p_logits);
    check_bitwise(label + " dlogits in place", unpad_rows(got_d_in_place, N, V, ld), dlogits);
    check_padding_unwritten(label + " dlogits in place", got_d_in_place, N, V, ld);
  }
}

// The model's pair: the losses from the logits, nothing else written; then dlogits from the
// logits and those losses, into a buffer of their own and over the logits, rows contiguous and ld
// apart (NaN padding, neither read nor written). The backward recomputes each probability in fp32,
// so it is checked against the CPU's dlogits from unrounded probabilities.
TEMPLATE_TEST_CASE("crossentropy without probabilities (loss, then backward from the logits) matches the CPU twin",
                   "[gpu][crossentropy]", float, bf16, fp16) {
  using F = TestType;
  cuda::Stream stream;
  const std::vector<std::pair<int, int>> shapes = {{1, 257}, {7, 257}, {33, 1000 + 3}, {5, 50257}};  // (N, V)
  for (auto [N, V] : shapes)
    for (const bool padded : {false, true}) {
      const int ld = padded ? padded_stride(V) : V;
      const std::string label = std::string("crossentropy from logits ") + dtype_name<F>() + " N=" + std::to_string(N) +
                                " V=" + std::to_string(V) + " ld=" + std::to_string(ld);
      Rng rng(seed_for(label));
      const std::size_t NL = static_cast<std::size_t>(N) * ld;
      const CrossEntropyCase c = crossentropy_case<F>(N, V, rng);
      const auto& [logits, targets, dloss, losses, dlogits] = std::tie(c.logits, c.targets, c.dloss, c.losses,
                                                                       c.dlogits);

      DeviceBuffer<int> d_targets = cuda::to_device(targets, MemCategory::kActivations, nullptr);
      const std::vector<float> padded_logits = pad_rows(logits, N, V, ld);
      DeviceBuffer<F> d_logits = upload<F>(padded_logits);
      DeviceBuffer<F> d_dlogits(NL, MemCategory::kGrads, nullptr);
      DeviceBuffer<float> d_losses(N, MemCategory::kActivations, nullptr);
      poison(d_dlogits);
      poison(d_losses);
      cuda::crossentropy_loss(d_losses.data(), d_logits.data(), d_targets.data(), N, V, ld, stream.get());
      cuda::crossentropy_backward_logits(d_dlogits.data(), d_logits.data(), d_losses.data(), d_targets.data(), dloss, N,
                                         V, ld, stream.get());
      stream.synchronize();
      check_close(label + " losses", download(d_losses), losses, rel_tolerance<float>());
      const std::vector<float> got_logits = download(d_logits);
      check_bitwise(label + " logits left as they were", unpad_rows(got_logits, N, V, ld), logits);
      const std::vector<float> got = download(d_dlogits);
      check_close(label + " dlogits", unpad_rows(got, N, V, ld), dlogits, rel_tolerance<F>());
      check_padding_unwritten(label + " dlogits", got, N, V, ld);

      // Over the logits, as the model runs it: the same bits as into a buffer of their own.
      cuda::crossentropy_backward_logits(d_logits.data(), d_logits.data(), d_losses.data(), d_targets.data(), dloss, N,
                                         V, ld, stream.get());
      stream.synchronize();
      const std::vector<float> got_in_place = download(d_logits);
      check_bitwise(label + " dlogits in place", unpad_rows(got_in_place, N, V, ld), unpad_rows(got, N, V, ld));
      if (padded) check_padding_unwritten(label + " dlogits in place", got_in_place, N, V, ld);
    }
}

}  // namespace
