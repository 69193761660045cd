// The readers of files a user hands us (weights, training checkpoints, token shards), fed
// mutated copies of valid files: truncations at every interesting length, huge and bad lengths
// in headers, bad offsets, wrong dtypes and shapes, and random byte flips. Each reader must
// either accept a file (a flip in a float is still a file) or refuse it with one ConfigError
// naming the file; anything else (another exception type, a crash or an out-of-bounds read, which
// the sanitizer preset turns into a failure) is a bug. Mutations are drawn from a fixed seed, so
// a failure repeats; the corpus is generated here, small, and runs in seconds.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "data/tokens.hpp"
#include "io/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/params.hpp"
#include "temp_files.hpp"

using namespace scalelab;
using namespace scalelab_test;

namespace {

using Reader = std::function<void(const std::string& path)>;

// Runs reader on bytes written to path; returns "" if it accepted them or refused them properly,
// else what went wrong. must_refuse: a file that cannot be valid (truncated, a wrong length), so
// accepting it is wrong too.
std::string verdict(const Reader& reader, const std::string& path, const std::string& bytes, bool must_refuse = false) {
  write_bytes(path, bytes);
  try {
    reader(path);
    return must_refuse ? "accepted, but the file cannot be valid" : "";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    if (what.find(path) == std::string::npos) return "a ConfigError that does not name the file: " + what;
    if (what.find('\n') != std::string::npos) return "a message of several lines: " + what;
    return "";
  } catch (const std::exception& e) {
    return std::string("an exception that is not a ConfigError: ") + e.what();
  }
}

// Every mutation of `valid`: a name for the report, and the bytes.
struct Mutant {
  std::string name;
  std::string bytes;
};

void put_u64(std::string& s, std::size_t at, std::uint64_t v) {
  if (s.size() >= at + 8) std::memcpy(s.data() + at, &v, 8);
}
void put_i32(std::string& s, std::size_t at, std::int32_t v) {
  if (s.size() >= at + 4) std::memcpy(s.data() + at, &v, 4);
}

std::vector<Mutant> generic_mutants(const std::string& valid, std::uint64_t seed) {
  std::vector<Mutant> out;
  // Truncations: the first bytes, around the header, and spread over the file.
  std::vector<std::size_t> cuts = {0, 1, 4, 7, 8, 9, 15, 16, 100, 1023, 1024, 1025};
  for (int i = 1; i < 24; ++i) cuts.push_back(valid.size() * static_cast<std::size_t>(i) / 24);
  cuts.push_back(valid.size() - 1);
  for (std::size_t n : cuts)
    if (n < valid.size()) out.push_back({"truncated to " + std::to_string(n) + " bytes", valid.substr(0, n)});
  out.push_back({"a byte appended", valid + "x"});
  // Random flips, most of them in the first 1 KiB, where the headers are.
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 150; ++i) {
    std::string m = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const std::size_t span = i % 3 == 0 ? m.size() : std::min<std::size_t>(m.size(), 1024);
      m[rng() % span] = static_cast<char>(rng());
    }
    out.push_back({"random flips #" + std::to_string(i), m});
  }
  return out;
}

// The safetensors header: its length field and its JSON text.
std::string header_json(const std::string& file) {
  std::uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  return file.substr(8, n);
}

// The file with its JSON header replaced (the length field follows).
std::string with_header(const std::string& file, const std::string& json) {
  const std::string old = header_json(file);
  std::string out(8, '\0');
  put_u64(out, 0, json.size());
  return out + json + file.substr(8 + old.size());
}

// Replaces the first occurrence of `from` after `anchor` in the header.
std::string header_edit(const std::string& file, const std::string& anchor, const std::string& from,
                        const std::string& to) {
  std::string json = header_json(file);
  const std::size_t a = json.find(anchor);
  if (a == std::string::npos) return file;
  const std::size_t at = json.find(from, a);
  if (at == std::string::npos) return file;
  json.replace(at, from.size(), to);
  return with_header(file, json);
}

std::vector<Mutant> safetensors_mutants(const std::string& valid, const std::string& tensor) {
  std::vector<Mutant> out = generic_mutants(valid, 17);
  for (std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{valid.size()}, std::uint64_t{1} << 40,
                          std::uint64_t{1} << 63, ~std::uint64_t{0}, ~std::uint64_t{0} - 7}) {
    std::string m = valid;
    put_u64(m, 0, n);
    out.push_back({"header length " + std::to_string(n), m});
  }
  const std::string json = header_json(valid);
  const std::string a = "\"" + tensor + "\"";
  const std::vector<std::pair<std::string, std::string>> edits = {
      {"\"F32\"", "\"F64\""},
      {"\"F32\"", "\"I32\""},
      {"\"F32\"", "\"F8\""},
      {"\"F32\"", "\"\""},
      {"\"F32\"", "32"},
      {"\"F32\"", "null"},
      {"\"shape\":[", "\"shape\":[4611686018427387904,"},
      {"\"shape\":[", "\"shape\":[-1,"},
      {"\"shape\":[", "\"shape\":[0,"},
      {"\"shape\":[", "\"shape\":[\"a\","},
      {"\"shape\":[", "\"shape\":[1.5,"},
      {"\"shape\"", "\"shapes\""},
      {"\"data_offsets\":[", "\"data_offsets\":[18446744073709551615,"},
      {"\"data_offsets\":[", "\"data_offsets\":[-8,"},
      {"\"data_offsets\":[", "\"data_offsets\":[1,"},
      {"\"data_offsets\":[", "\"data_offsets\":[0,0,"},
      {"\"data_offsets\"", "\"offsets\""},
      {"\"data_offsets\":[", "\"data_offsets\":[9223372036854775807,"},
  };
  for (const auto& [from, to] : edits)
    out.push_back({"tensor " + tensor + ": " + from + " -> " + to, header_edit(valid, a, from, to)});
  out.push_back({"header not JSON", with_header(valid, json.substr(0, json.size() / 2))});
  out.push_back({"header a JSON array", with_header(valid, "[1,2,3]")});
  out.push_back({"header empty object", with_header(valid, "{}")});
  out.push_back({"metadata not strings", with_header(valid, "{\"__metadata__\":{\"a\":1}}")});
  out.push_back({"a tensor that is not an object", with_header(valid, "{\"x\":5}")});
  return out;
}

std::vector<Mutant> shard_mutants(const std::string& valid) {
  std::vector<Mutant> out = generic_mutants(valid, 29);
  for (std::int32_t v : {0, 2, -1, 20240520}) {
    std::string m = valid;
    put_i32(m, 4, v);
    out.push_back({"version " + std::to_string(v), m});
  }
  for (std::int32_t n : {-1, 0, 1, 99, 101, 1 << 30, 2147483647, -2147483647 - 1}) {
    std::string m = valid;
    put_i32(m, 8, n);
    out.push_back({"token count " + std::to_string(n), m});
  }
  return out;
}

// Runs every mutant through the reader and reports the bad verdicts (at most a few).
// A cut file, or one whose header length is wrong, is never valid.
bool cannot_be_valid(const Mutant& m) {
  return m.name.rfind("truncated", 0) == 0 || m.name.rfind("header length", 0) == 0;
}

void fuzz(const std::string& kind, const std::vector<Mutant>& mutants, const Reader& reader, const std::string& path,
          const std::function<bool(const Mutant&)>& must_refuse = cannot_be_valid) {
  std::string failures;
  int bad = 0;
  for (const Mutant& m : mutants) {
    const std::string v = verdict(reader, path, m.bytes, must_refuse(m));
    if (v.empty()) continue;
    if (++bad <= 5) failures += "\n  " + m.name + ": " + v;
  }
  INFO(kind << ": " << mutants.size() << " mutated files, " << bad << " handled badly:" << failures);
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("fuzz: mutated weights files are read or refused with one ConfigError naming the file", "[fuzz]") {
  TempDir dir;
  const GPTConfig config = gpt_config_by_name("tiny");
  const ParamLayout layout(config);
  std::vector<float> params(layout.num_params());
  for (std::size_t i = 0; i < params.size(); ++i) params[i] = static_cast<float>(i % 97) * 0.01f;
  const std::string valid_path = dir.file("valid.safetensors");
  save_weights(valid_path, config, params.data());
  const std::string valid = read_bytes(valid_path);
  std::vector<float> out(layout.num_params());
  // The generic reader (every tensor read as its dtype) and the strict weights loader.
  const Reader generic = [](const std::string& path) {
    SafetensorsFile f(path, "weights");
    for (const auto& [name, e] : f.entries())
      if (e.dtype == "F32") f.read_f32(name);
  };
  const Reader weights = [&](const std::string& path) { load_weights(path, config, out.data()); };
  const std::vector<Mutant> mutants = safetensors_mutants(valid, "transformer.wte.weight");
  REQUIRE(mutants.size() > 200);
  CHECK(verdict(weights, dir.file("m.safetensors"), valid).empty());  // the unmutated file is read
  fuzz("SafetensorsFile", mutants, generic, dir.file("m.safetensors"));
  fuzz("load_weights", mutants, weights, dir.file("m.safetensors"));
}

TEST_CASE("fuzz: mutated training checkpoints are read or refused with one ConfigError naming the file", "[fuzz]") {
  TempDir dir;
  const GPTConfig config = gpt_config_by_name("tiny");
  TrainCheckpoint ck;
  ck.config = config;
  const std::size_t n = ParamLayout(config).num_params();
  ck.params.assign(n, 0.5f);
  ck.adam_m.assign(n, 0.25f);
  ck.adam_v.assign(n, 0.125f);
  ck.step = 7;
  const std::string valid_path = dir.file("valid.safetensors");
  save_checkpoint(valid_path, ck);
  const std::string valid = read_bytes(valid_path);
  std::vector<Mutant> mutants = safetensors_mutants(valid, "adam.m");
  // The metadata: numbers that are not numbers, out of range, or missing.
  const std::string json = header_json(valid);
  for (const char* key : {"\"step\"", "\"config\"", "\"channels\"", "\"loss_scale\"", "\"batches_served\""}) {
    const std::size_t at = json.find(key);
    if (at == std::string::npos) continue;
    const std::size_t colon = json.find(':', at), quote = json.find('"', colon), end = json.find('"', quote + 1);
    for (const char* v : {"", "x", "-1", "1e400", "99999999999999999999999", "nan"}) {
      std::string j = json;
      j.replace(quote + 1, end - quote - 1, v);
      mutants.push_back({std::string("metadata ") + key + " = '" + v + "'", with_header(valid, j)});
    }
  }
  const Reader reader = [&](const std::string& path) { load_checkpoint(path, &config); };
  CHECK(verdict(reader, dir.file("m.safetensors"), valid).empty());
  fuzz("load_checkpoint", mutants, reader, dir.file("m.safetensors"));
}

TEST_CASE("fuzz: mutated token shards are read or refused with one ConfigError naming the file", "[fuzz]") {
  TempDir dir;
  std::vector<std::uint16_t> tokens(100);
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<std::uint16_t>(i * 7);
  const std::string valid_path = dir.file("valid.bin");
  write_token_shard(valid_path, tokens);
  const std::string valid = read_bytes(valid_path);
  const Reader reader = [](const std::string& path) { read_token_shard(path); };
  const Reader loader = [](const std::string& path) { load_tokens(path); };
  CHECK(verdict(reader, dir.file("m.bin"), valid).empty());
  const std::vector<Mutant> mutants = shard_mutants(valid);
  fuzz("read_token_shard", mutants, reader, dir.file("m.bin"));
  // load_tokens reads a file without the shard magic as text: a shard cut before its magic is.
  fuzz("load_tokens", mutants, loader, dir.file("m.bin"),
       [](const Mutant& m) { return cannot_be_valid(m) && m.bytes.size() >= sizeof(kShardMagic); });
}
