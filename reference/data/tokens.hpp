// Token data: a byte-level tokenizer over any text file (token = byte, V = 256), llm.c's token
// shard format (a 256 x int32 header: magic 20240520, version 1, token count; then uint16
// tokens), and the default corpus that every Debian machine has offline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace scalelab {

constexpr std::int32_t kShardMagic = 20240520;
constexpr std::int32_t kShardVersion = 1;

std::vector<std::uint16_t> tokenize_bytes(const std::string& text);
std::string detokenize_bytes(const std::vector<std::uint16_t>& tokens);

// Writes tokens as an llm.c shard (atomically: temporary file, then rename).
void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens);
// Reads a shard; throws ConfigError naming the file for a bad magic, version or size.
std::vector<std::uint16_t> read_token_shard(const std::string& path);

// Loads a data file: an llm.c shard when it starts with the shard magic, else bytes of text.
// Throws ConfigError when the file is missing or empty.
std::vector<std::uint16_t> load_tokens(const std::string& path);

// The files whose concatenation is the default corpus (Debian's /usr/share/common-licenses,
// about 260 KB of English text, present on every Debian machine).
std::vector<std::string> default_corpus_files();
std::vector<std::uint16_t> load_default_corpus();

}  // namespace scalelab
