// `scalelab bench comm`: timing and checking one collective at one size (see comm_bench.hpp).
#include "comm_bench.hpp"

#include <chrono>

#include "core/error.hpp"

namespace scalelab::cli {

const char* bench_op_name(BenchOp op) {
  switch (op) {
    case BenchOp::kAllReduce: return "all_reduce";
    case BenchOp::kReduceScatter: return "reduce_scatter";
    case BenchOp::kAllGather: return "all_gather";
  }
  return "?";
}

const char* bench_impl_name(BenchImpl impl) { return impl == BenchImpl::kRing ? "ring" : "builtin"; }

const char* bench_redop_name(BenchOp op) { return op == BenchOp::kAllGather ? "none" : "sum"; }

double bus_factor(BenchOp op, int ranks) {
  const double n = ranks;
  return (op == BenchOp::kAllReduce ? 2.0 : 1.0) * (n - 1) / n;
}

namespace {

// Rank r's input at index i: an integer in [0, 255] from a hash of (r, i), so a sum over up to
// 65,000 ranks is exact in float in any order, and a block that lands in the wrong place, comes
// from the wrong rank or is added twice almost surely differs from the expected value.
float input_value(int rank, std::size_t i) {
  std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(rank + 1) * 0xC2B2AE3D27D4EB4Full;
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return static_cast<float>(h & 255);
}

float sum_over_ranks(int ranks, std::size_t i) {
  float s = 0;  // exact: integers below 2^24
  for (int k = 0; k < ranks; ++k) s += input_value(k, i);
  return s;
}

// Every rank's inputs. All-gather starts from this rank's own block only; the rest holds -1,
// which no expected value equals, so a block the collective failed to deliver counts as wrong.
void fill_inputs(BenchOp op, const Communicator& comm, float* data, std::size_t count) {
  const BlockPartition blocks = comm.partition(count);
  const std::size_t begin = blocks.offset(comm.rank()), end = begin + blocks.size(comm.rank());
  for (std::size_t i = 0; i < count; ++i) {
    const bool mine = i >= begin && i < end;
    data[i] = op != BenchOp::kAllGather || mine ? input_value(comm.rank(), i) : -1.0f;
  }
}

// Elements of the result that differ from the exact answer: the whole buffer for all-reduce
// and all-gather, this rank's block for reduce-scatter (the rest is scratch).
std::uint64_t count_wrong(BenchOp op, const Communicator& comm, const float* data, std::size_t count) {
  const BlockPartition blocks = comm.partition(count);
  const int n = comm.size(), r = comm.rank();
  std::uint64_t wrong = 0;
  switch (op) {
    case BenchOp::kAllReduce:
      for (std::size_t i = 0; i < count; ++i) wrong += data[i] != sum_over_ranks(n, i);
      break;
    case BenchOp::kReduceScatter:
      for (std::size_t i = blocks.offset(r); i < blocks.offset(r) + blocks.size(r); ++i)
        wrong += data[i] != sum_over_ranks(n, i);
      break;
    case BenchOp::kAllGather:
      for (int b = 0; b < n; ++b)
        for (std::size_t i = blocks.offset(b); i < blocks.offset(b) + blocks.size(b); ++i)
          wrong += data[i] != input_value(b, i);
      break;
  }
  return wrong;
}

// One call, in place: reduce-scatter leaves block r at its own offset, all-gather starts there.
void run_once(Communicator& comm, BenchOp op, BenchImpl impl, float* data, std::size_t count, const RingOptions& ring) {
  const std::size_t mine = comm.partition(count).offset(comm.rank());
  if (impl == BenchImpl::kRing) {
    if (op == BenchOp::kAllReduce) ring_all_reduce(comm, data, count, ring);
    if (op == BenchOp::kReduceScatter) ring_reduce_scatter(comm, data, count, ring);
    if (op == BenchOp::kAllGather) ring_all_gather(comm, data, count, ring);
    return;
  }
  if (op == BenchOp::kAllReduce) comm.all_reduce(data, data, count, DataType::kFloat32, ReduceOp::kSum);
  if (op == BenchOp::kReduceScatter) comm.reduce_scatter(data, data + mine, count, DataType::kFloat32, ReduceOp::kSum);
  if (op == BenchOp::kAllGather) comm.all_gather(data + mine, data, count, DataType::kFloat32);
}

}  // namespace

BenchRow bench_collective(Communicator& comm, BenchOp op, BenchImpl impl, std::span<float> buffer, std::size_t count,
                          const BenchSettings& settings) {
  SCALELAB_CHECK(count <= buffer.size(), "count ", count, " exceeds the buffer of ", buffer.size());
  float* data = buffer.data();

  // Timed calls run back to back on the same buffer, as in nccl-tests; all-reduce and
  // reduce-scatter grow the values n-fold per call, which costs nothing (no denormals; an
  // overflow to inf after ~60 calls is not slower either) and the check below starts afresh.
  fill_inputs(op, comm, data, count);
  for (int i = 0; i < settings.warmup; ++i) run_once(comm, op, impl, data, count, settings.ring);
  comm.barrier();  // start together, so no rank's time includes waiting for a late one
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < settings.iters; ++i) run_once(comm, op, impl, data, count, settings.ring);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / settings.iters;
  comm.all_reduce(&seconds, &seconds, 1, DataType::kFloat64, ReduceOp::kMax);

  fill_inputs(op, comm, data, count);
  run_once(comm, op, impl, data, count, settings.ring);
  auto wrong = static_cast<std::int64_t>(count_wrong(op, comm, data, count));
  comm.all_reduce(&wrong, 1);

  BenchRow row;
  row.op = op;
  row.impl = impl;
  row.count = count;
  row.bytes = count * sizeof(float);
  row.seconds = seconds;
  row.algbw = seconds > 0 ? static_cast<double>(row.bytes) / seconds / 1e9 : 0;
  row.busbw = row.algbw * bus_factor(op, comm.size());
  row.wrong = static_cast<std::uint64_t>(wrong);
  return row;
}

}  // namespace scalelab::cli
