// The GPU models' optimizer step and parameter transfers. The step is train/fp32_model.cpp's
// (fp32) and precision/mixed_step.cpp's (mixed) on the device: the same order of scaling, norm,
// skip, clip and AdamW, with the per-step scalars computed on the host as AdamW computes them.
#include "kernels/model/gpu_train_model.hpp"

#include <cmath>
#include <utility>

#include "core/error.hpp"
#include "kernels/optim/adamw.hpp"
#include "kernels/optim/grad_ops.hpp"
#include "kernels/precision/cast.hpp"
#include "model/gpt.hpp"

namespace scalelab::cuda {

template <typename F>
GpuTrainModel<F>::GpuTrainModel(const GPTConfig& config, MemoryTracker* tracker, const GpuOptions& options)
    : gpt_(config, tracker, options),
      master_(kMixed ? gpt_.num_params() : 0, MemCategory::kOptimizer, tracker),
      m_(gpt_.num_params(), MemCategory::kOptimizer, tracker),
      v_(gpt_.num_params(), MemCategory::kOptimizer, tracker),
      sum_squares_(1, MemCategory::kWorkspace, tracker),
      partials_(kSumSquaresBlocks, MemCategory::kWorkspace, tracker) {}

template <typename F>
void GpuTrainModel<F>::init_weights(std::uint64_t seed) {
  // The CPU's initialisation (same seed, same values), then uploaded.
  std::vector<float> w(num_params());
  init_gpt2_weights(layout(), config().num_layers, w.data(), seed);
  set_master_params(w.data());
}

template <typename F>
const float* GpuTrainModel<F>::master_params() const {
  host_params_.resize(num_params());
  if constexpr (kMixed)
    master_.copy_to_host(host_params_.data(), num_params());
  else
    gpt_.params().copy_to_host(host_params_.data(), num_params());
  return host_params_.data();
}

template <typename F>
void GpuTrainModel<F>::set_master_params(const float* values) {
  if constexpr (kMixed) {
    master_.copy_from_host(values, num_params());
    cast(gpt_.params().data(), master_.data(), num_params(), stream());  // round to nearest even
    SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream()));
  } else {
    gpt_.params().copy_from_host(values, num_params());
  }
}

template <typename F>
std::vector<float> GpuTrainModel<F>::grads_to_host() const {
  if constexpr (kMixed) {
    DeviceBuffer<float> wide(num_params(), MemCategory::kWorkspace, nullptr);  // a test's copy, not counted
    cast(wide.data(), gpt_.grads().data(), num_params(), stream());
    SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return wide.to_host();
  } else {
    return gpt_.grads().to_host();
  }
}

template <typename F>
TrainModel::StepOutcome GpuTrainModel<F>::optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) {
  SCALELAB_CHECK(optimizer.size() == num_params(), "optimizer for ", optimizer.size(), " parameters, model has ",
                 num_params());
  StepOutcome out;
  const std::size_t n = num_params();
  cudaStream_t st = stream();
  F* g = gpt_.grads().data();
  if constexpr (!kMixed) {
    // fp32: scale in place (the CPU's g[i] *= s), norm, skip, clip, update.
    if (grad_scale != 1.0) scale_inplace(g, static_cast<float>(grad_scale), n, st);
  }
  // The sum of squares in double is also the loss scaler's inf/NaN check, so there is no second
  // pass over the gradients: an inf or NaN gradient makes the sum inf or NaN (the squares are
  // >= 0, so no inf - inf cancels), and finite gradients cannot overflow it (the largest float or
  // bf16, 3.4e38, squares to 1.2e77 in double; 1e9 of those add to 1.2e86, far below 1.8e308).
  sum_squares(sum_squares_.data(), partials_.data(), g, n, st);
  double ss = 0;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(&ss, sum_squares_.data(), sizeof ss, cudaMemcpyDeviceToHost, st));
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(st));  // ss is on the host
  // Mixed: the gradients still carry the loss scale, so the norm of the unscaled ones is
  // grad_scale times theirs (fp32: already scaled above).
  out.grad_norm = std::sqrt(ss) * (kMixed ? grad_scale : 1.0);
  if (!std::isfinite(out.grad_norm)) {  // inf/NaN: skip, with parameters and Adam state untouched
    out.skipped = true;
    return out;
  }
  const double coef = clip > 0 ? clip / (out.grad_norm + 1e-6) : 1.0;  // PyTorch's clip_grad_norm_
  optimizer.begin_step();
  const AdamWScalars k = adamw_scalars(optimizer.config(), optimizer.step_count(), lr);
  if constexpr (kMixed) {
    // One factor: unscale and clip together, applied to each gradient as it is widened.
    const double factor = grad_scale * (coef < 1.0 ? coef : 1.0);
    adamw_update_mixed(gpt_.params().data(), master_.data(), g, m_.data(), v_.data(), n, static_cast<float>(factor), k,
                       st);
  } else {
    if (coef < 1.0) scale_inplace(g, static_cast<float>(coef), n, st);
    adamw_update(gpt_.params().data(), g, m_.data(), v_.data(), n, k, st);
  }
  return out;
}

template <typename F>
float* GpuTrainModel<F>::fp32_grads() {
  if constexpr (kMixed)
    return TrainModel::fp32_grads();  // throws, as the CPU's mixed model does
  else
    return gpt_.grads().data();
}

template <typename F>
void GpuTrainModel<F>::download_optimizer_state(AdamW& optimizer) const {
  SCALELAB_CHECK(optimizer.size() == num_params(), "optimizer size ", optimizer.size());
  m_.copy_to_host(optimizer.m(), num_params());
  v_.copy_to_host(optimizer.v(), num_params());
}

template <typename F>
void GpuTrainModel<F>::upload_optimizer_state(const AdamW& optimizer) {
  SCALELAB_CHECK(optimizer.size() == num_params(), "optimizer size ", optimizer.size());
  m_.copy_from_host(optimizer.m(), num_params());
  v_.copy_from_host(optimizer.v(), num_params());
}

template class GpuTrainModel<float>;
template class GpuTrainModel<bf16>;
template class GpuTrainModel<fp16>;

std::unique_ptr<TrainModel> make_gpu_train_model(const GPTConfig& config, const std::string& precision,
                                                 MemoryTracker* tracker, const GpuOptions& options) {
  if (precision == "fp32") return std::make_unique<GpuTrainModel<float>>(config, tracker, options);
  if (precision == "bf16") return std::make_unique<GpuTrainModel<bf16>>(config, tracker, options);
  if (precision == "fp16") return std::make_unique<GpuTrainModel<fp16>>(config, tracker, options);
  throw ConfigError("precision: unknown precision '" + precision + "'; use fp32, bf16 or fp16");
}

}  // namespace scalelab::cuda
