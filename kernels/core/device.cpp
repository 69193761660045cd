// Device queries, streams and events.
#include "kernels/core/device.hpp"

#include <cctype>
#include <cstdio>

#include "comm/local_rank.hpp"
#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"

namespace scalelab::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error for later calls
    return 0;
  }
  return n;
}

int current_device() {
  int dev = 0;
  SCALELAB_CUDA_CHECK(cudaGetDevice(&dev));
  return dev;
}

int select_local_gpu(Communicator& world) {
  const int gpus = device_count();
  SCALELAB_CHECK(gpus > 0, "select_local_gpu on a machine without a CUDA GPU");
  const int device = local_rank_on_host(world) % gpus;
  SCALELAB_CUDA_CHECK(cudaSetDevice(device));
  return device;
}

std::string device_description() {
  int dev = 0;
  SCALELAB_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  SCALELAB_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s (sm_%d%d, %d SMs, %.1f GiB)", p.name, p.major, p.minor, p.multiProcessorCount,
                static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

std::string device_slug() {
  int dev = 0;
  SCALELAB_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  SCALELAB_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  std::string slug;
  for (const char* c = p.name; *c; ++c) {
    const bool alnum = std::isalnum(static_cast<unsigned char>(*c)) != 0;
    const char ch = alnum ? static_cast<char>(std::tolower(static_cast<unsigned char>(*c))) : '-';
    if (ch == '-' && (slug.empty() || slug.back() == '-')) continue;
    slug += ch;
  }
  while (!slug.empty() && slug.back() == '-') slug.pop_back();
  return slug;
}

Stream::Stream() { SCALELAB_CUDA_CHECK(cudaStreamCreate(&stream_)); }
Stream::~Stream() {
  if (stream_) cudaStreamDestroy(stream_);  // no throw from a destructor
}
void Stream::synchronize() const { SCALELAB_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

Event::Event() { SCALELAB_CUDA_CHECK(cudaEventCreate(&event_)); }
Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}
void Event::record(cudaStream_t stream) { SCALELAB_CUDA_CHECK(cudaEventRecord(event_, stream)); }
void Event::synchronize() const { SCALELAB_CUDA_CHECK(cudaEventSynchronize(event_)); }

float elapsed_ms(const Event& start, const Event& stop) {
  float ms = 0;
  SCALELAB_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

}  // namespace scalelab::cuda
