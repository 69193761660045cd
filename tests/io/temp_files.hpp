// Test helpers for file I/O: a private temporary directory per test case (removed afterwards),
// and writers of raw bytes so that tests can build exactly the malformed file they need.
#pragma once

#include <unistd.h>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

namespace scalelab_test {

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("scalelab_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A safetensors file from a hand-written header and data area: [u64 little-endian len][header][data].
inline std::string safetensors_bytes(const std::string& header, const std::string& data) {
  const std::uint64_t n = header.size();
  char len[8];
  std::memcpy(len, &n, 8);
  return std::string(len, 8) + header + data;
}

}  // namespace scalelab_test
