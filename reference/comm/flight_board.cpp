// The flight board's pages: one private page for a lone process, or one shared file per rank,
// mapped by every rank of the job and unlinked at once.
#include "comm/flight_board.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

namespace scalelab {

namespace {

constexpr std::uint64_t kFlightMagic = 0x31305246534c4353ULL;  // "SCLSFR01"

std::string errno_text() { return std::strerror(errno); }

// A directory only this user can enter, for this job alone: /dev/shm (memory) when it exists,
// else $TMPDIR, else /tmp. Empty on failure.
std::string make_job_dir() {
  std::vector<std::string> bases = {"/dev/shm"};
  if (const char* t = std::getenv("TMPDIR"); t && *t) bases.emplace_back(t);
  bases.emplace_back("/tmp");
  for (const std::string& base : bases) {
    std::string path = base + "/scalelab-flight-XXXXXX";
    if (mkdtemp(path.data())) return path;
  }
  return "";
}

std::string page_path(const std::string& dir, int rank) { return dir + "/rank-" + std::to_string(rank); }

}  // namespace

FlightBoard::FlightBoard() : FlightBoard(0, 1) {}

FlightBoard::FlightBoard(int world_rank, int world_size)
    : world_rank_(world_rank),
      private_page_(std::make_unique<FlightPage>()),
      pages_(static_cast<std::size_t>(world_size), nullptr),
      claimed_(kFlightEntries, false) {
  own_ = private_page_.get();
  own_->magic = kFlightMagic;
  own_->world_rank = world_rank;
  own_->pid = static_cast<std::int32_t>(getpid());
  pages_[static_cast<std::size_t>(world_rank)] = own_;
}

FlightBoard::~FlightBoard() {
  for (auto& [address, bytes] : mappings_) munmap(address, bytes);
}

std::shared_ptr<FlightBoard> FlightBoard::open_shared(int world_rank, int world_size,
                                                      const std::function<std::string(const std::string&)>& share,
                                                      const std::function<void()>& barrier) {
  // The constructor is private, so not make_shared.
  std::shared_ptr<FlightBoard> board(new FlightBoard(world_rank, world_size));
  const std::size_t bytes = sizeof(FlightPage);
  const std::string dir = share(world_rank == 0 ? make_job_dir() : std::string());
  if (dir.empty()) {
    board->note_ = "rank 0 could not make a directory for the flight records under /dev/shm, $TMPDIR or /tmp";
    return board;  // every rank took this branch alike: no barriers follow
  }
  // 1. Each rank makes its page. A rank on another machine makes the directory there first.
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) board->note_ = "mkdir " + dir + ": " + errno_text();
  const std::string mine = page_path(dir, world_rank);
  const int fd = open(mine.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd >= 0 && ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
    void* address = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (address != MAP_FAILED) {
      board->mappings_.emplace_back(address, bytes);
      FlightPage* page = new (address) FlightPage();
      page->world_rank = world_rank;
      page->pid = static_cast<std::int32_t>(getpid());
      page->magic = kFlightMagic;
      board->own_ = page;
      board->pages_[static_cast<std::size_t>(world_rank)] = page;
    }
  }
  if (fd >= 0) close(fd);
  barrier();
  // 2. Each rank maps the others' pages, read-only. A page that is not there, or not yet set up
  // (another machine whose /dev/shm we do not see), stays null.
  int unreadable = 0;
  for (int r = 0; r < world_size; ++r) {
    if (r == world_rank) continue;
    const int in = open(page_path(dir, r).c_str(), O_RDONLY);
    struct stat st {};
    if (in < 0 || fstat(in, &st) != 0 || static_cast<std::size_t>(st.st_size) < bytes) {
      if (in >= 0) close(in);
      ++unreadable;
      continue;
    }
    void* address = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, in, 0);
    close(in);
    if (address == MAP_FAILED) {
      ++unreadable;
      continue;
    }
    board->mappings_.emplace_back(address, bytes);
    const auto* page = static_cast<const FlightPage*>(address);
    if (page->magic == kFlightMagic && page->world_rank == r)
      board->pages_[static_cast<std::size_t>(r)] = page;
    else
      ++unreadable;
  }
  if (unreadable > 0)
    board->note_ = std::to_string(unreadable) + " other rank(s) left no readable records in " + dir +
                   " (ranks on other machines cannot share them)";
  barrier();
  // 3. Everyone has mapped what it could: the names can go (the mappings stay valid), so a job
  // that is killed leaves no files behind. The last rank of a machine to get here removes the
  // directory; the others' rmdir fails harmlessly while files remain.
  unlink(mine.c_str());
  barrier();
  rmdir(dir.c_str());
  return board;
}

FlightEntry* FlightBoard::claim() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t i = 0; i < claimed_.size(); ++i)
    if (!claimed_[i]) {
      claimed_[i] = true;
      FlightRecorder::reset(own_->entries[i]);
      return &own_->entries[i];
    }
  overflow_.push_back(std::make_unique<FlightEntry>());
  return overflow_.back().get();
}

void FlightBoard::release(FlightEntry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  FlightRecorder::reset(*entry);
  for (std::size_t i = 0; i < claimed_.size(); ++i)
    if (&own_->entries[i] == entry) claimed_[i] = false;
  for (auto& e : overflow_)
    if (e.get() == entry) e.reset();
  std::erase(overflow_, nullptr);
}

}  // namespace scalelab
