// The emulator of simt.hpp: one block (or thread block cluster) at a time, its CUDA threads as
// ucontext fibers on this OS thread, switched only where threads meet (a barrier, a warp-wide instruction) and when one
// returns. The scheduler resumes a thread that can go on, chosen by the launch's Schedule, until
// all have returned; when none can and some have not returned, the block is stuck and launch()
// says why.
#include "simt.hpp"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <array>
#include <deque>
#include <exception>
#include <memory>
#include <new>
#include <sstream>
#include <stdexcept>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SCALELAB_SIMT_ASAN 1
#endif

namespace scalelab::simt {

namespace {

// A fiber's stack: the kernels keep a few KB of arrays in "registers"; ASan's redzones and -O0
// frames need several times that.
constexpr std::size_t kStackBytes = 64 * 1024;
constexpr int kWarpSize = 32;

enum class State { kRunnable, kAtBarrier, kAtClusterBarrier, kInWarpOp, kReturned };

struct AsyncCopy {
  void* dst;
  const void* src;
  std::size_t bytes;
  bool valid;
};

// The stack, with an inaccessible page below it: a kernel that overflows it stops with a
// segmentation fault instead of writing over other memory.
class Stack {
 public:
  Stack() : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
    void* p = mmap(nullptr, page_ + kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    base_ = static_cast<unsigned char*>(p);
    mprotect(base_, page_, PROT_NONE);
  }
  ~Stack() { munmap(base_, page_ + kStackBytes); }
  Stack(const Stack&) = delete;
  Stack& operator=(const Stack&) = delete;
  unsigned char* get() const { return base_ + page_; }  // kStackBytes usable from here up

 private:
  std::size_t page_;
  unsigned char* base_ = nullptr;
};

struct Thread {
  ucontext_t context{};
  std::unique_ptr<Stack> stack;
  Builtins builtins{};
  int block = 0;   // its block's rank in the cluster (0 without clusters)
  int linear = 0;  // rank * block size + x + y blockDim.x + z blockDim.x blockDim.y: lanes 32w..32w+31 are warp w
  State state = State::kRunnable;
  const char* waiting_at = "";
  std::vector<AsyncCopy> open_group;             // issued since the last commit
  std::deque<std::vector<AsyncCopy>> committed;  // oldest first
  std::exception_ptr error;
#ifdef SCALELAB_SIMT_ASAN
  void* fake_stack = nullptr;
#endif
};

// The lanes of a warp meeting at one instruction.
struct Warp {
  int arrived = 0;
  const char* op = nullptr;
  const std::type_info* type = nullptr;
  WarpCompute compute = nullptr;
  std::array<const void*, kWarpSize> ins{};
  std::array<void*, kWarpSize> outs{};
};

void perform(const AsyncCopy& c) {
  if (c.valid)
    std::memcpy(c.dst, c.src, c.bytes);
  else
    std::memset(c.dst, 0, c.bytes);
}

std::string describe(const uint3& v) {
  std::ostringstream os;
  os << "(" << v.x << "," << v.y << "," << v.z << ")";
  return os.str();
}

struct Aligned128 {
  void operator()(unsigned char* p) const { ::operator delete[](p, std::align_val_t{128}); }
};

class Blocks;
// The blocks being run on this OS thread (launch() sets it for the duration of a launch).
thread_local Blocks* active = nullptr;

// The blocks that run together: one, or the blocks of a thread block cluster (which meet at
// cluster.sync() and read each other's shared memory). Reused for every block or cluster of a
// launch.
class Blocks {
 public:
  Blocks(dim3 grid, dim3 block, int count, std::size_t shared_bytes, const std::function<void()>& kernel)
      : kernel_(kernel),
        per_block_(static_cast<std::size_t>(block.x) * block.y * block.z),
        threads_(per_block_ * count),
        warps_(threads_.size() / kWarpSize),
        shared_bytes_(shared_bytes),
        barrier_arrived_(count) {
    int linear = 0;
    for (int rank = 0; rank < count; ++rank) {
      // At least one byte, so that a kernel without shared memory still gets a valid pointer.
      shared_.emplace_back(static_cast<unsigned char*>(::operator new[](shared_bytes + 1, std::align_val_t{128})));
      for (unsigned z = 0; z < block.z; ++z)
        for (unsigned y = 0; y < block.y; ++y)
          for (unsigned x = 0; x < block.x; ++x, ++linear) {
            Thread& t = threads_[linear];
            t.block = rank;
            t.linear = linear;
            t.builtins = {{x, y, z}, {0, 0, 0}, block, grid};
            t.stack = std::make_unique<Stack>();
          }
    }
  }

  // Runs the blocks `indices` (by rank in the cluster) to the end (every thread returned) or throws.
  void run(const std::vector<uint3>& indices, Schedule schedule) {
    for (auto& s : shared_) std::memset(s.get(), 0xFF, shared_bytes_ + 1);  // NaN in fp32, bf16 and fp16
    for (Thread& t : threads_) {
      t.builtins.block_idx = indices[t.block];
      t.state = State::kRunnable;
      t.waiting_at = "";
      t.open_group.clear();
      t.committed.clear();
#ifdef SCALELAB_SIMT_ASAN
      __asan_unpoison_memory_region(t.stack->get(), kStackBytes);  // frames left by an earlier block
#endif
      if (getcontext(&t.context) != 0) throw std::runtime_error("simt: getcontext failed");
      t.context.uc_stack.ss_sp = t.stack->get();
      t.context.uc_stack.ss_size = kStackBytes;
      t.context.uc_link = &scheduler_;
      makecontext(&t.context, &Blocks::entry, 0);
#ifdef SCALELAB_SIMT_ASAN
      // makecontext has put the stack into the context's registers; uc_stack is not read again,
      // except by ASan's swapcontext, which clears the shadow of the stack it names before and
      // after every switch. That would wipe the redzones of this fiber's live frames (so a
      // kernel's overflow of a local array would go unseen after its first switch) and cost a
      // third of the emulation's time; the stack was unpoisoned above, once for the block.
      t.context.uc_stack.ss_size = 0;
#endif
    }
    for (std::size_t& n : barrier_arrived_) n = 0;
    cluster_arrived_ = 0;
    for (Warp& w : warps_) w = Warp{};

    std::size_t returned = 0;
    std::vector<std::size_t> returned_in(shared_.size(), 0);
    last_ = threads_.size() - 1;
    while (returned < threads_.size()) {
      Thread* t = next_thread(schedule);
      if (t == nullptr)
        throw std::runtime_error("simt: block " + describe(indices[0]) +
                                 (indices.size() > 1 ? " (and the rest of its cluster)" : "") +
                                 " is stuck: " + stuck_report());
      resume(*t);
      if (t->error) std::rethrow_exception(t->error);
      if (t->state == State::kReturned) {
        ++returned;
        // A block whose threads have all returned has ended, and its shared memory with it: a
        // block of the cluster that still reads it (no cluster.sync before the end) reads NaN.
        if (++returned_in[t->block] == per_block_) std::memset(shared_of(t->block), 0xFF, shared_bytes_ + 1);
      }
    }
  }

  Thread& running() { return *running_; }
  LaunchStats& stats() { return stats_; }
  // The running thread's block's shared memory, or that of block `rank` of its cluster.
  unsigned char* shared() { return shared_[running().block].get(); }
  unsigned char* shared_of(int rank) { return shared_.at(static_cast<std::size_t>(rank)).get(); }
  std::size_t shared_bytes() const { return shared_bytes_; }
  int cluster_size() const { return static_cast<int>(shared_.size()); }

  void sync() {
    Thread& t = running();
    t.state = State::kAtBarrier;
    t.waiting_at = "__syncthreads";
    if (++barrier_arrived_[t.block] == per_block_) {
      barrier_arrived_[t.block] = 0;
      ++stats_.barriers;
      for (Thread& other : threads_)
        if (other.block == t.block && other.state == State::kAtBarrier) other.state = State::kRunnable;
    }
    yield();
  }

  void sync_cluster() {
    Thread& t = running();
    t.state = State::kAtClusterBarrier;
    t.waiting_at = "cluster.sync";
    if (++cluster_arrived_ == threads_.size()) {
      cluster_arrived_ = 0;
      for (Thread& other : threads_)
        if (other.state == State::kAtClusterBarrier) other.state = State::kRunnable;
    }
    yield();
  }

  void warp_op(const char* op, const std::type_info& type, const void* in, void* out, WarpCompute compute) {
    Thread& t = running();
    Warp& w = warps_[t.linear / kWarpSize];
    const int lane = t.linear % kWarpSize;
    if (w.arrived == 0) {
      w.op = op;
      w.type = &type;
      w.compute = compute;
    } else if (w.compute != compute || *w.type != type) {
      fail(std::string("lane ") + std::to_string(lane) + " reached " + op + " while the lanes before it in warp " +
           std::to_string(t.linear / kWarpSize) + " wait at " + w.op +
           ": every lane of a warp must reach the same warp-wide instruction");
    }
    w.ins[lane] = in;
    w.outs[lane] = out;
    t.state = State::kInWarpOp;
    t.waiting_at = op;
    if (++w.arrived == kWarpSize) {
      w.arrived = 0;
      ++stats_.warp_instructions;
      w.compute(w.ins.data(), w.outs.data());  // may throw: then in this lane's fiber
      const int first = t.linear - lane;
      for (int l = 0; l < kWarpSize; ++l) threads_[first + l].state = State::kRunnable;
    }
    yield();
  }

 private:
  static void entry() {
    Blocks& b = *active;
    Thread& t = b.running();
#ifdef SCALELAB_SIMT_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &b.scheduler_stack_bottom_, &b.scheduler_stack_size_);
#endif
    try {
      b.kernel_();
      // A kernel's copies complete whether or not it waited for them.
      if (!t.open_group.empty()) t.committed.push_back(std::move(t.open_group));
      for (const auto& group : t.committed)
        for (const AsyncCopy& c : group) perform(c);
    } catch (...) {
      t.error = std::current_exception();
    }
    t.state = State::kReturned;
    t.waiting_at = "the kernel's end";
#ifdef SCALELAB_SIMT_ASAN
    __sanitizer_start_switch_fiber(nullptr, b.scheduler_stack_bottom_, b.scheduler_stack_size_);
#endif
    // Returning resumes uc_link: the scheduler.
  }

  void resume(Thread& t) {
    running_ = &t;
#ifdef SCALELAB_SIMT_ASAN
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, t.stack->get(), kStackBytes);
#endif
    if (swapcontext(&scheduler_, &t.context) != 0) throw std::runtime_error("simt: swapcontext failed");
#ifdef SCALELAB_SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    running_ = nullptr;
  }

  void yield() {
    Thread& t = running();
#ifdef SCALELAB_SIMT_ASAN
    __sanitizer_start_switch_fiber(&t.fake_stack, scheduler_stack_bottom_, scheduler_stack_size_);
#endif
    swapcontext(&t.context, &scheduler_);
#ifdef SCALELAB_SIMT_ASAN
    __sanitizer_finish_switch_fiber(t.fake_stack, &scheduler_stack_bottom_, &scheduler_stack_size_);
#endif
  }

  // The thread to resume next under `schedule`, or none when no thread can go on.
  Thread* next_thread(Schedule schedule) {
    const std::size_t n = threads_.size();
    switch (schedule) {
      case Schedule::kRoundRobin:
        for (std::size_t k = 1; k <= n; ++k) {
          const std::size_t i = (last_ + k) % n;
          if (threads_[i].state == State::kRunnable) return &threads_[last_ = i];
        }
        return nullptr;
      case Schedule::kFirstWarpAhead:
        for (Thread& t : threads_)
          if (t.state == State::kRunnable) return &t;
        return nullptr;
      case Schedule::kLastWarpAhead:  // the last warp, and in each warp the last lane, first
        for (std::size_t i = n; i-- > 0;)
          if (threads_[i].state == State::kRunnable) return &threads_[i];
        return nullptr;
    }
    return nullptr;
  }

  // "threads 0-95 wait at __syncthreads; threads 96-127 wait at ldmatrix", runs of equal places.
  std::string stuck_report() const {
    std::ostringstream os;
    std::size_t start = 0;
    for (std::size_t i = 1; i <= threads_.size(); ++i) {
      if (i < threads_.size() && std::strcmp(threads_[i].waiting_at, threads_[start].waiting_at) == 0) continue;
      if (start > 0) os << "; ";
      os << "threads " << start << "-" << i - 1 << " at " << threads_[start].waiting_at;
      start = i;
    }
    os << " (each barrier needs every thread of the block, cluster.sync every thread of the cluster, each "
          "warp-wide instruction every lane of the warp)";
    return os.str();
  }

  const std::function<void()>& kernel_;
  std::size_t per_block_;  // threads of one block
  std::vector<Thread> threads_;
  std::vector<Warp> warps_;
  std::size_t shared_bytes_;
  std::vector<std::unique_ptr<unsigned char[], Aligned128>> shared_;  // one a block
  std::vector<std::size_t> barrier_arrived_;                          // one a block
  std::size_t cluster_arrived_ = 0;
  std::size_t last_ = 0;  // the thread resumed last (kRoundRobin goes on after it)
  LaunchStats stats_;     // over every block run
  ucontext_t scheduler_{};
  Thread* running_ = nullptr;
#ifdef SCALELAB_SIMT_ASAN
  const void* scheduler_stack_bottom_ = nullptr;
  std::size_t scheduler_stack_size_ = 0;
#endif
};

Blocks& active_blocks(const char* what) {
  if (active == nullptr)
    throw std::logic_error(std::string("simt: ") + what + " outside a kernel launched by simt::launch");
  return *active;
}

// Sets `active` for the life of a launch, and clears it however the launch ends.
class ActiveBlocks {
 public:
  explicit ActiveBlocks(Blocks& b) { active = &b; }
  ~ActiveBlocks() { active = nullptr; }
  ActiveBlocks(const ActiveBlocks&) = delete;
  ActiveBlocks& operator=(const ActiveBlocks&) = delete;
};

}  // namespace

const Builtins& builtins() { return active_blocks("threadIdx/blockIdx").running().builtins; }

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kRoundRobin: return "round robin";
    case Schedule::kFirstWarpAhead: return "first warp ahead";
    case Schedule::kLastWarpAhead: return "last warp ahead";
  }
  return "?";
}

LaunchStats launch(dim3 grid, dim3 block, std::size_t shared_bytes, const std::function<void()>& kernel,
                   Schedule schedule, dim3 cluster) {
  const std::size_t threads = static_cast<std::size_t>(block.x) * block.y * block.z;
  if (threads == 0 || threads % kWarpSize != 0 || threads > 1024)
    throw std::invalid_argument("simt::launch: a block of " + std::to_string(threads) +
                                " threads; the emulation runs whole warps: 32 to 1024 threads, a multiple of 32");
  if (cluster.x == 0 || cluster.y == 0 || cluster.z == 0 || grid.x % cluster.x != 0 || grid.y % cluster.y != 0 ||
      grid.z % cluster.z != 0)
    throw std::invalid_argument("simt::launch: the grid " + describe({grid.x, grid.y, grid.z}) +
                                " is not a whole number of clusters " + describe({cluster.x, cluster.y, cluster.z}));
  if (active != nullptr) throw std::logic_error("simt::launch: called from inside a kernel");
  const int per_cluster = static_cast<int>(cluster.x * cluster.y * cluster.z);
  Blocks b(grid, block, per_cluster, shared_bytes, kernel);
  const ActiveBlocks guard(b);
  std::vector<uint3> indices;  // the cluster's blocks, by rank: x fastest
  for (unsigned z = 0; z < grid.z; z += cluster.z)
    for (unsigned y = 0; y < grid.y; y += cluster.y)
      for (unsigned x = 0; x < grid.x; x += cluster.x) {
        indices.clear();
        for (unsigned cz = 0; cz < cluster.z; ++cz)
          for (unsigned cy = 0; cy < cluster.y; ++cy)
            for (unsigned cx = 0; cx < cluster.x; ++cx) indices.push_back({x + cx, y + cy, z + cz});
        b.run(indices, schedule);
      }
  return b.stats();
}

void count_shared_wavefronts(std::uint64_t wavefronts, std::uint64_t minimum) {
  LaunchStats& s = active_blocks("a shared-memory request").stats();
  s.shared_wavefronts += wavefronts;
  s.shared_wavefronts_min += minimum;
}

unsigned char* shared_memory() { return active_blocks("dynamic shared memory").shared(); }

bool in_shared_memory(const void* p, std::size_t bytes) {
  Blocks& b = active_blocks("shared memory");
  const auto* c = static_cast<const unsigned char*>(p);
  return c >= b.shared() && c + bytes <= b.shared() + b.shared_bytes();
}

void sync_block() { active_blocks("__syncthreads").sync(); }

void sync_cluster() { active_blocks("cluster.sync").sync_cluster(); }

unsigned cluster_block_rank() { return static_cast<unsigned>(active_blocks("cluster.block_rank").running().block); }

void* map_shared_rank(const void* p, unsigned rank) {
  Blocks& b = active_blocks("cluster.map_shared_rank");
  if (!in_shared_memory(p, 1)) fail("cluster.map_shared_rank: the address is not in this block's shared memory");
  if (rank >= static_cast<unsigned>(b.cluster_size()))
    fail("cluster.map_shared_rank: rank " + std::to_string(rank) + " in a cluster of " +
         std::to_string(b.cluster_size()) + " blocks");
  return b.shared_of(static_cast<int>(rank)) + (static_cast<const unsigned char*>(p) - b.shared());
}

void warp_collective(const char* op, const std::type_info& type, const void* in, void* out, WarpCompute compute) {
  active_blocks(op).warp_op(op, type, in, out, compute);
}

void async_copy(void* dst, const void* src, std::size_t bytes, bool valid) {
  Thread& t = active_blocks("cp.async").running();
  if (!in_shared_memory(dst, bytes)) fail("cp.async: the destination is not inside the block's shared memory");
  std::memset(dst, 0xFF, bytes);  // undefined until waited for: NaN
  t.open_group.push_back({dst, src, bytes, valid});
}

void async_commit() {
  Thread& t = active_blocks("cp.async.commit_group").running();
  t.committed.push_back(std::move(t.open_group));
  t.open_group.clear();
}

void async_wait(int pending) {
  Thread& t = active_blocks("cp.async.wait_group").running();
  while (t.committed.size() > static_cast<std::size_t>(pending)) {
    for (const AsyncCopy& c : t.committed.front()) perform(c);
    t.committed.pop_front();
  }
}

void fail(const std::string& what) {
  Blocks& b = active_blocks("simt::fail");
  const Builtins& at = b.running().builtins;
  throw std::runtime_error("simt: block " + describe(at.block_idx) + " thread " + describe(at.thread_idx) + ": " +
                           what);
}

}  // namespace scalelab::simt
