// Writing a file so that readers see the old file or the whole new one, never a torn one:
// write a temporary file beside it, flush it, then rename it over the target.
#pragma once
#include <string>
namespace scalelab {
void write_file_atomically(const std::string& path, const std::string& bytes);
}  // namespace scalelab
