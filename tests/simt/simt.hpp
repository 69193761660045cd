// A CPU emulation of the CUDA execution model, enough to run this kit's kernels on a machine
// without a GPU (the register-resident flash attention's and the bf16 step's memory-bound ones:
// tests/simt/test_*_emulated.cpp): the kernel source is compiled as it is by the host compiler,
// and every CUDA thread of a block runs as a fiber (a coroutine with its own stack) that the
// emulator switches at each point where CUDA threads meet: __syncthreads (the whole block),
// cluster.sync (a thread block cluster) and the warp-wide instructions (__shfl_xor_sync,
// __syncwarp, and in tests/simt/include/kernels/core/ptx.cuh ldmatrix and mma.sync), which see the
// 32 lanes' values together, as the hardware does. Blocks, or clusters of blocks, run one after
// another.
//
// What it checks beyond the arithmetic: a block whose threads do not all reach the same
// __syncthreads, or a warp whose lanes do not all reach the same warp instruction, fails with an
// error that says where (on a GPU: a hang or undefined results); shared memory has exactly the
// launch's size and starts as NaN bytes, so under ASan a read past it fails and a read of what no
// thread wrote is NaN; an asynchronous copy (cp.async) fills its destination with NaN bytes when
// issued and with the data only when its group is waited for, so a tile read before its wait, or
// overwritten while another warp still reads it, shows as NaN; a block's shared memory turns NaN
// when the block ends, so another block of its cluster that reads it later sees NaN.
//
// What it does not model: timing (a thread runs until its next meeting point; which thread goes
// next is the launch's Schedule), the lanes of one warp interleaved between two meeting points
// (they run one after another, in the Schedule's lane order), memory ordering between blocks, and the hardware's exact
// rounding of mma.sync's sums and of its fast exp2 and tanh (see ptx.cuh): a kernel that passes here must still pass
// its GPU test. Include this header first, before any CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <typeinfo>

// The CUDA language's keywords, as the host compiler should read them here: every function runs
// on the CPU. A __shared__ array in a kernel becomes a static one: one copy for all the threads
// (fibers) of the block, which is what shared memory is, since blocks run one at a time (it keeps
// the last block's values where a GPU's would be undefined). The blocks of a cluster run at once,
// so a kernel launched in clusters must keep its shared data in dynamic shared memory, which is
// the block's own (it comes from the emulator: ptx.cuh's dynamic_shared_memory).
// crt/host_defines.h keeps definitions made before it.
#define __host__
#define __device__
#define __global__
#define __shared__ static
#define __launch_bounds__(...)
#define __cluster_dims__(...)  // the cluster's size is simt::launch's argument

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>  // dim3, uint3, int4

namespace scalelab::simt {

// The indices of the running CUDA thread (what threadIdx, blockIdx, blockDim and gridDim read).
struct Builtins {
  uint3 thread_idx, block_idx;
  dim3 block_dim, grid_dim;
};
const Builtins& builtins();

// The order in which the threads of a block that can go on are resumed. On a GPU the warps of a
// block run at unrelated speeds, so a kernel must be right under every order; a missing
// __syncthreads shows only under an order where one warp gets ahead of another, so a test runs
// its kernel under each of these:
//   kRoundRobin      every thread to its next meeting point in turn (the warps in step);
//   kFirstWarpAhead  always the lowest-numbered warp that can go on: warp 0 runs until a
//                    barrier stops it, then warp 1 catches up, ...;
//   kLastWarpAhead   the same from the highest-numbered thread: the last warp first, and in it
//                    the last lane first.
// The lanes of a warp run one after another between two meeting points, lowest first except
// under kLastWarpAhead. So a lane that reads shared memory another lane wrote, with no __syncwarp
// (or other meeting point) between, reads it unwritten under one order or the other: from a
// higher lane under the first two, from a lower lane under the last.
enum class Schedule { kRoundRobin, kFirstWarpAhead, kLastWarpAhead };
inline constexpr Schedule kAllSchedules[] = {Schedule::kRoundRobin, Schedule::kFirstWarpAhead,
                                             Schedule::kLastWarpAhead};
const char* schedule_name(Schedule s);

// What a launch counted, over all its blocks. Shared memory serves a warp's request in
// "wavefronts" of 128 bytes, one 4-byte word from each of its 32 banks (bank = address / 4 % 32);
// two addresses of one request in the same bank but different words take a wavefront each (a bank
// conflict). The emulated instructions that read shared memory as a warp (ldmatrix) report the
// wavefronts their addresses need and the fewest their bytes could take; a kernel whose tiles are
// laid out without conflicts has the two equal.
struct LaunchStats {
  std::uint64_t barriers = 0;           // __syncthreads passed, once per block and barrier
  std::uint64_t warp_instructions = 0;  // warp-wide instructions, once per warp and instruction
  std::uint64_t shared_wavefronts = 0;
  std::uint64_t shared_wavefronts_min = 0;
};

// Runs kernel() once for every thread of every block of the grid; `shared_bytes` of dynamic
// shared memory a block. Throws std::runtime_error when a thread throws, or when threads cannot
// go on (a barrier or warp instruction that not all of them reach): the message names the
// block, the threads and where they stopped.
// `cluster`: blocks per thread block cluster (the kernel's __cluster_dims__); the blocks of a
// cluster run together.
LaunchStats launch(dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& kernel,
                   Schedule schedule = Schedule::kRoundRobin, dim3 cluster = dim3(1, 1, 1));

// For the emulated instructions: a shared-memory request of the running warp needed `wavefronts`
// where `minimum` would do without bank conflicts (LaunchStats above).
void count_shared_wavefronts(std::uint64_t wavefronts, std::uint64_t minimum);

// The running block's dynamic shared memory, and whether [p, p + bytes) lies inside it.
unsigned char* shared_memory();
bool in_shared_memory(const void* p, std::size_t bytes);

// __syncthreads: waits until every thread of the block has called it.
void sync_block();

// Thread block clusters (tests/simt/include/cooperative_groups.h): cluster.sync() waits for every
// thread of the cluster; the running block's rank in it; p (in this block's shared memory) at the
// same offset in block `rank`'s.
void sync_cluster();
unsigned cluster_block_rank();
void* map_shared_rank(const void* p, unsigned rank);

// A warp-wide instruction: every lane of the running thread's warp calls it with its own `in`;
// when the 32 have, `compute(ins, outs)` runs once with all of them (indexed by lane) and each
// lane returns its own out. `op` names the instruction for the error a divergent warp gets.
using WarpCompute = void (*)(const void* const* ins, void* const* outs);
void warp_collective(const char* op, const std::type_info& type, const void* in, void* out, WarpCompute compute);

template <typename In, typename Out>
Out warp_collective(const char* op, const In& in, void (*compute)(const In* const* ins, Out* const* outs)) {
  Out out{};
  warp_collective(op, typeid(Out(*)(In)), &in, &out, reinterpret_cast<WarpCompute>(compute));
  return out;
}

// The running thread's asynchronous copies (cp.async): issued, committed as a group, waited for.
void async_copy(void* dst, const void* src, std::size_t bytes, bool valid);
void async_commit();
void async_wait(int pending);

// Throws std::runtime_error naming the running thread (block and thread index) and `what`.
[[noreturn]] void fail(const std::string& what);

}  // namespace scalelab::simt

#define threadIdx (::scalelab::simt::builtins().thread_idx)
#define blockIdx (::scalelab::simt::builtins().block_idx)
#define blockDim (::scalelab::simt::builtins().block_dim)
#define gridDim (::scalelab::simt::builtins().grid_dim)

inline void __syncthreads() { ::scalelab::simt::sync_block(); }

namespace scalelab::simt::detail {
inline void meet(const int* const*, int* const*) {}  // a warp-wide instruction that exchanges nothing
template <typename T>
struct Shuffle {
  T value;
  int lane_mask;
};
template <typename T>
void shuffle_xor(const Shuffle<T>* const* ins, T* const* outs) {
  for (int lane = 0; lane < 32; ++lane) *outs[lane] = ins[lane ^ ins[lane]->lane_mask]->value;
}
template <typename T>
T shfl_xor_sync(unsigned mask, T value, int lane_mask) {
  if (mask != 0xffffffffu) fail("__shfl_xor_sync: the emulation supports only the full warp mask");
  return warp_collective<Shuffle<T>, T>("__shfl_xor_sync", Shuffle<T>{value, lane_mask}, shuffle_xor<T>);
}
}  // namespace scalelab::simt::detail

// __syncwarp: every lane of the warp meets (the emulation supports the full warp only).
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) ::scalelab::simt::fail("__syncwarp: the emulation supports only the full warp mask");
  ::scalelab::simt::warp_collective<int, int>("__syncwarp", 0, ::scalelab::simt::detail::meet);
}

inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
  return ::scalelab::simt::detail::shfl_xor_sync(mask, v, lane_mask);
}
inline double __shfl_xor_sync(unsigned mask, double v, int lane_mask) {
  return ::scalelab::simt::detail::shfl_xor_sync(mask, v, lane_mask);
}
inline int __shfl_xor_sync(unsigned mask, int v, int lane_mask) {
  return ::scalelab::simt::detail::shfl_xor_sync(mask, v, lane_mask);
}

// CUDA's integer min and max (device code calls them unqualified).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// Device intrinsics of the kernels (kernels/core/dtype.cuh, crossentropy_kernels.cuh) that the CUDA
// headers declare only for nvcc.
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline void __stwb(int4* p, int4 v) { *p = v; }
// fp32 multiplication rounded to nearest (the host's is: no contraction into an fma here).
inline float __fmul_rn(float a, float b) { return a * b; }
// The streaming (evict-first) load and store: cache hints, so plain accesses here.
inline int4 __ldcs(const int4* p) { return *p; }
inline void __stcs(int4* p, int4 v) { *p = v; }
// Fibers share one OS thread and switch only at the meeting points, so a plain add is atomic.
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
  const __nv_bfloat16 old = *p;
  *p = __float2bfloat16_rn(__bfloat162float(old) + __bfloat162float(v));
  return old;
}
inline __half atomicAdd(__half* p, __half v) {
  const __half old = *p;
  *p = __float2half_rn(__half2float(old) + __half2float(v));
  return old;
}
