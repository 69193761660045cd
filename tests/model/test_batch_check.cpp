// The batch checks every model runs before forward (model/batch_check.hpp): the first bad id
// and its position in the message, and the trainer's data check with its own wording.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "model/batch_check.hpp"

using namespace scalelab;
using Catch::Contains;

TEST_CASE("first_id_outside: the first position outside [0, V), n when all are inside") {
  const std::vector<int> ids = {0, 63, 5, 64, -1};
  CHECK(first_id_outside(ids.data(), 3, 64) == 3);
  CHECK(first_id_outside(ids.data(), ids.size(), 64) == 3);
  CHECK(first_id_outside(ids.data() + 4, 1, 64) == 0);  // negative
  const std::vector<std::uint16_t> data = {1, 2, 300};
  CHECK(first_id_outside(data.data(), 3, 256) == 2);
  CHECK(first_id_outside(data.data(), 3, 65536) == 3);
}

TEST_CASE("check_batch: shape and ids, with the messages the models give") {
  GPTConfig c = gpt_config_by_name("tiny");
  std::vector<int> tokens(2 * 8, 1), targets(2 * 8, 2);
  CHECK_NOTHROW(check_batch(c, tokens.data(), targets.data(), 2, 8));
  tokens[5] = 64;
  CHECK_THROWS_WITH(check_batch(c, tokens.data(), targets.data(), 2, 8),
                    Contains("tokens: id 64 at position 5 is outside the vocabulary [0, 64); tokenize with a "
                             "vocabulary that matches the model"));
  CHECK_NOTHROW(check_batch(c, nullptr, targets.data(), 2, 8));  // a slice without the embeddings
  targets[9] = -3;
  CHECK_THROWS_WITH(check_batch(c, nullptr, targets.data(), 2, 8),
                    Contains("targets: id -3 at position 9 is outside the vocabulary [0, 64)"));
  CHECK_THROWS_WITH(check_batch(c, nullptr, nullptr, 0, 8), Contains("batch: must be at least 1, got 0"));
  CHECK_THROWS_WITH(check_batch(c, nullptr, nullptr, 1, 17),
                    Contains("seq_len: must be in [1, 16] for config 'tiny', got 17"));
}

TEST_CASE("check_data_tokens: the trainer's message names the config and the fix") {
  const GPTConfig c = gpt_config_by_name("tiny");
  const std::vector<std::uint16_t> data = {1, 2, 63, 64};
  CHECK_NOTHROW(check_data_tokens(data.data(), 3, c));
  CHECK_THROWS_WITH(check_data_tokens(data.data(), data.size(), c),
                    Contains("data: token 64 at position 3 is outside the vocabulary of config 'tiny' (V=64); use a "
                             "data file tokenized for this vocabulary (text files give bytes: V >= 256)"));
}
