// Stage 03's half formats as the communicator's element types: what a collective of half
// tensors is told it moves (comm/datatype.hpp sums bf16 and fp16 in fp32 and rounds each sum).
#pragma once

#include <optional>

#include "comm/datatype.hpp"
#include "precision/half.hpp"

namespace scalelab {

inline DataType half_data_type(HalfFormat format) {
  return format == HalfFormat::kBF16 ? DataType::kBFloat16 : DataType::kFloat16;
}

// The other way: the half format of a bf16 or fp16 element type; none for any other type.
inline std::optional<HalfFormat> half_format_of(DataType type) {
  if (type == DataType::kBFloat16) return HalfFormat::kBF16;
  if (type == DataType::kFloat16) return HalfFormat::kFP16;
  return std::nullopt;
}

}  // namespace scalelab
