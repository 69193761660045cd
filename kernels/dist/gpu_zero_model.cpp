// ZeRO on the GPU: the step's collectives on the device communicator, the shard's update on the
// GPU or (offload) on the host. The order of scaling, norm, skip, clip and AdamW is the
// single-GPU model's (kernels/model/gpu_train_model.cpp) restricted to the shard.
#include "kernels/dist/gpu_zero_model.hpp"

#include <algorithm>
#include <cmath>
#include <thread>
#include <utility>

#include "core/error.hpp"
#include "kernels/core/cuda_check.hpp"
#include "kernels/layers/residual.hpp"
#include "kernels/optim/adamw.hpp"
#include "kernels/optim/grad_ops.hpp"
#include "kernels/precision/cast.hpp"
#include "model/gpt.hpp"
#include "precision/half.hpp"

namespace scalelab::cuda {

namespace {

// The host AdamW of offload runs on this many threads over contiguous chunks of the shard; each
// element's update is independent, so the result does not depend on the count.
std::size_t host_threads(std::size_t n) {
  constexpr std::size_t kMinChunk = std::size_t{1} << 18;  // below this a thread costs more than it saves
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  return std::clamp<std::size_t>(n / kMinChunk, 1, std::min<std::size_t>(cores, 16));
}

// fn(chunk, begin, end) over `chunks` contiguous pieces of [first, last), one thread each.
template <typename Fn>
void for_chunks(std::size_t first, std::size_t last, std::size_t chunks, Fn fn) {
  const BlockPartition cut{last - first, static_cast<int>(chunks)};
  auto piece = [&](std::size_t c) {
    const std::size_t b = first + cut.offset(static_cast<int>(c));
    fn(c, b, b + cut.size(static_cast<int>(c)));
  };
  std::vector<std::thread> workers;
  for (std::size_t c = 1; c < chunks; ++c) workers.emplace_back(piece, c);
  piece(0);
  for (std::thread& w : workers) w.join();
}

// Offload's AdamW runs in slabs of at least this many elements, each copied to the GPU while the
// next is computed.
constexpr std::size_t kSlab = std::size_t{1} << 22;

}  // namespace

PinnedRegistration::PinnedRegistration(void* ptr, std::size_t bytes) {
  if (ptr == nullptr || bytes == 0) return;
  SCALELAB_CUDA_CHECK(cudaHostRegister(ptr, bytes, cudaHostRegisterDefault));
  ptr_ = ptr;
}

PinnedRegistration::~PinnedRegistration() {
  if (ptr_) cudaHostUnregister(ptr_);  // nothing to do about a failure in a destructor
}

template <typename F>
GpuZeroModel<F>::GpuZeroModel(const GPTConfig& config, int stage, Communicator& dp, const DeviceCommFactory& make_comm,
                              MemoryTracker* tracker, bool offload)
    : stage_(stage),
      offload_(offload),
      dp_(dp),
      tracker_(tracker),
      shards_((config.validate(), config), dp.rank(), dp.size()),
      gpt_(config, tracker, GpuOptions{false, stage == 1, stage <= 2, ModelSlice{}}),
      dev_(make_comm(dp, gpt_.stream())),
      param_shard_(stage == 3 ? shards_.size() : 0, MemCategory::kParams, tracker),
      grad_shard_(stage >= 2 && !offload ? shards_.size() : 0, MemCategory::kGrads, tracker),
      working_(shards_.units().size()),
      master_(kMixed && !offload ? shards_.size() : 0, MemCategory::kOptimizer, tracker),
      m_(offload ? 0 : shards_.size(), MemCategory::kOptimizer, tracker),
      v_(offload ? 0 : shards_.size(), MemCategory::kOptimizer, tracker),
      sum_squares_(1, MemCategory::kWorkspace, tracker),
      partials_(kSumSquaresBlocks, MemCategory::kWorkspace, tracker),
      host_master_(offload ? shards_.size() : 0, MemCategory::kParams, &host_tracker_),
      host_grads_(offload ? shards_.size() : 0, MemCategory::kGrads, &host_tracker_),
      host_half_(offload && kMixed ? shards_.size() : 0, MemCategory::kWorkspace, &host_tracker_),
      host_landing_(offload && !kMixed && stage == 2 ? shards_.size() : 0, MemCategory::kWorkspace, &host_tracker_),
      pin_master_(host_master_.data(), host_master_.bytes()),
      pin_grads_(host_grads_.data(), host_grads_.bytes()),
      pin_half_(host_half_.data(), host_half_.bytes()),
      pin_landing_(host_landing_.data(), host_landing_.bytes()) {
  SCALELAB_CHECK(dev_ && dev_->memory_space() == MemorySpace::kDevice && dev_->size() == dp.size() &&
                     dev_->rank() == dp.rank(),
                 "ZeRO on the GPU needs a device-memory communicator over the same ranks as the data-parallel group");
  require(stage >= 1 && stage <= 3, "zero", "ZeRO stage " + std::to_string(stage) + " does not exist",
          "use --zero 1 (optimizer state), 2 (+ gradients) or 3 (+ parameters)");
  SCALELAB_CHECK(!offload || stage <= 2, "offload with ZeRO-", stage, " on the GPU (the strategy refuses it)");
  gpt_.set_grad_ready_hook([this](std::size_t offset) { on_grads_ready(offset); });
  if (stage >= 2) gpt_.set_grad_storage([this](std::size_t offset) { return grad_place(offset); });
  if (stage == 3)
    gpt_.set_param_source([this](std::size_t offset, bool backward) { return param_place(offset, backward); });
}

template <typename F>
GpuZeroModel<F>::~GpuZeroModel() {
  // Reductions still in flight (an exception mid-backward) complete before their buffers go.
  try {
    finish_reductions(0);
    release_gathered();
    copy_stream_.synchronize();
  } catch (...) {  // NOLINT(bugprone-empty-catch): nothing to do about it in a destructor
  }
}

template <typename F>
void GpuZeroModel<F>::sync() const {
  SCALELAB_CUDA_CHECK(cudaStreamSynchronize(gpt_.stream()));
}

template <typename F>
void GpuZeroModel<F>::init_weights(std::uint64_t seed) {
  // Every rank draws the same whole model (same seed) and uploads it: no communication.
  std::vector<float> w(shards_.num_params());
  init_gpt2_weights(layout(), config().num_layers, w.data(), seed);
  DeviceBuffer<float> wide = to_device(w, MemCategory::kWorkspace, tracker_);
  // A copy for fp32, rounding for half: every parameter (stages 1, 2) or this rank's shard (3).
  if (stage_ <= 2)
    cast(gpt_.params().data(), wide.data(), w.size(), gpt_.stream());
  else
    cast(param_shard_.data(), wide.data() + shards_.begin(), shards_.size(), gpt_.stream());
  if (master_.size() > 0)
    SCALELAB_CUDA_CHECK(cudaMemcpyAsync(master_.data(), wide.data() + shards_.begin(), master_.bytes(),
                                        cudaMemcpyDeviceToDevice, gpt_.stream()));
  std::copy(w.begin() + static_cast<std::ptrdiff_t>(shards_.begin()),
            w.begin() + static_cast<std::ptrdiff_t>(shards_.begin() + host_master_.size()), host_master_.data());
  sync();
}

template <typename F>
const float* GpuZeroModel<F>::master_params() const {
  const std::size_t n = shards_.size();
  host_params_.resize(n);
  if (offload_) {
    std::copy(host_master_.data(), host_master_.data() + n, host_params_.data());
  } else if constexpr (kMixed) {
    master_.copy_to_host(host_params_.data(), n);
  } else {
    SCALELAB_CUDA_CHECK(cudaMemcpy(host_params_.data(), own_params(), n * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return host_params_.data();
}

template <typename F>
void GpuZeroModel<F>::set_master_params(const float* values) {
  const std::size_t n = shards_.size();
  if (offload_) std::copy(values, values + n, host_master_.data());
  if (master_.size() > 0) master_.copy_from_host(values, n);
  DeviceBuffer<float> wide(n, MemCategory::kWorkspace, tracker_);
  wide.copy_from_host(values, n);
  cast(own_params(), wide.data(), n, gpt_.stream());
  sync();
  if (stage_ <= 2) all_gather_params();  // stage 3 gathers a unit when the model reads it
}

template <typename F>
void GpuZeroModel<F>::zero_grad() {
  gpt_.zero_grad();
  if (grad_shard_.size() > 0)
    SCALELAB_CUDA_CHECK(cudaMemsetAsync(grad_shard_.data(), 0, grad_shard_.bytes(), gpt_.stream()));
  first_contribution_ = true;
}

template <typename F>
double GpuZeroModel<F>::forward(const int* tokens, const int* targets, int B, int T) {
  require_nothing_gathered("forward");
  const double t0 = timeline_.now_us();
  const double loss = gpt_.forward(tokens, targets, B, T);  // synchronises: the loss is on the host
  timeline_.add("forward", "compute", 0, t0, timeline_.now_us());
  release_gathered();  // stage 3: the pass's gathered parameters
  return loss;
}

template <typename F>
void GpuZeroModel<F>::backward(double loss_scale) {
  require_nothing_gathered("backward");
  const double t0 = timeline_.now_us();
  gpt_.backward(static_cast<float>(loss_scale));  // the hook starts each unit's reduction (last micro-batch)
  sync();                                         // so the timeline's interval is the GPU's, not the enqueueing's
  timeline_.add("backward", "compute", 0, t0, timeline_.now_us());
  release_gathered();  // stage 3: the pass's gathered parameters
  if (communicating_) {
    finish_reductions(0);
    // Stage 2 + offload: this micro-batch's last pieces added on the host before the next one's
    // copies land in the same places (and before the step reads the shard).
    add_landed(0);
    reduced_ = true;
    first_contribution_ = false;  // stage 2: the next micro-batch's sums add to these
    for (const auto& w : working_) SCALELAB_CHECK(w.size() == 0, "a unit's gradients were not reduce-scattered");
  } else if (--backwards_left_ == 0) {
    communicating_ = true;  // the next backward is the step's last
  }
}

template <typename F>
void GpuZeroModel<F>::begin_step(int micro_batches) {
  SCALELAB_CHECK(micro_batches >= 1, "begin_step: ", micro_batches, " micro-batches");
  SCALELAB_CHECK(reductions_.empty(), "a step began with reductions in flight");
  // Stage 1: the earlier micro-batches add up locally; stage 2 reduces every one.
  backwards_left_ = stage_ == 1 ? micro_batches - 1 : 0;
  communicating_ = backwards_left_ == 0;
  reduced_ = false;
  timeline_.clear();
}

template <typename F>
void GpuZeroModel<F>::on_grads_ready(std::size_t offset) {
  const ZeroUnit* unit = shards_.unit_starting_at(offset);
  if (unit == nullptr || !communicating_) return;
  // The unit's kernels are enqueued on the model's stream; the device communicator orders its
  // reduce after them (NCCL: an event; host staging: a synchronisation). Stage 1 reduces in
  // place: this rank's piece of the sum lands where its piece of the unit was.
  F* g = gpt_.grads().data();
  Reduction& r = reductions_.emplace_back();
  r.unit = unit;
  r.start_us = timeline_.now_us();
  const F* send = nullptr;
  F* recv = nullptr;
  if (stage_ == 1) {
    send = g + unit->begin;
    recv = g + shards_.piece_begin(*unit);
  } else {
    r.grads = std::move(working_[static_cast<std::size_t>(unit - shards_.units().data())]);
    send = r.grads.data();
    if (offload_) {  // in place, as stage 1: the piece goes to the host from the working buffer
      recv = r.grads.data() + (shards_.piece_begin(*unit) - unit->begin);
    } else {
      recv = grad_shard_.data() + (shards_.piece_begin(*unit) - shards_.begin());
      if (!first_contribution_) {  // a later micro-batch: received apart, then added
        r.recv = DeviceBuffer<F>(shards_.piece_size(*unit), MemCategory::kComm, tracker_);
        recv = r.recv.data();
      }
    }
  }
  r.request = dev_->ireduce_scatter_v(send, recv, unit->pieces, DType<F>::comm_type, ReduceOp::kSum);
  // Earlier units that are done: their pieces start for the host (offload) without waiting.
  while (reductions_.size() > 1 && dev_->test(reductions_.front().request)) {
    finish_reduction(reductions_.front());
    reductions_.pop_front();
  }
}

// ---- stage 3: parameters gathered when the model reads them -------------------------------

template <typename F>
void GpuZeroModel<F>::start_gather(Gathered& g, const ZeroUnit& unit) {
  g.unit = &unit;
  g.weights = DeviceBuffer<F>(unit.size(), MemCategory::kParams, tracker_);
  g.start_us = timeline_.now_us();
  const F* mine = param_shard_.data() + (shards_.piece_begin(unit) - shards_.begin());
  g.request = dev_->iall_gather_v(mine, g.weights.data(), unit.pieces, DType<F>::comm_type);
  g.pending = true;
}

template <typename F>
void GpuZeroModel<F>::finish_gather(Gathered& g) {
  if (!g.pending) return;
  dev_->wait(g.request);
  g.pending = false;
  timeline_.add("all-gather " + g.unit->name, "comm", 1, g.start_us, timeline_.now_us());
}

template <typename F>
F* GpuZeroModel<F>::param_place(std::size_t offset, bool backward) {
  const ZeroUnit* unit = shards_.unit_starting_at(offset);
  SCALELAB_CHECK(unit != nullptr, "GpuGPT asked for the parameters of no unit (offset ", offset, ")");
  if (unit->block < 0) {  // the embeddings or ln_f: gathered once per pass, kept until its end
    Gathered& root = unit == &shards_.embeddings() ? root_emb_ : root_lnf_;
    if (root.weights.size() == 0) start_gather(root, *unit);
    finish_gather(root);
    return root.weights.data();
  }
  // A block: this one gathered (or waited for), the next one in the pass's direction started,
  // every other block freed (the kernels that read it are ahead in the stream, and a buffer is
  // freed in stream order).
  const int l = unit->block, next = backward ? l - 1 : l + 1;
  auto find = [this](int block) {
    return std::find_if(blocks_.begin(), blocks_.end(), [block](const Gathered& g) { return g.unit->block == block; });
  };
  for (auto it = blocks_.begin(); it != blocks_.end();) {
    if (it->unit->block == l || it->unit->block == next) {
      ++it;
    } else {
      finish_gather(*it);
      it = blocks_.erase(it);
    }
  }
  if (find(l) == blocks_.end()) start_gather(blocks_.emplace_back(), shards_.block(l));
  Gathered& here = *find(l);
  if (next >= 0 && next < config().num_layers && find(next) == blocks_.end())
    start_gather(blocks_.emplace_back(), shards_.block(next));
  finish_gather(here);
  return here.weights.data();
}

template <typename F>
void GpuZeroModel<F>::require_nothing_gathered(const char* pass) const {
  // A unit still gathered from the last pass holds the parameters of before the last update: a
  // pass must gather its own (the first GPU run of stage 3 reused them, and trained wrong).
  SCALELAB_CHECK(root_emb_.weights.size() == 0 && root_lnf_.weights.size() == 0 && blocks_.empty(),
                 "ZeRO-3: parameters gathered for an earlier pass are still held at the start of ", pass);
}

template <typename F>
void GpuZeroModel<F>::release_gathered() {
  for (Gathered* g : {&root_emb_, &root_lnf_}) {
    finish_gather(*g);
    *g = Gathered{};
  }
  for (Gathered& g : blocks_) finish_gather(g);
  blocks_.clear();
}

template <typename F>
F* GpuZeroModel<F>::grad_place(std::size_t offset) {
  const ZeroUnit* unit = shards_.unit_starting_at(offset);
  SCALELAB_CHECK(unit != nullptr, "GpuGPT asked for the gradients of no unit (offset ", offset, ")");
  DeviceBuffer<F>& w = working_[static_cast<std::size_t>(unit - shards_.units().data())];
  SCALELAB_CHECK(w.size() == 0, unit->name, "'s gradients asked for twice in one backward");
  // At most one block's gradients still travel while this block's are computed.
  if (unit->block >= 0) finish_reductions(1);
  w = DeviceBuffer<F>(unit->size(), MemCategory::kGrads, tracker_);  // zeroed: backward accumulates
  return w.data();
}

template <typename F>
void GpuZeroModel<F>::finish_reduction(Reduction& r) {
  // After wait() the sum is in device memory for any stream (NCCL: its event has completed;
  // host staging: its copy back was synchronised), so a copy enqueued from here on reads it.
  dev_->wait(r.request);
  timeline_.add("reduce-scatter " + r.unit->name, "comm", 1, r.start_us, timeline_.now_us());
  if (r.recv.size() > 0) {  // stage 2, a later micro-batch: shard += piece (fp32 add, rounded once)
    F* mine = grad_shard_.data() + (shards_.piece_begin(*r.unit) - shards_.begin());
    residual_forward(mine, mine, r.recv.data(), r.recv.size(), gpt_.stream());
  }
  if (!offload_) return;
  if (stage_ == 2) {
    land_piece(r);
  } else {
    const std::size_t at = shards_.piece_begin(*r.unit) - shards_.begin();
    copy_out(own_grads() + at, at, shards_.piece_size(*r.unit));
  }
}

template <typename F>
void GpuZeroModel<F>::land_piece(Reduction& r) {
  // Stage 2 + offload: this rank's piece, reduced in place in the unit's working buffer, goes to
  // the host on the copy stream: to host_grads_ itself (fp32, the step's first micro-batch), or
  // to a landing buffer in the model's type, from which the host adds it once the copy is done.
  const ZeroUnit& unit = *r.unit;
  const std::size_t count = shards_.piece_size(unit);
  if (count > 0) {
    Landing& l = landings_.emplace_back();
    l.at = shards_.piece_begin(unit) - shards_.begin();
    l.count = count;
    l.first = first_contribution_;
    copy_out(r.grads.data() + (shards_.piece_begin(unit) - unit.begin), l.at, count);
    l.copied.record(copy_stream_.get());
    // The buffer is freed (and its memory handed to the next allocation) on the legacy default
    // stream (DeviceBuffer): that stream waits for the copy first. (A blocking stream's work
    // orders the legacy stream anyway; the event says so and holds if the streams change.)
    SCALELAB_CUDA_CHECK(cudaStreamWaitEvent(cudaStreamLegacy, l.copied.get(), 0));
  }
  r.grads = DeviceBuffer<F>{};
  // Pieces copied before this one are added now (their copies are done or nearly), so the
  // host's additions overlap the backward still to come; the newest stays in flight.
  add_landed(1);
}

template <typename F>
void GpuZeroModel<F>::add_landed(std::size_t keep) {
  // In copy order: each piece waits for its own copy (the event), then is added.
  while (landings_.size() > keep) {
    landings_.front().copied.synchronize();
    add_to_host_grads(landings_.front());
    landings_.pop_front();
  }
}

template <typename F>
void GpuZeroModel<F>::add_to_host_grads(const Landing& l) {
  // The host's fp32 gradient shard, ZeRO-Offload's arithmetic: the step's first micro-batch
  // assigns its piece (widened from F: exact), later ones add theirs in fp32, so the sum is
  // never rounded to F. fp32's first piece landed in place: nothing to do.
  float* g = host_grads_.data() + l.at;
  if constexpr (kMixed) {
    const std::uint16_t* h = host_half_.data() + l.at;
    for_chunks(0, l.count, host_threads(l.count), [&](std::size_t, std::size_t b, std::size_t e) {
      if (l.first) {
        half_to_float(g + b, h + b, e - b, kHalfFormat);
        return;
      }
      constexpr std::size_t kTile = 1024;  // widened through a small buffer: the bulk conversion
      float wide[kTile];
      for (std::size_t i = b; i < e; i += kTile) {
        const std::size_t n = std::min(kTile, e - i);
        half_to_float(wide, h + i, n, kHalfFormat);
        for (std::size_t j = 0; j < n; ++j) g[i + j] += wide[j];
      }
    });
  } else if (!l.first) {
    const float* piece = host_landing_.data() + l.at;
    for_chunks(0, l.count, host_threads(l.count), [&](std::size_t, std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) g[i] += piece[i];
    });
  }
}

template <typename F>
void GpuZeroModel<F>::finish_reductions(std::size_t keep) {
  while (reductions_.size() > keep) {
    finish_reduction(reductions_.front());
    reductions_.pop_front();
  }
}

template <typename F>
void GpuZeroModel<F>::copy_out(const F* from, std::size_t at, std::size_t count) {
  // Offload: shard elements [at, at + count) of the summed gradients, read at `from`, to the
  // host in the model's type, on the copy stream (the copy engine runs beside the backward
  // kernels): half into host_half_; fp32 into host_grads_, except a later micro-batch's under
  // stage 2, which lands apart to be added.
  if (count == 0) return;
  void* landing = nullptr;
  if constexpr (kMixed)
    landing = host_half_.data() + at;
  else
    landing = stage_ == 2 && !first_contribution_ ? host_landing_.data() + at : host_grads_.data() + at;
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(landing, from, count * sizeof(F), cudaMemcpyDeviceToHost, copy_stream_.get()));
}

template <typename F>
void GpuZeroModel<F>::reduce_gradients() {
  SCALELAB_CHECK(stage_ == 1, "ZeRO-2 reduces during backward; its step came without one");
  // The whole buffer at once: a step whose gradients did not come from backward (a test's), or
  // a backward that never reduced.
  const double t0 = timeline_.now_us();
  F* g = gpt_.grads().data();
  dev_->reduce_scatter(g, g + shards_.begin(), shards_.num_params(), DType<F>::comm_type, ReduceOp::kSum);
  timeline_.add("reduce-scatter gradients", "comm", 1, t0, timeline_.now_us());
  if (offload_) copy_out(own_grads(), 0, shards_.size());
}

template <typename F>
void GpuZeroModel<F>::all_gather_params() {
  const double t0 = timeline_.now_us();
  dev_->all_gather(own_params(), gpt_.params().data(), shards_.num_params(), DType<F>::comm_type);
  timeline_.add("all-gather parameters", "comm", 1, t0, timeline_.now_us());
}

template <typename F>
TrainModel::StepOutcome GpuZeroModel<F>::optimizer_step(AdamW& optimizer, double lr, double grad_scale, double clip) {
  SCALELAB_CHECK(optimizer.size() == shards_.size(), "optimizer for ", optimizer.size(), " parameters, shard has ",
                 shards_.size());
  if (!reduced_) reduce_gradients();
  reduced_ = false;
  const StepOutcome out = offload_ ? offload_step(optimizer, lr, grad_scale, clip)
                                   : device_step(optimizer, lr, grad_scale, clip);
  // Stages 1, 2: every rank needs every parameter now; stage 3 gathers them when it reads them.
  // A skipped step changed nothing anywhere.
  if (!out.skipped && stage_ <= 2) all_gather_params();
  return out;
}

template <typename F>
TrainModel::StepOutcome GpuZeroModel<F>::device_step(AdamW& optimizer, double lr, double grad_scale, double clip) {
  StepOutcome out;
  const std::size_t n = shards_.size();
  cudaStream_t st = gpt_.stream();
  F* g = own_grads();
  if constexpr (!kMixed) {
    if (grad_scale != 1.0) scale_inplace(g, static_cast<float>(grad_scale), n, st);
  }
  // This shard's sum of squares in double, added over the ranks, so every rank takes the same
  // decision on the same norm. The sum is also the inf/NaN check (as on one GPU,
  // kernels/model/gpu_train_model.cpp): an inf or NaN in any rank's shard makes that rank's sum
  // non-finite, finite gradients cannot overflow it, and inf and NaN survive the all-reduce's
  // additions (no inf - inf: every term is >= 0), so every rank skips together.
  double ss = 0;
  sum_squares(sum_squares_.data(), partials_.data(), g, n, st);
  SCALELAB_CUDA_CHECK(cudaMemcpyAsync(&ss, sum_squares_.data(), sizeof ss, cudaMemcpyDeviceToHost, st));
  sync();  // ss is on the host
  dp_.all_reduce(&ss, 1);
  out.grad_norm = std::sqrt(ss) * (kMixed ? grad_scale : 1.0);
  if (!std::isfinite(out.grad_norm)) {  // an inf/NaN on any rank: every rank skips
    out.skipped = true;
    return out;
  }
  const double t0 = timeline_.now_us();
  const double coef = clip > 0 ? clip / (out.grad_norm + 1e-6) : 1.0;  // PyTorch's clip_grad_norm_
  optimizer.begin_step();
  const AdamWScalars k = adamw_scalars(optimizer.config(), optimizer.step_count(), lr);
  if constexpr (kMixed) {
    const double factor = grad_scale * (coef < 1.0 ? coef : 1.0);
    adamw_update_mixed(own_params(), master_.data(), g, m_.data(), v_.data(), n, static_cast<float>(factor), k, st);
  } else {
    if (coef < 1.0) scale_inplace(g, static_cast<float>(coef), n, st);
    adamw_update(own_params(), g, m_.data(), v_.data(), n, k, st);
  }
  sync();
  timeline_.add("AdamW on the shard (GPU)", "compute", 0, t0, timeline_.now_us());
  return out;
}

template <typename F>
TrainModel::StepOutcome GpuZeroModel<F>::offload_step(AdamW& optimizer, double lr, double grad_scale, double clip) {
  StepOutcome out;
  const std::size_t n = shards_.size();
  float* g = host_grads_.data();
  float* master = host_master_.data();
  double t0 = timeline_.now_us();
  copy_stream_.synchronize();  // the gradient pieces copied out during backward (or just now)
  add_landed(0);               // stage 2: every piece in host_grads_ (backward added them already)
  timeline_.add("gradient shard to host (rest)", "comm", 2, t0, timeline_.now_us());
  // The CPU's fp32 step (train/fp32_model.cpp) on host threads: widen (mixed stage 1; stage 2's
  // shard was summed in fp32 as it landed), scale, norm, skip, clip, AdamW.
  t0 = timeline_.now_us();
  const std::size_t threads = host_threads(n);
  std::vector<double> squares(threads, 0.0);
  const float s = static_cast<float>(grad_scale);
  for_chunks(0, n, threads, [&](std::size_t c, std::size_t b, std::size_t e) {
    if (kMixed && stage_ == 1) half_to_float(g + b, host_half_.data() + b, e - b, kHalfFormat);
    double sum = 0;
    for (std::size_t i = b; i < e; ++i) {
      if (grad_scale != 1.0) g[i] *= s;
      sum += static_cast<double>(g[i]) * g[i];
    }
    squares[c] = sum;
  });
  double ss = 0;
  for (double x : squares) ss += x;  // in chunk order: the same on every run
  dp_.all_reduce(&ss, 1);
  out.grad_norm = std::sqrt(ss);
  if (!std::isfinite(out.grad_norm)) {  // an inf/NaN on any rank: every rank skips
    out.skipped = true;
    timeline_.add("norm on the host", "compute", 2, t0, timeline_.now_us());
    return out;
  }
  // AdamW in slabs: while the threads update slab k + 1, the copy engine takes slab k (rounded to
  // the model's type) into the parameters, so the copies in overlap the host's compute.
  optimizer.begin_step();
  const std::size_t slab = std::max<std::size_t>(kSlab, n / 8);
  for (std::size_t at = 0; at < n; at += slab) {
    const std::size_t end = std::min(n, at + slab);
    for_chunks(at, end, host_threads(end - at), [&](std::size_t, std::size_t b, std::size_t e) {
      if (clip > 0) clip_to_norm(g + b, e - b, out.grad_norm, clip);
      optimizer.update_range(master + b, g + b, b, e - b, lr);
      if constexpr (kMixed) float_to_half(host_half_.data() + b, master + b, e - b, kHalfFormat);  // nearest even
    });
    const void* from = kMixed ? static_cast<const void*>(host_half_.data() + at)
                              : static_cast<const void*>(master + at);
    SCALELAB_CUDA_CHECK(
        cudaMemcpyAsync(own_params() + at, from, (end - at) * sizeof(F), cudaMemcpyHostToDevice, copy_stream_.get()));
  }
  copy_stream_.synchronize();  // the all-gather reads the parameters next
  timeline_.add("AdamW on the host, parameters to the GPU", "compute", 2, t0, timeline_.now_us());
  return out;
}

template <typename F>
void GpuZeroModel<F>::download_optimizer_state(AdamW& optimizer) const {
  if (offload_) return;  // the trainer's AdamW is the state itself
  SCALELAB_CHECK(optimizer.size() == shards_.size(), "optimizer size ", optimizer.size());
  m_.copy_to_host(optimizer.m(), shards_.size());
  v_.copy_to_host(optimizer.v(), shards_.size());
}

template <typename F>
void GpuZeroModel<F>::upload_optimizer_state(const AdamW& optimizer) {
  if (offload_) return;
  SCALELAB_CHECK(optimizer.size() == shards_.size(), "optimizer size ", optimizer.size());
  m_.copy_from_host(optimizer.m(), shards_.size());
  v_.copy_from_host(optimizer.v(), shards_.size());
}

template <typename F>
ZeroStateBytes GpuZeroModel<F>::state_formula() const {
  // Stage 1 per element: the model's parameters and gradients in F, the shard's optimizer state
  // (m, v, and the fp32 master in mixed precision) on the GPU, or none there under offload;
  // stage 2 counts the gradients for the shard, stage 3 the parameters too. Stage 2 + offload
  // keeps only the parameters (its gradient shard is on the host; the working set during
  // backward is not model state).
  if (offload_ && stage_ == 2) return ZeroStateBytes{sizeof(F) * shards_.num_params(), 0, 0};
  const std::size_t optimizer = offload_ ? 0 : (kMixed ? 12 : 8);
  return zero_state_bytes(stage_, shards_.num_params(), shards_.size(),
                          ZeroStateBytes{sizeof(F), sizeof(F), optimizer});
}

template <typename F>
std::vector<float> GpuZeroModel<F>::grad_shard_to_host() const {
  const std::size_t n = shards_.size();
  if (offload_ && stage_ == 2) {  // the host's fp32 shard: every piece was added by backward's end
    SCALELAB_CHECK(landings_.empty(), "gradient pieces still on their way to the host");
    return {host_grads_.data(), host_grads_.data() + n};
  }
  DeviceBuffer<float> wide(n, MemCategory::kWorkspace, nullptr);  // a test's copy, not counted
  cast(wide.data(), own_grads(), n, gpt_.stream());
  sync();
  return wide.to_host();
}

template class GpuZeroModel<float>;
template class GpuZeroModel<bf16>;
template class GpuZeroModel<fp16>;

std::unique_ptr<ZeroTrainModel> make_gpu_zero_model(const GPTConfig& config, int stage, const std::string& precision,
                                                    Communicator& dp, const DeviceCommFactory& make_comm,
                                                    MemoryTracker* tracker, bool offload) {
  if (precision == "fp32") return std::make_unique<GpuZeroModel<float>>(config, stage, dp, make_comm, tracker, offload);
  if (precision == "bf16") return std::make_unique<GpuZeroModel<bf16>>(config, stage, dp, make_comm, tracker, offload);
  if (precision == "fp16") return std::make_unique<GpuZeroModel<fp16>>(config, stage, dp, make_comm, tracker, offload);
  throw ConfigError("precision: unknown precision '" + precision + "'; use fp32, bf16 or fp16");
}

}  // namespace scalelab::cuda
