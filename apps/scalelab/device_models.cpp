// --device: the CPU models from the library, or the GPU models from scalelab_cuda.
#include "device_models.hpp"

#include "core/error.hpp"

#ifdef SCALELAB_HAVE_CUDA
#include "kernels/core/device.hpp"
#include "kernels/dist/host_staging_communicator.hpp"
#include "kernels/model/gpu_train_model.hpp"
#endif

namespace scalelab::cli {

namespace {
[[noreturn]] void nccl_not_built() {
  throw ConfigError("backend nccl: not built (this scalelab has no NCCL communicator yet); use --backend mpi, which "
                    "stages the GPU gradients through host memory");
}

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

#ifdef SCALELAB_HAVE_CUDA
// The stream a GPU model computes its gradients on (any precision; the mixed models then refuse
// DDP with their own message).
cudaStream_t model_stream(TrainModel& model) {
  if (auto* m = dynamic_cast<cuda::GpuTrainModel<float>*>(&model)) return m->stream();
  if (auto* m = dynamic_cast<cuda::GpuTrainModel<cuda::bf16>*>(&model)) return m->stream();
  if (auto* m = dynamic_cast<cuda::GpuTrainModel<cuda::fp16>*>(&model)) return m->stream();
  throw Error("device: --device cuda, but the trainer's model is not one of the GPU models");
}

// HOOK for the NCCL backend (kernels/comm, written separately): when it is built, return its
// communicator over host's ranks here, made to order its work after `stream`. Until then,
// require_nccl_backend() refuses --backend nccl before anything starts.
std::unique_ptr<Communicator> make_nccl_gradient_communicator(Communicator& /*host*/, cudaStream_t /*stream*/) {
  nccl_not_built();
}
#endif
}  // namespace

void require_nccl_backend(const std::string& device) {
  require(device == "cuda", "backend", "nccl moves GPU memory, but the run uses --device " + device,
          "use --backend nccl with --device cuda, or --backend mpi for --device cpu");
  require_cuda();
  nccl_not_built();
}

std::unique_ptr<Communicator> gradient_communicator_for(const std::string& device, bool nccl, Communicator& host,
                                                        TrainModel& model) {
  if (device != "cuda") return nullptr;
#ifdef SCALELAB_HAVE_CUDA
  const cudaStream_t stream = model_stream(model);
  if (nccl) return make_nccl_gradient_communicator(host, stream);
  return std::make_unique<cuda::HostStagingCommunicator>(host, stream);
#else
  (void)nccl, (void)host, (void)model;
  require_cuda();  // throws: no GPU models in this build
  return nullptr;
#endif
}

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
