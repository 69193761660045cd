// Stage 04 on the GPU: the NCCL communicator. Inputs are small integers in float, so every sum
// is exact whatever order NCCL adds in, and results are compared for equality with values
// computed here from the formula (nccl-tests' trick). Counts are odd, so with two ranks the
// reduce-scatter and all-gather take the uneven path (one reduce/broadcast per block).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "comm/partition.hpp"
#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/device_buffer.hpp"
#include "nccl_test_kernels.hpp"
#include "nccl_world.hpp"
#include "schedule/pipeline_schedule.hpp"
#include "schedule/rendezvous.hpp"

using namespace scalelab;
using namespace scalelab_test;
using Catch::Matchers::Contains;
using scalelab::cuda::DeviceBuffer;

namespace {

const std::size_t kCounts[] = {1, 2, 7, 1001, 65537};

DeviceBuffer<float> device_copy(const std::vector<float>& host) {
  return cuda::to_device(host, MemCategory::kComm, nullptr);
}

// Exact comparison of `got` with `want` from want_offset on; names the first difference.
void require_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                   std::size_t want_offset = 0) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[want_offset + i]) continue;
    FAIL(where(nccl_world()) << ": " << what << ": element " << i << " is " << got[i] << ", expected "
                             << want[want_offset + i]);
  }
  SUCCEED(what);
}

float pattern(std::size_t i, std::size_t period) { return static_cast<float>(i % period + 1); }

}  // namespace

TEST_CASE("nccl all_reduce sums and maxes exactly, out of place and in place", "[nccl]") {
  auto& c = nccl_world();
  const int n = c.size(), r = c.rank();
  for (std::size_t count : kCounts) {
    std::vector<float> send(count), sum(count), max(count);
    for (std::size_t i = 0; i < count; ++i) {
      send[i] = static_cast<float>(r + 1) * pattern(i, 13);
      sum[i] = static_cast<float>(n * (n + 1) / 2) * pattern(i, 13);  // sum over ranks of (rank+1)
      max[i] = static_cast<float>(n) * pattern(i, 13);
    }
    auto d_send = device_copy(send);
    DeviceBuffer<float> d_recv(count, MemCategory::kComm, nullptr);
    c.all_reduce(d_send.data(), d_recv.data(), count, DataType::kFloat32, ReduceOp::kSum);
    require_equal(d_recv.to_host(), sum, "all_reduce sum, count " + std::to_string(count));
    c.all_reduce(d_send.data(), d_send.data(), count, DataType::kFloat32, ReduceOp::kMax);
    require_equal(d_send.to_host(), max, "in-place all_reduce max, count " + std::to_string(count));
  }
}

TEST_CASE("nccl reduce_scatter leaves each rank its block of the sum, for uneven blocks too", "[nccl]") {
  auto& c = nccl_world();
  const int n = c.size(), r = c.rank();
  for (std::size_t count : kCounts) {
    const BlockPartition p = c.partition(count);
    std::vector<float> send(count), sum(count);
    for (std::size_t i = 0; i < count; ++i) {
      send[i] = static_cast<float>(r + 1) * pattern(i, 7);
      sum[i] = static_cast<float>(n * (n + 1) / 2) * pattern(i, 7);
    }
    auto d_send = device_copy(send);
    DeviceBuffer<float> d_block(p.size(r), MemCategory::kComm, nullptr);
    c.reduce_scatter(d_send.data(), d_block.data(), count, DataType::kFloat32, ReduceOp::kSum);
    require_equal(d_block.to_host(), sum, "reduce_scatter, count " + std::to_string(count), p.offset(r));
    // In place: the result lands in this rank's block of the send buffer.
    c.reduce_scatter(d_send.data(), d_send.data() + p.offset(r), count, DataType::kFloat32, ReduceOp::kSum);
    std::vector<float> mine = d_send.to_host();
    mine = std::vector<float>(mine.begin() + static_cast<std::ptrdiff_t>(p.offset(r)),
                              mine.begin() + static_cast<std::ptrdiff_t>(p.offset(r) + p.size(r)));
    require_equal(mine, sum, "in-place reduce_scatter, count " + std::to_string(count), p.offset(r));
  }
}

TEST_CASE("nccl all_gather puts every rank's block in place, for uneven blocks too", "[nccl]") {
  auto& c = nccl_world();
  const int n = c.size(), r = c.rank();
  for (std::size_t count : kCounts) {
    const BlockPartition p = c.partition(count);
    std::vector<float> full(count);  // element i comes from its block's owner: 1000 * owner + i % 997
    for (int b = 0; b < n; ++b)
      for (std::size_t i = p.offset(b); i < p.offset(b) + p.size(b); ++i)
        full[i] = static_cast<float>(1000 * b) + pattern(i, 997);
    const std::vector<float> block(full.begin() + static_cast<std::ptrdiff_t>(p.offset(r)),
                                   full.begin() + static_cast<std::ptrdiff_t>(p.offset(r) + p.size(r)));
    auto d_block = device_copy(block);
    DeviceBuffer<float> d_full(count, MemCategory::kComm, nullptr);
    c.all_gather(d_block.data(), d_full.data(), count, DataType::kFloat32);
    require_equal(d_full.to_host(), full, "all_gather, count " + std::to_string(count));
    // In place: only this rank's block is filled beforehand; the rest is -1.
    std::vector<float> start(count, -1.0f);
    std::copy(block.begin(), block.end(), start.begin() + static_cast<std::ptrdiff_t>(p.offset(r)));
    auto d_inplace = device_copy(start);
    c.all_gather(d_inplace.data() + p.offset(r), d_inplace.data(), count, DataType::kFloat32);
    require_equal(d_inplace.to_host(), full, "in-place all_gather, count " + std::to_string(count));
  }
}

TEST_CASE("nccl broadcast copies the root's buffer to every rank", "[nccl]") {
  auto& c = nccl_world();
  const std::size_t count = 1001;
  for (int root : {c.size() - 1, 0}) {
    std::vector<float> want(count), start(count, -1.0f);
    for (std::size_t i = 0; i < count; ++i) want[i] = static_cast<float>(2 * i + 5 + static_cast<std::size_t>(root));
    auto d_buf = device_copy(c.rank() == root ? want : start);
    c.broadcast(d_buf.data(), count, DataType::kFloat32, root);
    require_equal(d_buf.to_host(), want, "broadcast from root " + std::to_string(root));
  }
}

TEST_CASE("nccl isend/irecv around a ring arrive in posting order", "[nccl]") {
  auto& c = nccl_world();
  const int n = c.size(), r = c.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  const std::size_t count = 1001;
  const auto message = [&](int from, int which) {
    std::vector<float> v(count);
    for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(100000 * from + 10000 * which) + pattern(i, 997);
    return v;
  };
  auto d_first = device_copy(message(r, 0)), d_second = device_copy(message(r, 1));
  DeviceBuffer<float> d_in1(count, MemCategory::kComm, nullptr), d_in2(count, MemCategory::kComm, nullptr);
  // Both directions posted before any wait: the pattern every ring step uses (comm/ring.cpp).
  std::vector<Request> requests;
  requests.push_back(c.irecv(d_in1.data(), count, DataType::kFloat32, prev));
  requests.push_back(c.isend(d_first.data(), count, DataType::kFloat32, next));
  requests.push_back(c.irecv(d_in2.data(), count, DataType::kFloat32, prev));
  requests.push_back(c.isend(d_second.data(), count, DataType::kFloat32, next));
  // test() launches the queued batch and must report completion within the test's time limit;
  // a receive it calls complete holds its message, before any wait().
  for (Request& request : requests)
    while (!c.test(request)) {
    }
  require_equal(d_in1.to_host(), message(prev, 0), "first message from rank " + std::to_string(prev));
  require_equal(d_in2.to_host(), message(prev, 1), "second message from rank " + std::to_string(prev));
  c.wait_all(requests);
}

TEST_CASE("nccl iall_reduce follows the producer stream and overlaps with other kernels", "[nccl][overlap]") {
  cuda::Stream producer, other;
  cuda::NcclOptions options = nccl_test_options();
  options.order_after = producer.get();
  auto c = cuda::make_nccl_communicator(test_world(), options);
  const int n = c->size(), r = c->rank();
  const std::size_t count = 65537;
  DeviceBuffer<float> d_send(count, MemCategory::kComm, nullptr), d_recv(count, MemCategory::kComm, nullptr);
  DeviceBuffer<float> d_side(count, MemCategory::kWorkspace, nullptr);
  // The producer writes the send buffer only after ~300 ms; the all-reduce is posted at once and
  // must still see the written values (it waits on an event, not on the host).
  scalelab_test::spin_then_fill(d_send.data(), count, static_cast<float>(r + 1), 300, producer.get());
  scalelab_test::spin_then_fill(d_side.data(), count, 7.0f, 100, other.get());
  const auto t0 = std::chrono::steady_clock::now();
  Request request = c->iall_reduce(d_send.data(), d_recv.data(), count, DataType::kFloat32, ReduceOp::kSum);
  const double post_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  INFO(where(*c) << ": posting took " << post_ms << " ms");
  CHECK_FALSE(c->test(request));  // the producer's kernel is still spinning: the call cannot be done
  CHECK(post_ms < 200);           // posting did not wait for the producer
  c->wait(request);
  std::vector<float> sum(count), side(count);
  for (std::size_t i = 0; i < count; ++i) {
    sum[i] = static_cast<float>(n * (n + 1) / 2) * pattern(i, 5);
    side[i] = 7.0f * pattern(i, 5);
  }
  require_equal(d_recv.to_host(), sum, "iall_reduce after the producer's kernel");
  other.synchronize();
  require_equal(d_side.to_host(), side, "the kernel that ran beside it");
}

TEST_CASE("nccl counts calls and bytes as the host backends do", "[nccl]") {
  auto& c = nccl_world();
  Communicator& host = test_world();
  const std::size_t count = 1001;
  const BlockPartition p = c.partition(count);
  const int r = c.rank(), next = (r + 1) % c.size(), prev = (r + c.size() - 1) % c.size();
  DeviceBuffer<float> d_a(count, MemCategory::kComm, nullptr), d_b(count, MemCategory::kComm, nullptr);
  std::vector<float> h_a(count), h_b(count);
  // The same calls on both communicators; the rows must agree exactly.
  const auto run = [&](Communicator& k, float* a, float* b) {
    k.all_reduce(a, b, count, DataType::kFloat32, ReduceOp::kSum);
    k.reduce_scatter(a, b, count, DataType::kFloat32, ReduceOp::kSum);
    k.all_gather(a + p.offset(r), b, count, DataType::kFloat32);
    k.broadcast(a, count, DataType::kFloat32, 0);
    k.barrier();
    Request in = k.irecv(b, count, DataType::kFloat32, prev);
    Request out = k.isend(a, count, DataType::kFloat32, next);
    k.wait(in);
    k.wait(out);
  };
  const CommStats nccl_before = c.stats(), host_before = host.stats();
  run(c, d_a.data(), d_b.data());
  run(host, h_a.data(), h_b.data());
  for (CommOp op : {CommOp::kAllReduce, CommOp::kReduceScatter, CommOp::kAllGather, CommOp::kBroadcast,
                    CommOp::kBarrier, CommOp::kSend, CommOp::kRecv}) {
    INFO(where(c) << ": " << comm_op_name(op));
    CHECK(c.stats()[op].calls - nccl_before[op].calls == 1);
    CHECK(c.stats()[op].calls - nccl_before[op].calls == host.stats()[op].calls - host_before[op].calls);
    CHECK(c.stats()[op].bytes_sent - nccl_before[op].bytes_sent ==
          host.stats()[op].bytes_sent - host_before[op].bytes_sent);
    CHECK(c.stats()[op].bytes_received - nccl_before[op].bytes_received ==
          host.stats()[op].bytes_received - host_before[op].bytes_received);
  }
  // And the ring formula itself: all-reduce moves 2(n-1)/n of the buffer, here exactly.
  const RingTraffic t = ring_all_reduce_traffic(count, r, c.size());
  CHECK(c.stats()[CommOp::kAllReduce].bytes_sent - nccl_before[CommOp::kAllReduce].bytes_sent == t.sent * 4);
  if (c.size() == 1) CHECK(t.sent == 0);
}

TEST_CASE("nccl split makes working sub-communicators", "[nccl]") {
  auto& c = nccl_world();
  const int color = c.rank() % 2;
  auto sub = c.split(color, c.rank());
  int members = 0;
  for (int q = 0; q < c.size(); ++q) members += q % 2 == color ? 1 : 0;
  REQUIRE(sub->size() == members);
  REQUIRE(std::string(sub->backend()) == "nccl");
  std::vector<float> ones(7, 1.0f), want(7, static_cast<float>(members));
  auto d = device_copy(ones);
  sub->all_reduce(d.data(), d.data(), 7, DataType::kFloat32, ReduceOp::kSum);
  require_equal(d.to_host(), want, "all_reduce in the color " + std::to_string(color) + " group");
  sub->barrier();
}

TEST_CASE("nccl refuses wrong arguments with a clear error, and stays usable", "[nccl]") {
  auto& c = nccl_world();
  std::vector<float> host(7, 1.0f);
  REQUIRE_THROWS_WITH(c.all_reduce(host.data(), host.data(), 7, DataType::kFloat32, ReduceOp::kSum),
                      Contains("host pointer") && Contains("GPU memory"));
  REQUIRE_THROWS_WITH(c.broadcast(host.data(), 7, DataType::kFloat32, 0), Contains("host pointer"));
  REQUIRE_THROWS_WITH(c.isend(host.data(), 7, DataType::kFloat32, 0), Contains("host pointer"));
  DeviceBuffer<float> d(16, MemCategory::kComm, nullptr);
  REQUIRE_THROWS_WITH(c.all_reduce(d.data(), d.data() + 1, 7, DataType::kFloat32, ReduceOp::kSum), Contains("overlap"));
  REQUIRE_THROWS_WITH(c.isend(d.data(), 7, DataType::kFloat32, c.size()), Contains("not a rank"));
  if (c.size() > 1) {
    // A count that differs across ranks: NCCL would hang or mix data; the check names both.
    const std::size_t count = 7 + static_cast<std::size_t>(c.rank());
    REQUIRE_THROWS_WITH(c.all_reduce(d.data(), d.data(), count, DataType::kFloat32, ReduceOp::kSum),
                        Contains("the ranks disagree") && Contains("count 7") && Contains("count 8"));
  }
  // None of these reached NCCL: the communicator still works.
  std::vector<float> ones(7, 1.0f), want(7, static_cast<float>(c.size()));
  auto d_ones = device_copy(ones);
  c.all_reduce(d_ones.data(), d_ones.data(), 7, DataType::kFloat32, ReduceOp::kSum);
  require_equal(d_ones.to_host(), want, "all_reduce after the refused calls");
}

TEST_CASE("nccl reduce_scatter_v and all_gather_v move pieces of any size, empty ones too", "[nccl]") {
  // ZeRO's bucketed collectives: each rank's piece of a range cut by the shards' boundaries, so
  // pieces differ in size and some are empty.
  auto& c = nccl_world();
  const int n = c.size(), r = c.rank();
  const std::size_t whole = 1001;
  for (const Pieces& pieces : {Pieces::even(whole, n), Pieces::of_range(c.partition(whole), 0, whole / 3),
                               Pieces::of_range(c.partition(whole), whole / 3, whole)}) {
    const std::size_t count = pieces.count(), mine = pieces.size(r), at = pieces.offset(r);
    INFO(where(c) << ": " << count << " elements, this rank's piece [" << at << ", " << at + mine << ")");
    std::vector<float> send(count), sum(count);
    for (std::size_t i = 0; i < count; ++i) {
      send[i] = static_cast<float>(r + 1) * pattern(i, 11);
      sum[i] = static_cast<float>(n * (n + 1) / 2) * pattern(i, 11);
    }
    auto d_send = device_copy(send);
    DeviceBuffer<float> d_piece(std::max<std::size_t>(mine, 1), MemCategory::kComm, nullptr);
    c.reduce_scatter_v(d_send.data(), d_piece.data(), pieces, DataType::kFloat32, ReduceOp::kSum);
    std::vector<float> got = d_piece.to_host();
    got.resize(mine);
    require_equal(got, sum, "reduce_scatter_v", at);
    // Every rank's piece, rank b's values (b + 1) pattern(i), gathered into place.
    std::vector<float> piece(std::max<std::size_t>(mine, 1)), want(count);
    for (std::size_t i = 0; i < mine; ++i) piece[i] = static_cast<float>(r + 1) * pattern(at + i, 13);
    for (int b = 0; b < n; ++b)
      for (std::size_t i = 0; i < pieces.size(b); ++i)
        want[pieces.offset(b) + i] = static_cast<float>(b + 1) * pattern(pieces.offset(b) + i, 13);
    auto d_mine = device_copy(piece);
    DeviceBuffer<float> d_all(count, MemCategory::kComm, nullptr);
    c.all_gather_v(d_mine.data(), d_all.data(), pieces, DataType::kFloat32);
    require_equal(d_all.to_host(), want, "all_gather_v");
  }
}

TEST_CASE("nccl refuses host memory on either side of each call, bad overlaps and disagreeing ranks, by name",
          "[nccl]") {
  auto& c = nccl_world();
  const int n = c.size(), r = c.rank();
  const std::size_t count = 8 * static_cast<std::size_t>(n);
  std::vector<float> host(count, 1.0f);
  DeviceBuffer<float> d(count, MemCategory::kComm, nullptr), e(count, MemCategory::kComm, nullptr);
  const Pieces pieces = Pieces::even(count, n);
  const auto host_refused = [&](const std::function<void()>& call, const std::string& which) {
    INFO(where(c) << ": " << which);
    CHECK_THROWS_WITH(call(), Contains("host pointer") && Contains("GPU memory"));
  };
  const auto sum = ReduceOp::kSum;
  const auto f32 = DataType::kFloat32;
  float* h = host.data();
  host_refused([&] { c.all_reduce(h, d.data(), count, f32, sum); }, "all_reduce, host send");
  host_refused([&] { c.all_reduce(d.data(), h, count, f32, sum); }, "all_reduce, host recv");
  host_refused([&] { c.irecv(h, count, f32, 0); }, "irecv");
  host_refused([&] { c.reduce_scatter(h, e.data(), count, f32, sum); }, "reduce_scatter, host send");
  host_refused([&] { c.reduce_scatter(d.data(), h, count, f32, sum); }, "reduce_scatter, host recv");
  host_refused([&] { c.all_gather(h, e.data(), count, f32); }, "all_gather, host send");
  host_refused([&] { c.all_gather(d.data(), h, count, f32); }, "all_gather, host recv");
  host_refused([&] { c.reduce_scatter_v(h, e.data(), pieces, f32, sum); }, "reduce_scatter_v, host send");
  host_refused([&] { c.reduce_scatter_v(d.data(), h, pieces, f32, sum); }, "reduce_scatter_v, host recv");
  host_refused([&] { c.all_gather_v(h, e.data(), pieces, f32); }, "all_gather_v, host send");
  host_refused([&] { c.all_gather_v(d.data(), h, pieces, f32); }, "all_gather_v, host recv");
  // Overlaps other than the in-place forms: the result would depend on NCCL's order.
  const BlockPartition p = c.partition(count);
  CHECK_THROWS_WITH(c.reduce_scatter(d.data(), d.data() + p.offset(r) + 1, count, f32, sum), Contains("overlap"));
  CHECK_THROWS_WITH(c.all_gather(d.data() + p.offset(r) + 1, d.data(), count, f32), Contains("overlap"));
  // A buffer on another GPU of this machine (where there is one).
  if (cuda::device_count() > 1) {
    const int mine = cuda::current_device(), other = (mine + 1) % cuda::device_count();
    {
      SCALELAB_CUDA_CHECK(cudaSetDevice(other));
      DeviceBuffer<float> elsewhere(count, MemCategory::kComm, nullptr);
      SCALELAB_CUDA_CHECK(cudaSetDevice(mine));
      CHECK_THROWS_WITH(c.all_reduce(elsewhere.data(), elsewhere.data(), count, f32, sum),
                        Contains("the buffer is on GPU " + std::to_string(other)));
      SCALELAB_CUDA_CHECK(cudaSetDevice(other));  // freed where it was made
    }
    SCALELAB_CUDA_CHECK(cudaSetDevice(mine));
  }
  if (n > 1) {
    // Ranks that disagree: each collective's check names both calls, on every rank.
    const std::size_t mismatched = count - static_cast<std::size_t>(n) * static_cast<std::size_t>(r);
    CHECK_THROWS_WITH(c.reduce_scatter(d.data(), e.data(), mismatched, f32, sum), Contains("the ranks disagree"));
    CHECK_THROWS_WITH(c.all_gather(d.data(), e.data(), mismatched, f32), Contains("the ranks disagree"));
    CHECK_THROWS_WITH(c.broadcast(d.data(), count, f32, r), Contains("the ranks disagree") && Contains("root"));
    const Pieces uneven = Pieces::even(mismatched, n);
    CHECK_THROWS_WITH(c.reduce_scatter_v(d.data(), e.data(), uneven, f32, sum), Contains("the ranks disagree"));
    CHECK_THROWS_WITH(c.all_gather_v(d.data(), e.data(), uneven, f32), Contains("the ranks disagree"));
  }
  // None of these reached NCCL: the communicator still works.
  std::vector<float> ones(7, 1.0f), want(7, static_cast<float>(n));
  auto d_ones = device_copy(ones);
  c.all_reduce(d_ones.data(), d_ones.data(), 7, f32, sum);
  require_equal(d_ones.to_host(), want, "all_reduce after the refused calls");
}

TEST_CASE("nccl refuses a GPU that is not there, or two ranks on one GPU, on every rank", "[nccl][refusal]") {
  Communicator& host = test_world();
  cuda::NcclOptions options = nccl_test_options();
  if (host.size() == 1) {
    options.device = cuda::device_count();  // one past the last
    REQUIRE_THROWS_AS(cuda::make_nccl_communicator(host, options), ConfigError);
    REQUIRE_THROWS_WITH(cuda::make_nccl_communicator(host, options), Contains("asked for GPU"));
  } else {
    options.device = 0;  // every rank on GPU 0
    REQUIRE_THROWS_AS(cuda::make_nccl_communicator(host, options), ConfigError);
    REQUIRE_THROWS_WITH(cuda::make_nccl_communicator(host, options),
                        Contains("use the MPI backend with host staging, or one rank per GPU"));
  }
}

TEST_CASE("a pipeline's messages over NCCL, posted as the executor posts them, arrive whole and in order",
          "[nccl][pipeline]") {
  // The lists --backend nccl runs (schedule/rendezvous.hpp: interleaved with m > p would hang as
  // built, so its stuck sends are delayed) replayed on real NCCL with messages only: each send is
  // an isend that is not waited on until the step's end, each receive a blocking recv, exactly as
  // the pipeline executor posts them. Every message carries its (micro-batch, boundary, kind) in
  // its values, so a message taken for another (NCCL has no tags) is caught, not just a hang.
  auto& c = nccl_world();
  const int p = c.size(), r = c.rank();
  if (p < 2) return;  // a pipeline needs two ranks
  const std::size_t count = 257;
  const auto code = [](int micro_batch, int to_stage, bool activation) {
    return static_cast<float>(1000 * micro_batch + 10 * to_stage + (activation ? 1 : 2));
  };
  for (const std::string schedule : {"1f1b", "afab", "interleaved:2"}) {
    const PipelineShape shape = parse_pipeline_schedule(schedule, p, 2 * p);
    const RankSchedule list = rendezvous_schedules(shape)[r];
    std::vector<DeviceBuffer<float>> outgoing;
    std::vector<Request> sends;
    outgoing.reserve(list.size());
    int received = 0;
    for (const Action& a : list) {
      const bool send = a.kind == ActionKind::kSendActivation || a.kind == ActionKind::kSendGrad;
      const bool recv = a.kind == ActionKind::kRecvActivation || a.kind == ActionKind::kRecvGrad;
      if (!send && !recv) continue;  // compute: no message, and no peer
      const int s = model_stage(shape, r, a.chunk), peer = action_peer(shape, r, a);
      if (send) {
        const bool activation = a.kind == ActionKind::kSendActivation;
        outgoing.push_back(
            device_copy(std::vector<float>(count, code(a.micro_batch, activation ? s + 1 : s - 1, activation))));
        sends.push_back(c.isend(outgoing.back().data(), count, DataType::kFloat32, peer));
      } else {
        const bool activation = a.kind == ActionKind::kRecvActivation;
        DeviceBuffer<float> in(count, MemCategory::kComm, nullptr);
        c.recv(in.data(), count, DataType::kFloat32, peer);
        require_equal(in.to_host(), std::vector<float>(count, code(a.micro_batch, s, activation)),
                      schedule + ": rank " + std::to_string(r) + "'s " + describe_action(a));
        ++received;
      }
    }
    c.wait_all(sends);
    INFO(where(c) << ", " << schedule << ": " << received << " messages received, " << sends.size() << " sent");
    CHECK(received > 0);
  }
}
