// The measurement behind `scalelab bench comm` (stage 04): one collective, one message size,
// timed and checked the way nccl-tests does it, for our ring (comm/ring.hpp) or the backend's
// built-in collective (MPI's on an MPI world, copies on the one-rank communicator).
//
//   time   the mean time of one iteration over `iters` back-to-back calls (after `warmup`
//          untimed ones), the maximum over ranks: a collective is done when its slowest rank is
//   algbw  S / time, S = the whole buffer in bytes (for reduce-scatter and all-gather too:
//          the gathered size, as nccl-tests prints it)
//   busbw  algbw * 2(n-1)/n for all-reduce, * (n-1)/n for reduce-scatter and all-gather: the
//          bandwidth each link must carry, comparable across n and with the hardware's peak
//   wrong  elements, summed over ranks, that differ from the exactly known result of one extra
//          call on fresh inputs (integer-valued floats, so every order of addition is exact)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "comm/communicator.hpp"
#include "comm/ring.hpp"

namespace scalelab::cli {

enum class BenchOp { kAllReduce, kReduceScatter, kAllGather };
enum class BenchImpl { kRing, kBuiltin };

const char* bench_op_name(BenchOp op);        // "all_reduce", "reduce_scatter", "all_gather"
const char* bench_impl_name(BenchImpl impl);  // "ring", "builtin"
// nccl-tests' "redop" column: "sum", or "none" for all-gather.
const char* bench_redop_name(BenchOp op);
// busbw / algbw for n ranks: 2(n-1)/n for all-reduce, (n-1)/n for the halves (0 on one rank).
double bus_factor(BenchOp op, int ranks);

struct BenchSettings {
  int iters = 20;    // timed calls per size
  int warmup = 5;    // untimed calls before them (first-touch, MPI's connection setup)
  RingOptions ring;  // the ring's piece size and window
};

struct BenchRow {
  BenchOp op = BenchOp::kAllReduce;
  BenchImpl impl = BenchImpl::kRing;
  std::size_t bytes = 0;    // S: count * sizeof(float)
  std::size_t count = 0;    // elements in the whole buffer
  double seconds = 0;       // per iteration, max over ranks
  double algbw = 0;         // GB/s (1e9 bytes per second)
  double busbw = 0;         // GB/s
  std::uint64_t wrong = 0;  // summed over ranks
};

// Times and checks `op` by `impl` on the first `count` elements of `buffer`, in place (the form
// DDP and ZeRO use). Collective: every rank calls it with the same op, impl, count and settings.
BenchRow bench_collective(Communicator& comm, BenchOp op, BenchImpl impl, std::span<float> buffer, std::size_t count,
                          const BenchSettings& settings);

}  // namespace scalelab::cli
