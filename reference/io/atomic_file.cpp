// Atomic file replacement (temporary file + rename).
#include "io/atomic_file.hpp"

#include <cstdio>
#include <filesystem>

#include "core/error.hpp"

namespace scalelab {

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  require(f != nullptr, "output", "cannot write '" + tmp + "'", "check the directory exists and is writable");
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0;
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    std::remove(tmp.c_str());
    throw ConfigError("output: writing '" + tmp + "' failed; check free disk space");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw ConfigError("output: cannot rename '" + tmp + "' to '" + path + "' (" + ec.message() +
                      "); check permissions");
  }
}

}  // namespace scalelab
