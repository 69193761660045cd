// Which attention implementation a run uses (stage 08), chosen with --attention at run time so the
// three can be compared side by side in one binary:
//   naive    attention.hpp: the (B,NH,T,T) probabilities are formed and saved for backward
//   chunked  attention_chunked.hpp: online softmax over key chunks per query; saves lse (B,NH,T)
//   flash    attention_flash.hpp: the same over Br x Bc tiles through BLAS; saves lse (B,NH,T)
#pragma once

#include <cstdint>
#include <string>

namespace scalelab {

enum class AttentionKind { kNaive, kChunked, kFlash };

// "naive", "chunked" or "flash"; anything else throws a ConfigError naming --attention and the
// accepted values.
AttentionKind parse_attention_kind(const std::string& text);
const char* attention_kind_name(AttentionKind kind);

// Elements the attention of one block saves for backward beyond its input qkv and its output out:
// naive B*NH*T*T (the probabilities), chunked and flash B*NH*T (one lse per query and head).
std::int64_t attention_activation_elems(AttentionKind kind, std::int64_t B, std::int64_t NH, std::int64_t T);

}  // namespace scalelab
