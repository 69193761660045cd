// Stage 05's device messages (kernels/dist/device_messages.hpp): the pool reuses blocks by size
// and counts them as communication memory, a message made of device values holds exactly their
// bytes (bf16 as bf16: nothing widened), and a chunk refuses a host message or one of another
// size or type with a message naming both.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/device_buffer.hpp"
#include "kernels/core/dtype.hpp"
#include "kernels/dist/device_messages.hpp"

namespace {

using namespace scalelab;
using scalelab::cuda::bf16;
using scalelab::cuda::DeviceBuffer;
using scalelab::cuda::DeviceMessagePool;

TEST_CASE("the message pool reuses blocks by size and counts them as communication memory", "[gpu][messages]") {
  MemoryTracker tracker;
  DeviceMessagePool pool(&tracker);
  const MessagePlace place{nullptr, &pool};
  void* first = nullptr;
  {
    Message a(1000, DataType::kFloat32, place), b(500, DataType::kBFloat16, place);
    REQUIRE(a.on_device());
    first = a.data();
    CHECK(tracker.current(MemCategory::kComm) == 1000 * 4 + 500 * 2);
  }
  // Both blocks went back to the pool: still counted, and the next message of a size gets one.
  CHECK(tracker.current(MemCategory::kComm) == 1000 * 4 + 500 * 2);
  Message again(1000, DataType::kFloat32, place);
  CHECK(again.data() == first);
  CHECK(tracker.current(MemCategory::kComm) == 1000 * 4 + 500 * 2);
  Message other(1000, DataType::kFloat32, place);  // a second live one of that size: a new block
  CHECK(other.data() != first);
  CHECK(tracker.peak(MemCategory::kComm) == 2 * 1000 * 4 + 500 * 2);
}

TEST_CASE("a message of device values holds their bytes; a chunk takes only its own size and type", "[gpu][messages]") {
  MemoryTracker tracker;
  DeviceMessagePool pool(&tracker);
  const MessagePlace place{nullptr, &pool};
  constexpr std::size_t n = 777;
  std::vector<std::uint16_t> host(n);
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<std::uint16_t>(0x3f80 + (i * 37) % 512);  // bf16 bits
  DeviceBuffer<bf16> values(n, MemCategory::kActivations, &tracker);
  SCALELAB_CUDA_CHECK(cudaMemcpy(values.data(), host.data(), n * 2, cudaMemcpyHostToDevice));

  Message m = cuda::message_of<bf16>(values.data(), n, place, cudaStreamLegacy);
  CHECK(m.type() == DataType::kBFloat16);
  CHECK(m.bytes() == n * 2);
  std::vector<std::uint16_t> back(n);
  SCALELAB_CUDA_CHECK(cudaMemcpy(back.data(), m.data(), n * 2, cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(back.data(), host.data(), n * 2) == 0);
  CHECK(cuda::message_input<bf16>(m, n, "input") == m.data());

  const auto refused = [](auto&& call) {
    try {
      call();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string size = refused([&] { cuda::message_input<bf16>(m, n + 1, "input activations"); });
  CHECK(size.find("the input activations message holds 777 elements of bfloat16, the chunk expects 778 of bfloat16") !=
        std::string::npos);
  const std::string type = refused([&] { cuda::message_input<float>(m, n, "input activations"); });
  CHECK(type.find("expects 777 of float") != std::string::npos);
  Message on_host(n, DataType::kBFloat16, MessagePlace{&tracker, nullptr});
  const std::string host_message = refused([&] { cuda::message_input<bf16>(on_host, n, "input activations"); });
  CHECK(host_message.find("takes its input activations as a device message") != std::string::npos);
  const std::string host_place = refused([&] {
    cuda::message_of<bf16>(values.data(), n, MessagePlace{&tracker, nullptr}, cudaStreamLegacy);
  });
  CHECK(host_place.find("sends device messages") != std::string::npos);
}

}  // namespace
