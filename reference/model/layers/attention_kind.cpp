// Parsing and naming attention kinds, and what each saves for backward.
#include "model/layers/attention_kind.hpp"

#include "core/error.hpp"

namespace scalelab {

AttentionKind parse_attention_kind(const std::string& text) {
  if (text == "naive") return AttentionKind::kNaive;
  if (text == "chunked") return AttentionKind::kChunked;
  if (text == "flash") return AttentionKind::kFlash;
  throw ConfigError("--attention: unknown attention '" + text + "'; use naive, chunked or flash");
}

const char* attention_kind_name(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::kNaive: return "naive";
    case AttentionKind::kChunked: return "chunked";
    case AttentionKind::kFlash: return "flash";
  }
  return "?";
}

std::int64_t attention_activation_elems(AttentionKind kind, std::int64_t B, std::int64_t NH, std::int64_t T) {
  // The T x T matrix is what the memory-efficient kinds avoid: they keep m + log(l) per query and
  // recompute the probabilities in backward (attention_chunked.hpp, attention_flash.hpp).
  if (kind == AttentionKind::kNaive) return B * NH * T * T;
  return B * NH * T;
}

}  // namespace scalelab
