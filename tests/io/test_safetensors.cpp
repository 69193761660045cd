// safetensors: bitwise round trips, the on-disk layout the specification prescribes, one test
// per kind of malformed file (each checks the message names the problem), and atomic writes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>

#include "compare.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "io/safetensors.hpp"
#include "temp_files.hpp"

using namespace scalelab;
using Catch::Contains;
using scalelab_test::read_bytes;
using scalelab_test::safetensors_bytes;
using scalelab_test::TempDir;
using scalelab_test::write_bytes;

namespace {

// Two F32 tensors of 2 and 3 elements, 20 data bytes, as a valid starting point for corruptions.
std::string two_tensor_header(const std::string& a_offsets = "[0,8]", const std::string& b_offsets = "[8,20]",
                              const std::string& b_dtype = "F32", const std::string& b_shape = "[3]") {
  return R"({"a":{"dtype":"F32","shape":[2],"data_offsets":)" + a_offsets + R"(},"b":{"dtype":")" + b_dtype +
         R"(","shape":)" + b_shape + R"(,"data_offsets":)" + b_offsets + "}}";
}
const std::string kData20(20, '\x01');

}  // namespace

TEST_CASE("safetensors round trip is bitwise for every dtype used, scalars and empty tensors", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("round.safetensors");
  const std::vector<float> f32 = {
      1.5f, -0.0f, std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(), 3.0e38f, -1e-30f};
  const std::vector<double> f64 = {1.0 / 3.0, -2.5e-300};
  const std::vector<std::int32_t> i32 = {-7, 0, 2147483647, -2147483647 - 1};
  const std::vector<std::uint16_t> u16 = {1, 65535, 12345};
  const float scalar = 0.1f;
  write_safetensors(path,
                    {{"weights.f32", "F32", {2, 3}, f32.data()},
                     {"f64", "F64", {2}, f64.data()},
                     {"tokens", "I32", {2, 2}, i32.data()},
                     {"u16", "U16", {3}, u16.data()},
                     {"scalar", "F32", {}, &scalar},
                     {"empty", "F32", {0, 4}, nullptr}},
                    {{"note", "hello \"world\""}, {"format", "pt"}});
  const SafetensorsFile f(path);
  CHECK(f.entries().size() == 6);
  CHECK(f.metadata().at("note") == "hello \"world\"");
  CHECK(f.metadata().at("format") == "pt");
  CHECK(f.entry("weights.f32").shape == std::vector<std::size_t>{2, 3});
  const auto rf = f.read_f32("weights.f32");
  CHECK_MATCH(scalelab_test::compare_bitwise("f32", rf.data(), f32.data(), f32.size()));
  const auto rd = f.read_f64("f64");
  CHECK_MATCH(scalelab_test::compare_bitwise("f64", rd.data(), f64.data(), f64.size()));
  CHECK(f.read_i32("tokens") == i32);
  CHECK(std::memcmp(f.raw("u16"), u16.data(), 6) == 0);
  CHECK(f.entry("scalar").shape.empty());
  CHECK(f.entry("scalar").numel() == 1);
  CHECK(f.read_f32("scalar")[0] == scalar);
  CHECK(f.entry("empty").numel() == 0);
  CHECK(f.read_f32("empty").empty());
  // read_f64 widens F32 exactly
  CHECK(f.read_f64("scalar")[0] == static_cast<double>(scalar));
}

TEST_CASE("safetensors header is padded with spaces to 8 bytes and offsets follow the given order",
          "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("layout.safetensors");
  const float a[3] = {1, 2, 3};
  const std::int32_t b[1] = {42};
  write_safetensors(path, {{"z_first", "F32", {3}, a}, {"a_second", "I32", {1}, b}});
  const std::string bytes = read_bytes(path);
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK(n % 8 == 0);
  CHECK(bytes.size() == 8 + n + 16);
  const std::string header = bytes.substr(8, n);
  CHECK(header.front() == '{');
  CHECK(header.find_last_not_of(' ') == header.find_last_of('}'));
  CHECK_THAT(header, Contains(R"("z_first":{"dtype":"F32","shape":[3],"data_offsets":[0,12]})"));
  CHECK_THAT(header, Contains(R"("a_second":{"dtype":"I32","shape":[1],"data_offsets":[12,16]})"));
  CHECK(std::memcmp(bytes.data() + 8 + n, a, 12) == 0);
  CHECK(std::memcmp(bytes.data() + 8 + n + 12, b, 4) == 0);
}

TEST_CASE("safetensors reader accepts a hand-written file from another writer", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("hand.safetensors");
  // Unpadded header, keys in a different order, tensors stored out of name order.
  write_bytes(path, safetensors_bytes(two_tensor_header("[12,20]", "[0,12]"), kData20));
  const SafetensorsFile f(path);
  CHECK(f.entry("a").begin == 12);
  CHECK(f.entry("b").end == 12);
}

TEST_CASE("safetensors rejects malformed files with a message naming the problem", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  auto load = [&] { SafetensorsFile f(path, "weights"); };

  SECTION("missing file") {
    CHECK_THROWS_WITH(SafetensorsFile(dir.file("nope.safetensors")), Contains("nope.safetensors': no such file"));
  }
  SECTION("truncated file: fewer than the 8 bytes of the header length") {
    write_bytes(path, "abcde");
    CHECK_THROWS_AS(load(), ConfigError);
    CHECK_THROWS_WITH(load(),
                      Contains("weights '" + path + "'") && Contains("only 5 bytes long") && Contains("truncated"));
  }
  SECTION("truncated file: the data area cut short") {
    const std::string full = safetensors_bytes(two_tensor_header(), kData20);
    write_bytes(path, full.substr(0, full.size() - 4));
    CHECK_THROWS_WITH(load(), Contains("tensor 'b' has data_offsets [8, 20] beyond the data area of 16 bytes"));
  }
  SECTION("header length larger than the file") {
    std::string bytes = safetensors_bytes("{}", "");
    bytes[0] = 100;
    write_bytes(path, bytes);
    CHECK_THROWS_WITH(load(), Contains("header length 100 is larger than the 2 bytes that follow it"));
  }
  SECTION("header length of 2^64 - 1") {
    write_bytes(path, std::string(8, '\xff') + "{}");
    CHECK_THROWS_WITH(load(), Contains("header length 18446744073709551615 is larger"));
  }
  SECTION("invalid JSON") {
    write_bytes(path, safetensors_bytes(R"({"a":{"dtype":"F32",)", ""));
    CHECK_THROWS_WITH(load(), Contains("the header is not valid JSON") && Contains("parse error"));
  }
  SECTION("empty header") {
    write_bytes(path, safetensors_bytes("", ""));
    CHECK_THROWS_WITH(load(), Contains("the header is not valid JSON"));
  }
  SECTION("JSON that is not an object") {
    write_bytes(path, safetensors_bytes("[1, 2]", ""));
    CHECK_THROWS_WITH(load(), Contains("the header is a JSON array, not an object of tensors"));
  }
  SECTION("entry that is not an object") {
    write_bytes(path, safetensors_bytes(R"({"a": 3})", ""));
    CHECK_THROWS_WITH(load(), Contains("tensor 'a' is described by a number, not an object"));
  }
  SECTION("unknown dtype") {
    write_bytes(path, safetensors_bytes(two_tensor_header("[0,8]", "[8,20]", "F31"), kData20));
    CHECK_THROWS_WITH(load(), Contains("tensor 'b' has unknown dtype 'F31'") && Contains("F32, F64"));
  }
  SECTION("missing dtype") {
    write_bytes(path, safetensors_bytes(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", "abcd"));
    CHECK_THROWS_WITH(load(), Contains("tensor 'a' has no \"dtype\" string"));
  }
  SECTION("negative shape") {
    write_bytes(path, safetensors_bytes(two_tensor_header("[0,8]", "[8,20]", "F32", "[-3]"), kData20));
    CHECK_THROWS_WITH(load(), Contains("tensor 'b' has shape [-3], whose entries are not all non-negative integers"));
  }
  SECTION("non-integer shape") {
    write_bytes(path, safetensors_bytes(two_tensor_header("[0,8]", "[8,20]", "F32", "[1.5]"), kData20));
    CHECK_THROWS_WITH(load(), Contains("whose entries are not all non-negative integers"));
  }
  SECTION("missing data_offsets") {
    write_bytes(path, safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", "abcd"));
    CHECK_THROWS_WITH(load(), Contains("tensor 'a' has no \"data_offsets\" pair"));
  }
  SECTION("offsets out of range") {
    write_bytes(path, safetensors_bytes(two_tensor_header("[0,8]", "[8,2000]"), kData20));
    CHECK_THROWS_WITH(load(), Contains("tensor 'b' has data_offsets [8, 2000] beyond the data area of 20 bytes"));
  }
  SECTION("begin after end") {
    write_bytes(path, safetensors_bytes(two_tensor_header("[8,0]", "[8,20]"), kData20));
    CHECK_THROWS_WITH(load(), Contains("tensor 'a' has data_offsets [8, 0] with begin after end"));
  }
  SECTION("size mismatch between offsets and dtype x shape") {
    write_bytes(path, safetensors_bytes(two_tensor_header("[0,8]", "[8,20]", "F64"), kData20));
    CHECK_THROWS_WITH(load(), Contains("tensor 'b' has data_offsets [8, 20] (12 bytes) but dtype F64 and shape [3] "
                                       "need 24 bytes"));
  }
  SECTION("overlapping offsets") {
    write_bytes(path, safetensors_bytes(two_tensor_header("[0,8]", "[4,16]"), std::string(16, 'x')));
    CHECK_THROWS_WITH(load(), Contains("tensors 'a' [0, 8) and 'b' [4, 16) overlap"));
  }
  SECTION("a hole in the data area") {
    write_bytes(path, safetensors_bytes(two_tensor_header("[0,8]", "[12,24]"), std::string(24, 'x')));
    CHECK_THROWS_WITH(load(), Contains("bytes [8, 12) of the data area belong to no tensor"));
  }
  SECTION("bytes after the last tensor") {
    write_bytes(path, safetensors_bytes(two_tensor_header(), kData20 + "junk"));
    CHECK_THROWS_WITH(load(), Contains("4 bytes at the end of the data area belong to no tensor"));
  }
  SECTION("metadata that is not a string map") {
    write_bytes(path, safetensors_bytes(R"({"__metadata__":{"step":3}})", ""));
    CHECK_THROWS_WITH(load(), Contains("\"__metadata__\" value of 'step' is a number; the format allows only strings"));
    write_bytes(path, safetensors_bytes(R"({"__metadata__":[1]})", ""));
    CHECK_THROWS_WITH(load(), Contains("\"__metadata__\" is not an object"));
  }
}

TEST_CASE("safetensors typed reads check the tensor and the dtype", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("typed.safetensors");
  const std::int32_t v[2] = {1, 2};
  write_safetensors(path, {{"ints", "I32", {2}, v}});
  const SafetensorsFile f(path);
  CHECK_THROWS_WITH(f.read_f32("ints"), Contains("tensor 'ints' has dtype I32 but F32 is needed"));
  CHECK_THROWS_WITH(f.read_f64("ints"), Contains("tensor 'ints' has dtype I32 but F64 or F32 is needed"));
  CHECK_THROWS_WITH(f.entry("floats"), Contains("safetensors '" + path + "': tensor 'floats' is missing"));
  CHECK_THROWS_WITH(f.raw("floats"), Contains("tensor 'floats' is missing"));
}

TEST_CASE("safetensors writer rejects bad tensors before touching the target file", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  write_bytes(path, "old contents");
  const float x[2] = {1, 2};
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", "F33", {2}, x}}), Contains("tensor 'x' has unknown dtype 'F33'"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", "F32", {2}, x}, {"x", "F32", {2}, x}}),
                    Contains("tensor 'x' is listed twice"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"__metadata__", "F32", {2}, x}}), Contains("is empty or reserved"));
  CHECK_THROWS_WITH(write_safetensors(path, {{"x", "F32", {2}, nullptr}}), Contains("tensor 'x' has no data pointer"));
  CHECK(read_bytes(path) == "old contents");
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST_CASE("a failed safetensors write leaves no partial target file", "[io][safetensors]") {
  TempDir dir;
  const float x[2] = {1, 2};
  SECTION("directory does not exist") {
    const std::string path = dir.file("missing_dir/w.safetensors");
    CHECK_THROWS_AS(write_safetensors(path, {{"x", "F32", {2}, x}}), ConfigError);
    CHECK_THROWS_WITH(write_safetensors(path, {{"x", "F32", {2}, x}}), Contains("cannot write"));
    CHECK_FALSE(std::filesystem::exists(path));
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  }
  SECTION("the final rename fails (the target is a directory): the temporary is removed") {
    const std::string path = dir.file("is_a_dir");
    std::filesystem::create_directories(path + "/child");
    CHECK_THROWS_WITH(write_safetensors(path, {{"x", "F32", {2}, x}}), Contains("cannot rename"));
    CHECK(std::filesystem::is_directory(path + "/child"));
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  }
  SECTION("a reader sees the old file or the whole new one") {
    const std::string path = dir.file("w.safetensors");
    write_safetensors(path, {{"x", "F32", {2}, x}});
    const float y[3] = {3, 4, 5};
    write_safetensors(path, {{"y", "F32", {3}, y}});
    const SafetensorsFile f(path);
    CHECK(f.read_f32("y") == std::vector<float>{3, 4, 5});
    CHECK_FALSE(f.has("x"));
    CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  }
}

TEST_CASE("safetensors reader survives random corruption: a ConfigError or a valid file, never a crash",
          "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("fuzz.safetensors");
  const float a[3] = {1, 2, 3};
  const std::int32_t b[2] = {4, 5};
  write_safetensors(path, {{"a", "F32", {3}, a}, {"b", "I32", {1, 2}, b}}, {{"k", "v"}});
  const std::string good = read_bytes(path);
  scalelab::Rng rng(12345);
  int rejected = 0, accepted = 0, other = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = good;
    if (i % 3 == 0) {
      bad.resize(rng.below(good.size()));  // truncated anywhere
    } else {
      const int flips = 1 + static_cast<int>(rng.below(3));
      for (int f = 0; f < flips; ++f) bad[rng.below(bad.size())] = static_cast<char>(rng.below(256));
    }
    write_bytes(path, bad);
    try {
      const SafetensorsFile f(path);
      for (const auto& [name, e] : f.entries()) (void)f.raw(name);
      ++accepted;
    } catch (const ConfigError&) {
      ++rejected;
    } catch (...) {
      ++other;
    }
  }
  INFO(rejected << " rejected, " << accepted << " accepted (a flip inside tensor data is still a valid file)");
  CHECK(other == 0);
  CHECK(rejected > 1000);
}
