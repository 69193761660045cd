// make_nccl_communicator: which GPU each rank takes, the check that no two ranks share one, and
// the ncclUniqueId handed from rank 0 to the others over the host communicator.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "comm/local_rank.hpp"
#include "core/error.hpp"
#include "kernels/comm/nccl_check.hpp"
#include "kernels/comm/nccl_communicator.hpp"
#include "kernels/comm/nccl_context.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/core/device.hpp"

namespace scalelab::cuda {

namespace {

// What each rank tells the others about itself: its host and the GPU it would take.
struct RankPlace {
  char host[64];
  unsigned char gpu_uuid[16];
  std::int32_t device;  // -1: no GPU visible on this rank
  std::int32_t gpus;    // GPUs visible on this rank
};

std::string hex(const unsigned char* bytes, std::size_t n) {
  std::string s;
  char two[3];
  for (std::size_t i = 0; i < n; ++i) {
    std::snprintf(two, sizeof two, "%02x", bytes[i]);
    s += two;
  }
  return s;
}

// All ranks' places, the same table on every rank. The local rank (the position among the ranks
// on the same host) picks the GPU, so one rank per GPU on every node needs no configuration.
std::vector<RankPlace> gather_places(Communicator& bootstrap, int requested_device) {
  const int n = bootstrap.size(), me = bootstrap.rank();
  const std::string host = this_host_name();
  std::vector<RankPlace> all(static_cast<std::size_t>(n));
  RankPlace& mine = all[static_cast<std::size_t>(me)];
  std::memset(&mine, 0, sizeof mine);
  std::snprintf(mine.host, sizeof mine.host, "%s", host.c_str());
  // First pass: hosts only, to count the ranks before this one on the same host.
  bootstrap.all_gather(&mine, all.data(), all.size() * sizeof(RankPlace), DataType::kUInt8);
  int local_rank = 0;
  for (int r = 0; r < me; ++r)
    if (std::strncmp(all[static_cast<std::size_t>(r)].host, mine.host, sizeof mine.host) == 0) ++local_rank;
  mine.gpus = device_count();
  mine.device = -1;
  if (mine.gpus > 0) {
    mine.device = requested_device >= 0 ? requested_device : local_rank % mine.gpus;
    if (mine.device < mine.gpus) {
      cudaDeviceProp prop{};
      SCALELAB_CUDA_CHECK(cudaGetDeviceProperties(&prop, mine.device));
      std::memcpy(mine.gpu_uuid, prop.uuid.bytes, sizeof mine.gpu_uuid);
    }
  }
  bootstrap.all_gather(&mine, all.data(), all.size() * sizeof(RankPlace), DataType::kUInt8);
  return all;
}

// One ConfigError, identical on every rank (they all judge the same table), or nothing.
void check_places(const std::vector<RankPlace>& all, int requested_device) {
  const int n = static_cast<int>(all.size());
  for (int r = 0; r < n; ++r) {
    const RankPlace& p = all[static_cast<std::size_t>(r)];
    require(p.gpus > 0, "backend",
            "nccl needs a CUDA GPU, but rank " + std::to_string(r) + " (host " + p.host + ") sees none",
            "run on GPU nodes, or use --backend mpi (host memory)");
    require(p.device < p.gpus, "device",
            "rank " + std::to_string(r) + " asked for GPU " + std::to_string(requested_device) + " but host " + p.host +
                " shows it " + std::to_string(p.gpus),
            "pick a GPU in [0, " + std::to_string(p.gpus) + "), or -1 to take local rank modulo GPUs");
    for (int q = 0; q < r; ++q) {
      const RankPlace& o = all[static_cast<std::size_t>(q)];
      const bool same_gpu = std::strncmp(o.host, p.host, sizeof p.host) == 0 &&
                            std::memcmp(o.gpu_uuid, p.gpu_uuid, sizeof p.gpu_uuid) == 0;
      require(!same_gpu, "backend",
              "nccl: ranks " + std::to_string(q) + " and " + std::to_string(r) + " would share GPU " +
                  std::to_string(p.device) + " (uuid " + hex(p.gpu_uuid, 4) + "...) on host " + p.host +
                  ", and NCCL refuses two ranks on one GPU",
              "use the MPI backend with host staging, or one rank per GPU (--backend mpi; or start at most as "
              "many ranks per node as it has GPUs)");
    }
  }
}

Watchdog::OnExpire default_on_hang() {
  return [](const std::string& message) {
    std::fprintf(stderr, "scalelab: %s\n", message.c_str());
    std::fflush(stderr);
    std::abort();  // the watchdog's contract: end the process (mpirun then ends the job)
  };
}

}  // namespace

std::unique_ptr<NcclCommunicator> make_nccl_communicator(Communicator& bootstrap, const NcclOptions& options) {
  require(bootstrap.memory_space() == MemorySpace::kHost, "backend",
          std::string("nccl is bootstrapped over a host communicator, but was given a '") + bootstrap.backend() +
              "' one",
          "pass the MPI world (or a LocalCommunicator for one rank)");
  const std::vector<RankPlace> places = gather_places(bootstrap, options.device);
  check_places(places, options.device);
  const int device = places[static_cast<std::size_t>(bootstrap.rank())].device;
  SCALELAB_CUDA_CHECK(cudaSetDevice(device));

  // Rank 0 makes the id (it also opens NCCL's bootstrap socket); the others learn it from rank 0.
  ncclUniqueId id{};
  if (bootstrap.rank() == 0) SCALELAB_NCCL_CHECK(ncclGetUniqueId(&id), bootstrap.rank(), nullptr);
  bootstrap.broadcast(&id, sizeof id, DataType::kUInt8, 0);
  ncclComm_t comm = nullptr;
  SCALELAB_NCCL_CHECK(ncclCommInitRank(&comm, bootstrap.size(), id, bootstrap.rank()), bootstrap.rank(), nullptr);

  auto context = std::make_shared<NcclContext>(comm, device, bootstrap.rank(), options.order_after,
                                               options.timeout_seconds);
  // The backstop for a call stuck inside NCCL's host code. Twice the limit, so that a wait the
  // context can see (the common case) ends first, with ncclCommAbort and an exception.
  std::shared_ptr<Watchdog> watchdog;
  if (options.timeout_seconds > 0)
    watchdog = std::make_shared<Watchdog>(2 * options.timeout_seconds,
                                          options.on_hang ? options.on_hang : default_on_hang());
  return std::make_unique<NcclCommunicator>(std::move(context), std::move(watchdog), options.verify_arguments);
}

}  // namespace scalelab::cuda
