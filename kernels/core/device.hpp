// The device, its streams and events as RAII owners (CUDA backend).
// device_count() never throws: "no GPU" (no device, no driver) is an answer, not an error, so
// tests can report themselves skipped and programs can fall back to the CPU.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace scalelab {
class Communicator;
}

namespace scalelab::cuda {

// Number of CUDA devices usable by this process; 0 when there is none or no driver.
int device_count();
// The current device (cudaGetDevice).
int current_device();
// Collective over `world` (every rank of the job, at startup, before anything is allocated on a
// GPU): makes GPU (local rank on this host) mod device_count() this process's current device and
// returns it (comm/local_rank.hpp), so the ranks of a node spread over its GPUs; with one GPU they
// all share it. Later NCCL communicators of any sub-group take the current device
// (NcclOptions::device). Needs a GPU (device_count() > 0).
int select_local_gpu(Communicator& world);
// "NVIDIA H100 80GB HBM3 (sm_90, 132 SMs, 79.1 GiB)" for the current device.
std::string device_description();
// The current device's name with everything but [A-Za-z0-9] replaced by '-', lower case
// ("nvidia-h100-80gb-hbm3"): used in result file names.
std::string device_slug();

// A stream owner. Created blocking (not cudaStreamNonBlocking) on purpose: DeviceBuffer
// allocates, zero-fills and frees on the legacy default stream, and a blocking stream is
// ordered after that work without extra events.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

// An event owner with timing enabled; elapsed_ms(a, b) is the GPU time between two records.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  void synchronize() const;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};
float elapsed_ms(const Event& start, const Event& stop);

}  // namespace scalelab::cuda
