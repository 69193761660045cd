// Stage 08: the GPT's saved activations for an attention kind. A file of its own because
// model/gpt.cpp holds lab 00's regions: a student's gpt.cpp must still link, so no function is
// added there (its activation_elements overloads call this one with naive attention).
#include "model/gpt.hpp"

#include "model/attention_block.hpp"

namespace scalelab {

std::size_t activation_elements(const GPTConfig& c, int B, int T, const CheckpointPolicy& policy,
                                const ModelSlice& slice, AttentionKind attention) {
  const std::size_t BT = static_cast<std::size_t>(B) * T, BTC = BT * c.channels;
  const std::size_t L = slice.count(c);
  // 16 BTC + 4 BT + (NH B T T for naive, NH B T for chunked and flash)
  const std::size_t block = block_act_elements(B, T, c.channels, c.num_heads, attention);
  const std::size_t att = static_cast<std::size_t>(attention_activation_elems(attention, B, c.num_heads, T));
  // The blocks' input (encoded), then with the head: lnf + stats, probs, losses.
  const std::size_t outside = BTC + (slice.head ? BTC + 3 * BT + BT * c.vocab_size : 0);
  switch (policy.kind) {
    case CheckpointPolicy::Kind::kNone: return outside + L * block;
    // (naive only: check_attention_policy refuses selective with chunked and flash)
    case CheckpointPolicy::Kind::kSelective: return outside + L * (block - att) + att;
    case CheckpointPolicy::Kind::kEveryK:
    case CheckpointPolicy::Kind::kSqrtL: {
      const std::size_t k = activation_slots(policy, static_cast<int>(L));
      const std::size_t segments = segment_count(policy, static_cast<int>(L));
      return outside + (segments - 1) * BTC + BTC + k * block;  // boundaries, final output, one segment
    }
  }
  return 0;
}

}  // namespace scalelab
