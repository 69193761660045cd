// Stage 03's half formats as the communicator's element types: what a collective of half
// tensors is told it moves (comm/datatype.hpp sums bf16 and fp16 in fp32 and rounds each sum).
#pragma once

#include "comm/datatype.hpp"
#include "precision/half.hpp"

namespace scalelab {

inline DataType half_data_type(HalfFormat format) {
  return format == HalfFormat::kBF16 ? DataType::kBFloat16 : DataType::kFloat16;
}

}  // namespace scalelab
