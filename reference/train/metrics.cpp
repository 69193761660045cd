// JSON-lines output.
#include "train/metrics.hpp"

#include "core/error.hpp"

namespace scalelab {

MetricsWriter::MetricsWriter(const std::string& path) : file_(std::fopen(path.c_str(), "w")) {
  require(file_ != nullptr, "metrics", "cannot write '" + path + "'", "check the directory exists and is writable");
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_.get());
  std::fflush(file_.get());
}

}  // namespace scalelab
