// The local rank: every rank's host name, gathered, compared with this rank's.
#include "comm/local_rank.hpp"

#include <unistd.h>

#include <array>
#include <cstring>
#include <vector>

namespace scalelab {

std::string this_host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "?";
  return name;
}

int local_rank_on_host(Communicator& comm) {
  using Name = std::array<char, 64>;  // a fixed width, so one all-gather carries every name
  Name mine{};
  const std::string host = this_host_name();
  std::strncpy(mine.data(), host.c_str(), mine.size() - 1);
  std::vector<Name> all(static_cast<std::size_t>(comm.size()));
  all[static_cast<std::size_t>(comm.rank())] = mine;
  comm.all_gather(all[static_cast<std::size_t>(comm.rank())].data(), all.data(), all.size() * sizeof(Name),
                  DataType::kUInt8);
  int local = 0;
  for (int r = 0; r < comm.rank(); ++r)
    if (all[static_cast<std::size_t>(r)] == mine) ++local;
  return local;
}

}  // namespace scalelab
