// A pipeline chunk's messages when it computes on the CPU: host memory, read as fp32 (stage 05).
#include "dist/pipeline_chunk.hpp"

namespace scalelab {

namespace {

void check_host(const MessagePlace& place) {
  SCALELAB_CHECK(!place.on_device(),
                 "a pipeline chunk computing on the CPU sends host messages, but the pipeline's messages are in device "
                 "memory");
}

}  // namespace

float PipelineChunk::forward_message(const int* tokens, Message& input, const int* targets, int B, int T) {
  return forward_slice(tokens, input.as_float(), targets, B, T);
}

void PipelineChunk::backward_message(Message& doutput, float loss_scale) {
  backward_slice(doutput.as_float(), loss_scale);
}

Message PipelineChunk::output_message(std::size_t n, const MessagePlace& place) const {
  check_host(place);
  return Message::of(output(), n, boundary_type(), place.host);
}

Message PipelineChunk::input_grad_message(std::size_t n, const MessagePlace& place) const {
  check_host(place);
  return Message::of(input_grad(), n, boundary_type(), place.host);
}

}  // namespace scalelab
