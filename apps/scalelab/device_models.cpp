// --device: the CPU models from the library, or the GPU models from scalelab_cuda.
#include "device_models.hpp"

#include "core/error.hpp"

#ifdef SCALELAB_HAVE_CUDA
#include "kernels/core/device.hpp"
#include "kernels/model/gpu_train_model.hpp"
#endif

namespace scalelab::cli {

namespace {
void require_cuda() {
#ifdef SCALELAB_HAVE_CUDA
  require(cuda::device_count() > 0, "device", "--device cuda found no CUDA GPU (or no driver) on this machine",
          "use --device cpu, or run on a machine with an NVIDIA GPU");
#else
  throw ConfigError(
      "device: this scalelab was built without CUDA, so --device cuda is not available; use --device cpu, or "
      "rebuild with -DSCALELAB_CUDA=ON on a machine with nvcc");
#endif
}
}  // namespace

TrainModelFactory model_factory_for(const std::string& device) {
  if (device == "cpu") return {};
  require(device == "cuda", "device", "unknown device '" + device + "'", "use --device cpu or --device cuda");
  require_cuda();
#ifdef SCALELAB_HAVE_CUDA
  return [](const GPTConfig& config, const std::string& precision, MemoryTracker* tracker) {
    return cuda::make_gpu_train_model(config, precision, tracker);
  };
#else
  return {};  // not reached: require_cuda() threw
#endif
}

std::string device_label(const std::string& device) {
  if (device != "cuda") return device;
#ifdef SCALELAB_HAVE_CUDA
  return cuda::device_description();
#else
  return device;
#endif
}

}  // namespace scalelab::cli
