// Stage 04: distributed data parallelism (DDP). Every rank holds the whole model and trains on
// its own B/d rows of each batch; before the optimizer step the gradients are summed across
// ranks, so every rank applies the same update and the parameters stay identical.
//
//   naive     after backward, one all-reduce per parameter tensor
//   bucketed  the flat gradient buffer is cut into buckets of whole tensors, in the reverse of
//             the layout order, which is the order backward produces them (ln_f, the last
//             block, ..., the first block, the embeddings); the first bucket is small so that
//             communication starts early. A bucket's non-blocking all-reduce starts as soon as
//             the model reports its last gradient final (GPTModel::set_grad_ready_hook), so it
//             runs while backward computes the earlier layers. Only the last micro-batch of an
//             accumulation step communicates. Because the parameters are one flat buffer, a
//             bucket is a range of it: no copy into a separate bucket buffer (PyTorch needs one).
//
// The loss of each rank is scaled by 1/d before backward, so the summed gradients are the
// gradients of the mean loss over the whole batch.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "dist/timeline.hpp"
#include "model/params.hpp"
#include "model/train_model.hpp"

namespace scalelab {

struct DdpOptions {
  enum class Mode { kNaive, kBucketed };
  enum class Algorithm { kBuiltin, kRing };  // the backend's all-reduce, or comm/ring.hpp's
  Mode mode = Mode::kBucketed;
  Algorithm algorithm = Algorithm::kBuiltin;
  std::size_t bucket_bytes = std::size_t(25) << 20;       // PyTorch's default bucket_cap_mb
  std::size_t first_bucket_bytes = std::size_t(1) << 20;  // PyTorch's first bucket
  // "naive" or "bucketed"; "builtin" or "ring"; ConfigError otherwise.
  static Mode parse_mode(const std::string& text);
  static Algorithm parse_algorithm(const std::string& text);
};

// [begin, end) element ranges of the flat gradient buffer, in launch order (from the end of the
// buffer): whole tensors, the first bucket up to first_bytes, the others up to bucket_bytes (a
// tensor larger than the cap gets a bucket of its own).
std::vector<std::pair<std::size_t, std::size_t>> plan_buckets(const ParamLayout& layout, std::size_t first_bytes,
                                                              std::size_t bucket_bytes);

// Collective: every rank passes a description of what it was started with (config, seed, ...);
// if any differs from rank 0's, every rank throws the same ConfigError naming the first rank
// that differs and both descriptions. Catches mismatched launches before they train garbage.
void check_replicas_agree(Communicator& comm, const std::string& description);

struct DdpStepReport {
  double hidden_fraction = 0;  // of the all-reduce time that overlapped backward
  double comm_seconds = 0;     // time covered by at least one all-reduce
  std::size_t buckets = 0;
};

class DataParallel {
 public:
  // Registers itself as the model's grad-ready listener (bucketed mode); comm is the dp group.
  DataParallel(Communicator& comm, TrainModel& model, const DdpOptions& options);
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Before the micro-batches of one optimizer step: only the last of `micro_batches` backward
  // passes communicates.
  void begin_step(int micro_batches);
  // After the last backward: starts what has not started, waits for every all-reduce. The
  // model's gradients then hold the sum over ranks.
  DdpStepReport finish_step();

  const std::vector<std::pair<std::size_t, std::size_t>>& bucket_ranges() const { return ranges_; }
  // All-reduces per step: one per tensor (naive) or one per bucket (bucketed).
  std::size_t bucket_count() const {
    return options_.mode == DdpOptions::Mode::kNaive ? model_.layout().tensors().size() : ranges_.size();
  }
  Timeline& timeline() { return timeline_; }
  const Timeline& timeline() const { return timeline_; }
  // The last step's communicating backward: the offsets its notifications reported, in order
  // (all gradients at or past an offset are final), and for each bucket the notification whose
  // handling launched it (an index into notified_offsets(); -1: finish_step launched it). Orders,
  // not times: a test checks that each bucket starts at the notification that completes it.
  const std::vector<std::size_t>& notified_offsets() const { return notified_offsets_; }
  std::vector<int> launch_notifications() const;
  const DdpOptions& options() const { return options_; }

 private:
  struct Bucket {
    std::size_t begin = 0, end = 0;
    Request request;
    bool started = false, done = false;
    double start_us = 0, end_us = 0;
    int launched_at = -1;  // see launch_notifications()
  };
  void on_grads_ready(std::size_t offset);
  void launch(Bucket& b);
  void poll();
  void all_reduce_now(TrainModel::GradBuffer data, std::size_t count);

  Communicator& comm_;
  TrainModel& model_;
  DdpOptions options_;
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;
  std::vector<Bucket> buckets_;
  std::size_t next_ = 0;                       // the next bucket to launch
  int backwards_left_ = 0;                     // backward passes before the communicating one
  bool active_ = false;                        // this backward communicates
  bool notified_ = false;                      // the communicating backward has sent its first notification
  double last_ready_us_ = 0;                   // when the previous notification was handled
  std::vector<std::size_t> notified_offsets_;  // see notified_offsets()
  Timeline timeline_;
};

}  // namespace scalelab
