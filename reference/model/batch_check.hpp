// Checks of a batch before it reaches a model (every stage; the CPU, mixed-precision and GPU
// models and the trainer's data). Token ids outside the vocabulary would index past the
// embedding table, so they are refused with a message naming the first bad id and its position.
// The scan builds no strings: a message is only made on failure, because forward runs it on
// every batch.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/config.hpp"

namespace scalelab {

// The first position in ids[0, n) whose id is outside [0, vocab_size), or n when all are inside.
std::size_t first_id_outside(const int* ids, std::size_t n, int vocab_size);
std::size_t first_id_outside(const std::uint16_t* ids, std::size_t n, int vocab_size);

// A model's check of one input array (setting "tokens" or "targets"): throws ConfigError
// "<setting>: id <id> at position <i> is outside the vocabulary [0, V); tokenize with a
// vocabulary that matches the model".
void check_token_ids(const int* ids, std::size_t n, int vocab_size, const char* setting);

// A model's whole check of a forward's arguments: B >= 1, 1 <= T <= max_seq_len (ConfigError
// naming "batch" or "seq_len"), then check_token_ids on tokens and targets where not null (a
// pipeline slice without the embeddings has no tokens, one without the head no targets).
void check_batch(const GPTConfig& config, const int* tokens, const int* targets, int B, int T);

// The trainer's check of a whole token stream against the config: throws ConfigError "data:
// token <id> at position <i> is outside the vocabulary of config '<name>' (V=<V>); use a data
// file tokenized for this vocabulary (text files give bytes: V >= 256)".
void check_data_tokens(const std::uint16_t* tokens, std::size_t n, const GPTConfig& config);

}  // namespace scalelab
