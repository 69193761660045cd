// The CUDA runtime calls of the GPU code's host side (kernels/core: device buffers, streams,
// events, the memory pool's counters; kernels/model: copies and memsets), on the CPU. "Device"
// memory is host memory, so a copy in any direction is a memcpy; streams and events are tokens,
// and every call has finished when it returns (what a synchronisation waits for is already done).
// The default memory pool's used and high-water bytes are kept as the driver keeps them, so that
// the memory reports of the models (kernels/core/device_memory.hpp) read real numbers. One device,
// "CPU (emulated device)", or as many as SCALELAB_EMULATED_DEVICES says, each with its own UUID
// (so that ranks of an MPI job can each take one, as the NCCL backend needs; nccl_emulation.cpp);
// they share the one memory pool, which is exact as long as a process uses one of them. Not
// emulated: kernel launches (the emulated tests call kernels or their CPU twins directly), peer
// access, graphs.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

namespace {

// A live allocation: its bytes, and the device current when it was made.
struct Allocation {
  std::size_t bytes;
  int device;
};
// The pool's state: each live allocation, the bytes in use and their high-water mark.
struct Pool {
  std::mutex mutex;
  std::map<const void*, Allocation> sizes;
  std::uint64_t used = 0, high = 0;
};
Pool& pool() {
  static Pool p;
  return p;
}
// A token that stands for the one device's default pool.
cudaMemPool_t pool_token() { return reinterpret_cast<cudaMemPool_t>(&pool()); }

constexpr std::size_t kTotalBytes = std::size_t{16} << 30;  // what the emulated device reports

// How many devices there are: SCALELAB_EMULATED_DEVICES (1 to 64), read once; 1 without it.
int device_count() {
  static const int count = [] {
    const char* v = std::getenv("SCALELAB_EMULATED_DEVICES");
    const int n = v ? std::atoi(v) : 1;
    return n >= 1 && n <= 64 ? n : 1;
  }();
  return count;
}
bool valid_device(int device) { return device >= 0 && device < device_count(); }
// The calling thread's current device, as the runtime keeps it.
int& current_device() {
  thread_local int device = 0;
  return device;
}

// Events carry the host time at which they were recorded.
struct EmulatedEvent {
  std::chrono::steady_clock::time_point at;
};

}  // namespace

extern "C" {

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t) {
  *p = std::aligned_alloc(256, std::max<std::size_t>(256, (bytes + 255) / 256 * 256));  // cudaMalloc's alignment
  if (*p == nullptr) return cudaErrorMemoryAllocation;
  Pool& q = pool();
  std::lock_guard<std::mutex> lock(q.mutex);
  q.sizes[*p] = Allocation{bytes, current_device()};
  q.used += bytes;
  q.high = std::max(q.high, q.used);
  return cudaSuccess;
}
cudaError_t cudaFreeAsync(void* p, cudaStream_t) {
  if (p == nullptr) return cudaSuccess;
  Pool& q = pool();
  {
    std::lock_guard<std::mutex> lock(q.mutex);
    const auto found = q.sizes.find(p);
    if (found == q.sizes.end()) return cudaErrorInvalidValue;  // not ours: the driver refuses it too
    q.used -= found->second.bytes;
    q.sizes.erase(found);
  }
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* memPool, int device) {
  if (!valid_device(device)) return cudaErrorInvalidDevice;
  *memPool = pool_token();
  return cudaSuccess;
}
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  if (memPool != pool_token()) return cudaErrorInvalidValue;
  Pool& q = pool();
  std::lock_guard<std::mutex> lock(q.mutex);
  switch (attr) {
    case cudaMemPoolAttrUsedMemCurrent:
    case cudaMemPoolAttrReservedMemCurrent: *static_cast<std::uint64_t*>(value) = q.used; return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
    case cudaMemPoolAttrReservedMemHigh: *static_cast<std::uint64_t*>(value) = q.high; return cudaSuccess;
    default: return cudaErrorNotSupported;
  }
}
// As the driver: the high-water marks may only be reset to 0, which sets them to the bytes in use.
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, cudaMemPoolAttr attr, void* value) {
  if (memPool != pool_token()) return cudaErrorInvalidValue;
  if ((attr != cudaMemPoolAttrUsedMemHigh && attr != cudaMemPoolAttrReservedMemHigh) ||
      *static_cast<std::uint64_t*>(value) != 0)
    return cudaErrorInvalidValue;
  Pool& q = pool();
  std::lock_guard<std::mutex> lock(q.mutex);
  q.high = q.used;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  Pool& q = pool();
  std::lock_guard<std::mutex> lock(q.mutex);
  *total = kTotalBytes;
  *free = kTotalBytes - std::min<std::size_t>(kTotalBytes, q.used);
  return cudaSuccess;
}

// Device memory is what cudaMallocAsync gave and has not been freed; anything else is host memory.
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  *attributes = cudaPointerAttributes{};
  Pool& q = pool();
  std::lock_guard<std::mutex> lock(q.mutex);
  auto after = q.sizes.upper_bound(ptr);
  const auto block = after != q.sizes.begin() ? std::prev(after) : q.sizes.end();
  const bool device = block != q.sizes.end() &&
                      static_cast<const char*>(ptr) < static_cast<const char*>(block->first) + block->second.bytes;
  attributes->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
  attributes->device = device ? block->second.device : -1;
  attributes->devicePointer = device ? const_cast<void*>(ptr) : nullptr;
  attributes->hostPointer = device ? nullptr : const_cast<void*>(ptr);
  return cudaSuccess;
}
// Pinned host memory is host memory here.
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = std::malloc(std::max<std::size_t>(1, bytes));
  return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostRegister(void*, size_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaHostUnregister(void*) { return cudaSuccess; }

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t) {
  std::memset(p, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemset2D(void* p, size_t pitch, int value, size_t width, size_t height) {
  for (std::size_t r = 0; r < height; ++r) std::memset(static_cast<char*>(p) + r * pitch, value, width);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind, cudaStream_t) {
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind) {
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  for (std::size_t r = 0; r < height; ++r)
    std::memmove(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = current_device();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return cudaErrorInvalidDevice;
  current_device() = device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!valid_device(device)) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::strncpy(prop->name, "CPU (emulated device)", sizeof prop->name - 1);
  prop->uuid.bytes[0] = static_cast<char>(device + 1);  // distinct per device, as the driver's
  prop->totalGlobalMem = kTotalBytes;
  prop->major = 9;  // what the kernels are compiled for (sm_90)
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
const char* cudaGetErrorName(cudaError_t) { return "cudaError (emulated)"; }
const char* cudaGetErrorString(cudaError_t) { return "an error of the emulated CUDA runtime"; }

cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  static char token;  // every emulated stream is the same token: work is done when it is issued
  *stream = reinterpret_cast<cudaStream_t>(&token);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamQuery(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new EmulatedEvent{std::chrono::steady_clock::now()});
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<EmulatedEvent*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  reinterpret_cast<EmulatedEvent*>(event)->at = std::chrono::steady_clock::now();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = std::chrono::duration<float, std::milli>(reinterpret_cast<EmulatedEvent*>(end)->at -
                                                 reinterpret_cast<EmulatedEvent*>(start)->at)
            .count();
  return cudaSuccess;
}

}  // extern "C"
