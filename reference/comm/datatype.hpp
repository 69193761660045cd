// Element types, reduction operators and memory spaces of the Communicator interface (stage 04).
// Collectives take type-erased buffers (void*, count, DataType), as MPI and NCCL do, so one
// interface fits every backend; dtype_of<T>() names the DataType of a C++ type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace scalelab {

// kBFloat16 and kFloat16 are 2-byte IEEE-style floats (stage 03's bf16 and fp16, stored as
// uint16_t bits): a reduction adds (or compares) in fp32 and rounds each result to the nearest
// representable value, ties to even, as NCCL does, so a sum over d ranks rounds d-1 times.
enum class DataType : int { kUInt8, kInt32, kInt64, kFloat32, kFloat64, kBFloat16, kFloat16 };
enum class ReduceOp : int { kSum, kMax, kMin };
// Where a backend's buffers live: MPI and the one-rank communicator take host memory, NCCL
// device memory. Callers that own both (DDP on a GPU) ask before choosing a buffer.
enum class MemorySpace : int { kHost, kDevice };

std::size_t dtype_size(DataType t);
// The names nccl-tests prints in its "type" and "redop" columns: float, double, int32, ...
const char* dtype_name(DataType t);
const char* reduce_op_name(ReduceOp op);

template <typename T>
constexpr DataType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DataType::kFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::kFloat64;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DataType::kInt32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DataType::kInt64;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DataType::kUInt8;
  else
    static_assert(!sizeof(T), "no DataType for this element type");
}

// inout[i] = op(inout[i], in[i]) for i < count, on host memory: the one-rank backend's and the
// ring's local reduction, and the MPI backend's for the 16-bit types. Elementwise, so its result
// does not depend on how count is chunked.
void reduce_host(void* inout, const void* in, std::size_t count, DataType t, ReduceOp op);

}  // namespace scalelab
