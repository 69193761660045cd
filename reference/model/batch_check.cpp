// The batch and token-id checks of model/batch_check.hpp.
#include "model/batch_check.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace scalelab {

namespace {

template <typename Id>
std::size_t first_outside(const Id* ids, std::size_t n, int vocab_size) {
  const long long V = vocab_size;  // wide enough for int and uint16 ids alike
  return static_cast<std::size_t>(
      std::find_if(ids, ids + n,
                   [V](Id t) { return static_cast<long long>(t) < 0 || static_cast<long long>(t) >= V; }) -
      ids);
}

}  // namespace

std::size_t first_id_outside(const int* ids, std::size_t n, int vocab_size) {
  return first_outside(ids, n, vocab_size);
}

std::size_t first_id_outside(const std::uint16_t* ids, std::size_t n, int vocab_size) {
  return first_outside(ids, n, vocab_size);
}

void check_token_ids(const int* ids, std::size_t n, int vocab_size, const char* setting) {
  const std::size_t i = first_id_outside(ids, n, vocab_size);
  if (i == n) return;
  throw ConfigError(std::string(setting) + ": id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                    " is outside the vocabulary [0, " + std::to_string(vocab_size) +
                    "); tokenize with a vocabulary that matches the model");
}

void check_batch(const GPTConfig& c, const int* tokens, const int* targets, int B, int T) {
  require(B >= 1, "batch", "must be at least 1, got " + std::to_string(B), "use a positive batch size");
  require(T >= 1 && T <= c.max_seq_len, "seq_len",
          "must be in [1, " + std::to_string(c.max_seq_len) + "] for config '" + c.name + "', got " + std::to_string(T),
          "use a sequence length no longer than the model's max_seq_len");
  const std::size_t BT = static_cast<std::size_t>(B) * T;
  if (tokens) check_token_ids(tokens, BT, c.vocab_size, "tokens");
  if (targets) check_token_ids(targets, BT, c.vocab_size, "targets");
}

void check_data_tokens(const std::uint16_t* tokens, std::size_t n, const GPTConfig& config) {
  const std::size_t i = first_id_outside(tokens, n, config.vocab_size);
  if (i == n) return;
  throw ConfigError("data: token " + std::to_string(tokens[i]) + " at position " + std::to_string(i) +
                    " is outside the vocabulary of config '" + config.name +
                    "' (V=" + std::to_string(config.vocab_size) +
                    "); use a data file tokenized for this vocabulary (text files give bytes: V >= 256)");
}

}  // namespace scalelab
