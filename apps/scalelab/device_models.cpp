// --device: the CPU models from the library, or the GPU models from scalelab_cuda.
#include "device_models.hpp"

#include "core/error.hpp"

#ifdef SCALELAB_HAVE_CUDA
#include "kernels/core/device.hpp"
#include "kernels/dist/device_messages.hpp"
#include "kernels/dist/gpu_pipeline_chunk.hpp"
#include "kernels/dist/gpu_tp_chunk.hpp"
#include "kernels/dist/gpu_zero_model.hpp"
#include "kernels/dist/host_staging_communicator.hpp"
#include "kernels/model/gpu_train_model.hpp"
#endif
#ifdef SCALELAB_HAVE_NCCL
#include "kernels/comm/nccl_communicator.hpp"
#endif
#ifdef SCALELAB_HAVE_MPI
#include "comm/mpi/mpi_communicator.hpp"
#endif

namespace scalelab::cli {

namespace {
#ifndef SCALELAB_HAVE_NCCL
[[noreturn]] void nccl_not_built() {
  throw ConfigError(
      "backend nccl: this scalelab was built without NCCL (CMake found none; set SCALELAB_NCCL_ROOT and "
      "reconfigure, docs/nccl.md); use --backend mpi, which stages the GPU gradients through host memory");
}
#endif

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

// --backend nccl: an NCCL communicator over host's ranks (the unique id travels over host),
// one GPU per rank, ordered after the model's stream so a bucket's all-reduce starts once its
// gradients are written. Without NCCL, require_nccl_backend() refused before anything started.
std::unique_ptr<Communicator> make_nccl_gradient_communicator(Communicator& host, cudaStream_t stream,
                                                              double timeout_seconds) {
#ifdef SCALELAB_HAVE_NCCL
  cuda::NcclOptions options;
  options.device = cuda::current_device();  // the rank's GPU, chosen at startup by the world's local rank
  options.order_after = stream;
  options.timeout_seconds = timeout_seconds;  // the world's limit (--comm-timeout)
#ifdef SCALELAB_HAVE_MPI
  // A call stuck inside NCCL's host code ends every rank at once, as the MPI watchdog does.
  if (host.size() > 1) options.on_hang = [](const std::string& message) { MpiSession::watchdog_end_job(message, 3); };
#endif
  return cuda::make_nccl_communicator(host, options);
#else
  (void)host, (void)stream, (void)timeout_seconds;
  nccl_not_built();
#endif
}

// The device-memory twin of `host` for work ordered after `stream`: NCCL, or host staging.
std::unique_ptr<Communicator> device_communicator(bool nccl, Communicator& host, cudaStream_t stream,
                                                  double timeout_seconds) {
  if (nccl) return make_nccl_gradient_communicator(host, stream, timeout_seconds);
  return std::make_unique<cuda::HostStagingCommunicator>(host, stream);
}

// device_communicator as the factory the GPU models that make their own communicators take.
cuda::DeviceCommFactory device_comm_factory(bool nccl, double timeout_seconds) {
  return [nccl, timeout_seconds](Communicator& host, cudaStream_t stream) {
    return device_communicator(nccl, host, stream, timeout_seconds);
  };
}
#endif
}  // namespace

void require_nccl_backend(const std::string& device) {
  require(device == "cuda", "backend", "nccl moves GPU memory, but the run uses --device " + device,
          "use --backend nccl with --device cuda, or --backend mpi for --device cpu");
  require_cuda();
#ifndef SCALELAB_HAVE_NCCL
  nccl_not_built();
#endif
}

std::unique_ptr<Communicator> gradient_communicator_for(const std::string& device, bool nccl, Communicator& host,
                                                        TrainModel& model, double timeout_seconds) {
  if (device != "cuda") return nullptr;
#ifdef SCALELAB_HAVE_CUDA
  return device_communicator(nccl, host, model_stream(model), timeout_seconds);
#else
  (void)nccl, (void)host, (void)model, (void)timeout_seconds;
  require_cuda();  // throws: no GPU models in this build
  return nullptr;
#endif
}

GradCommFactory gradient_communicator_factory(const std::string& device, bool nccl, double timeout_seconds) {
  if (device != "cuda") return {};
  return [device, nccl, timeout_seconds](Communicator& host, TrainModel& model) {
    return gradient_communicator_for(device, nccl, host, model, timeout_seconds);
  };
}

ZeroModelFactory zero_model_factory(const std::string& device, bool nccl, double timeout_seconds) {
  if (device != "cuda") return {};
#ifdef SCALELAB_HAVE_CUDA
  return [nccl, timeout_seconds](const GPTConfig& config, int stage, const std::string& precision, bool offload,
                                 Communicator& dp, MemoryTracker* tracker) {
    return cuda::make_gpu_zero_model(config, stage, precision, dp, device_comm_factory(nccl, timeout_seconds), tracker,
                                     offload);
  };
#else
  (void)nccl, (void)timeout_seconds;
  require_cuda();  // throws: no GPU models in this build
  return {};
#endif
}

DeviceChunkFactory pipeline_chunk_factory(const std::string& device) {
  if (device != "cuda") return {};
#ifdef SCALELAB_HAVE_CUDA
  return cuda::make_gpu_pipeline_chunk;
#else
  require_cuda();  // throws: no GPU models in this build
  return {};
#endif
}

DeviceTpChunkFactory tp_chunk_factory(const std::string& device, bool nccl, double timeout_seconds) {
  if (device != "cuda") return {};
#ifdef SCALELAB_HAVE_CUDA
  return
      [nccl, timeout_seconds](const GPTConfig& config, const std::string& precision, const DeviceChunkStorage& storage,
                              Communicator& tp, bool sequence_parallel, MemoryTracker* tracker) {
        return cuda::make_gpu_tp_chunk(config, precision, storage, tp, sequence_parallel,
                                       device_comm_factory(nccl, timeout_seconds), tracker);
      };
#else
  (void)nccl, (void)timeout_seconds;
  require_cuda();  // throws: no GPU models in this build
  return {};
#endif
}

PipelineMessagesFactory pipeline_messages_factory(const std::string& device, bool nccl, double timeout_seconds) {
  if (device != "cuda") return {};
#ifdef SCALELAB_HAVE_CUDA
  return [nccl, timeout_seconds](Communicator& pp, MemoryTracker* tracker) {
    if (!nccl) return cuda::make_staged_pipeline_messages(pp, tracker);
    // GPU to GPU over NCCL (the chunks wait for their streams before a message is sent or freed,
    // so the communicator needs no order_after stream).
    PipelineMessages m;
    m.comm = make_nccl_gradient_communicator(pp, cudaStreamLegacy, timeout_seconds);
    m.memory = std::make_unique<cuda::DeviceMessagePool>(tracker);
    return m;
  };
#else
  (void)nccl, (void)timeout_seconds;
  require_cuda();  // throws: no GPU models in this build
  return {};
#endif
}

DeviceFactories device_factories_for(const std::string& device, bool nccl, double timeout_seconds) {
  return {gradient_communicator_factory(device, nccl, timeout_seconds),
          zero_model_factory(device, nccl, timeout_seconds), pipeline_chunk_factory(device),
          tp_chunk_factory(device, nccl, timeout_seconds), pipeline_messages_factory(device, nccl, timeout_seconds)};
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

void select_rank_gpu(const std::string& device, Communicator* world) {
  if (device != "cuda" || world == nullptr) return;
#ifdef SCALELAB_HAVE_CUDA
  require_cuda();
  cuda::select_local_gpu(*world);
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
