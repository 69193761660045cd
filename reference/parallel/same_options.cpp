// The options' agreement check: rank 0's options (as JSON) travel to every rank, each compares,
// and the first rank that differs tells everyone how.
#include "parallel/same_options.hpp"

#include <cstdint>
#include <vector>

#include "core/error.hpp"

namespace scalelab {

namespace {

// Sends text from root to every rank (length first); returns root's text on every rank.
std::string broadcast_text(Communicator& comm, const std::string& text, int root) {
  std::int64_t length = static_cast<std::int64_t>(text.size());
  comm.broadcast(&length, 1, root);
  std::string out = text;
  out.resize(static_cast<std::size_t>(length));
  comm.broadcast(out.data(), out.size(), DataType::kUInt8, root);
  return out;
}

// "parallel.tp is 1 there and 2 on rank 0; seed is ..." for every option that differs.
std::string differences(const nlohmann::json& root, const nlohmann::json& mine) {
  const nlohmann::json a = root.flatten(), b = mine.flatten();
  std::string out;
  int shown = 0, more = 0;
  for (const auto& [key, value] : b.items()) {
    if (a.contains(key) && a.at(key) == value) continue;
    std::string name = key.substr(1);  // "/parallel/tp" -> "parallel.tp"
    for (char& c : name)
      if (c == '/') c = '.';
    if (shown == 3) {  // three are enough to see what went wrong
      ++more;
      continue;
    }
    ++shown;
    out += (out.empty() ? "" : ", ") + name + " is " + value.dump() + " there and " +
           (a.contains(key) ? a.at(key).dump() : std::string("missing")) + " on rank 0";
  }
  if (more > 0) out += " (and " + std::to_string(more) + " more)";
  return out;
}

}  // namespace

void check_same_options(Communicator& world, const TrainOptions& options) {
  if (world.size() == 1) return;
  const nlohmann::json mine = options_to_json(options);
  const std::string text = mine.dump();
  const std::string root = broadcast_text(world, world.rank() == 0 ? text : std::string(), 0);
  // Which ranks differ: each sets its own flag, the sum tells everyone.
  std::vector<std::int32_t> differs(static_cast<std::size_t>(world.size()), 0);
  differs[static_cast<std::size_t>(world.rank())] = root != text ? 1 : 0;
  world.all_reduce(differs.data(), differs.size(), ReduceOp::kSum);
  int first = -1, count = 0;
  for (int r = 0; r < world.size(); ++r)
    if (differs[static_cast<std::size_t>(r)]) {
      if (first < 0) first = r;
      ++count;
    }
  if (first < 0) return;
  // The first rank that differs says how, so that every rank gives the same message.
  const std::string how = broadcast_text(
      world, world.rank() == first ? differences(nlohmann::json::parse(root), mine) : std::string(), first);
  throw ConfigError("options: rank " + std::to_string(first) +
                    (count > 1 ? " (and " + std::to_string(count - 1) + " other rank(s))" : std::string()) +
                    " was started with different options than rank 0: " + how +
                    "; start every rank with the same options (one command line for mpirun -np N)");
}

}  // namespace scalelab
