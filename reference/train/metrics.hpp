// A JSON-lines metrics file: one JSON object per line, flushed as it is written, so a run that
// dies still leaves its history (and notebooks can plot a run while it trains).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace scalelab {

class MetricsWriter {
 public:
  MetricsWriter() = default;  // writes nothing
  explicit MetricsWriter(const std::string& path);
  void write(const nlohmann::json& record);
  bool enabled() const { return file_ != nullptr; }

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file_;
};

}  // namespace scalelab
