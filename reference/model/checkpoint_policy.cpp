// Parsing and describing checkpoint policies.
#include "model/checkpoint_policy.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace scalelab {

int CheckpointPolicy::segment_blocks(int L) const {
  int k = kind == Kind::kSqrtL ? static_cast<int>(std::lround(std::sqrt(static_cast<double>(L)))) : every;
  return std::clamp(k, 1, std::max(L, 1));
}

std::string CheckpointPolicy::describe() const {
  switch (kind) {
    case Kind::kNone: return "none";
    case Kind::kEveryK: return "every:" + std::to_string(every);
    case Kind::kSqrtL: return "sqrt";
    case Kind::kSelective: return "selective";
  }
  return "?";
}

CheckpointPolicy CheckpointPolicy::parse(const std::string& text) {
  CheckpointPolicy p;
  const std::string fix = "use none, every, every:K (K >= 1), sqrt or selective";
  if (text == "none") return p;
  if (text == "sqrt") {
    p.kind = Kind::kSqrtL;
    return p;
  }
  if (text == "selective") {
    p.kind = Kind::kSelective;
    return p;
  }
  if (text == "every") {
    p.kind = Kind::kEveryK;
    return p;
  }
  if (text.rfind("every:", 0) == 0) {
    const std::string k = text.substr(6);
    const bool digits = !k.empty() && k.size() < 7 &&
                        std::all_of(k.begin(), k.end(), [](char c) { return c >= '0' && c <= '9'; });
    require(digits && std::stoi(k) >= 1, "checkpoint", "'" + text + "' needs a positive block count after 'every:'",
            fix);
    p.kind = Kind::kEveryK;
    p.every = std::stoi(k);
    return p;
  }
  throw ConfigError("checkpoint: unknown policy '" + text + "'; " + fix);
}

}  // namespace scalelab
