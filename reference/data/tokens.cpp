// Reading and writing token data.
#include "data/tokens.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "io/atomic_file.hpp"

namespace scalelab {

std::vector<std::uint16_t> tokenize_bytes(const std::string& text) {
  std::vector<std::uint16_t> out(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) out[i] = static_cast<unsigned char>(text[i]);
  return out;
}

std::string detokenize_bytes(const std::vector<std::uint16_t>& tokens) {
  std::string s(tokens.size(), '\0');
  for (std::size_t i = 0; i < tokens.size(); ++i) s[i] = static_cast<char>(tokens[i] & 0xFF);
  return s;
}

static std::string read_file_bytes(const std::string& path, const std::string& setting) {
  std::ifstream in(path, std::ios::binary);
  require(static_cast<bool>(in), setting, "cannot open '" + path + "'", "check the path exists and is readable");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_token_shard(const std::string& path, const std::vector<std::uint16_t>& tokens) {
  std::string bytes(256 * sizeof(std::int32_t) + tokens.size() * sizeof(std::uint16_t), '\0');
  std::int32_t header[256] = {};
  header[0] = kShardMagic;
  header[1] = kShardVersion;
  header[2] = static_cast<std::int32_t>(tokens.size());
  std::memcpy(bytes.data(), header, sizeof header);
  if (!tokens.empty()) std::memcpy(bytes.data() + sizeof header, tokens.data(), tokens.size() * 2);
  write_file_atomically(path, bytes);
}

static std::vector<std::uint16_t> parse_shard(const std::string& bytes, const std::string& path) {
  const std::string what = "data file '" + path + "'";
  require(bytes.size() >= 1024, "data", what + " is shorter than a shard header (1024 bytes)", "regenerate the shard");
  std::int32_t header[256];
  std::memcpy(header, bytes.data(), sizeof header);
  require(header[1] == kShardVersion, "data",
          what + " has shard version " + std::to_string(header[1]) + ", expected " + std::to_string(kShardVersion),
          "regenerate the shard with this version");
  const long long n = header[2];
  const long long expect = 1024 + 2 * n;
  require(n >= 0 && static_cast<long long>(bytes.size()) == expect, "data",
          what + " header says " + std::to_string(n) + " tokens (" + std::to_string(expect) +
              " bytes) but the file has " + std::to_string(bytes.size()) + " bytes",
          "the shard is truncated or corrupt; regenerate it");
  std::vector<std::uint16_t> tokens(static_cast<std::size_t>(n));
  if (n) std::memcpy(tokens.data(), bytes.data() + 1024, static_cast<std::size_t>(n) * 2);
  return tokens;
}

static bool has_shard_magic(const std::string& bytes) {
  std::int32_t magic = 0;
  if (bytes.size() < sizeof magic) return false;
  std::memcpy(&magic, bytes.data(), sizeof magic);
  return magic == kShardMagic;
}

std::vector<std::uint16_t> read_token_shard(const std::string& path) {
  const std::string bytes = read_file_bytes(path, "data");
  require(has_shard_magic(bytes), "data", "'" + path + "' does not start with the shard magic 20240520",
          "pass a shard written by `scalelab tokenize`, or a text file");
  return parse_shard(bytes, path);
}

std::vector<std::uint16_t> load_tokens(const std::string& path) {
  require(std::filesystem::is_regular_file(path), "data", "no such file '" + path + "'",
          "pass --data with an existing text file or token shard, or leave it out for the default corpus");
  const std::string bytes = read_file_bytes(path, "data");
  std::vector<std::uint16_t> tokens = has_shard_magic(bytes) ? parse_shard(bytes, path) : tokenize_bytes(bytes);
  require(!tokens.empty(), "data", "'" + path + "' holds no tokens", "pass a non-empty file");
  return tokens;
}

std::vector<std::string> default_corpus_files() {
  std::vector<std::string> files;
  const std::filesystem::path dir = "/usr/share/common-licenses";
  if (std::filesystem::is_directory(dir))
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.is_regular_file()) files.push_back(e.path().string());  // skips the symlinks (GPL -> GPL-3)
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::uint16_t> load_default_corpus() {
  std::string text;
  for (const auto& f : default_corpus_files()) text += read_file_bytes(f, "data") + "\n";
  require(!text.empty(), "data", "the default corpus /usr/share/common-licenses is missing",
          "pass --data with a text file");
  return tokenize_bytes(text);
}

}  // namespace scalelab
