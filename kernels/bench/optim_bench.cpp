// The optimizer-step kernels over all GPT-2 parameters (see kernel_bench.hpp). fp32 training
// runs adamw_update; bf16 mixed precision runs adamw_update_mixed (fp32 master weights, m, v;
// bf16 parameters and gradients) and the fp32 -> bf16 cast.
#include <type_traits>

#include "kernels/bench/kernel_bench.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/dtype.hpp"
#include "kernels/optim/adamw.hpp"
#include "kernels/optim/grad_ops.hpp"
#include "kernels/precision/cast.hpp"

namespace scalelab::cuda {

template <typename F>
std::vector<KernelRow> bench_optimizer(const BenchShape& shape, const BenchOptions& options, const Ceilings& ceilings) {
  const std::size_t n = shape.num_params();
  const double s = sizeof(F);
  const Stream stream;
  const cudaStream_t st = stream.get();
  RowRecorder r(options, ceilings, st, DType<F>::name);
  auto buffer = [n](MemCategory category) { return DeviceBuffer<float>(n, category, nullptr); };

  DeviceBuffer<F> grads(n, MemCategory::kGrads, nullptr);
  fill_random(grads, 101, 1e-4f, 1.0f);
  {
    DeviceBuffer<float> master = buffer(MemCategory::kParams), m = buffer(MemCategory::kOptimizer);
    DeviceBuffer<float> v = buffer(MemCategory::kOptimizer);
    fill_random(master, 102);
    const AdamWScalars k = adamw_scalars(AdamWConfig{}, 1, 3e-4);
    if constexpr (std::is_same_v<F, float>) {
      // read params, grads, m, v; write params, m, v: 7 x 4 bytes per parameter
      r.memory("adamw", "update", 28.0 * n,
               [&] { adamw_update(master.data(), grads.data(), m.data(), v.data(), n, k, st); });
    } else {
      DeviceBuffer<F> params(n, MemCategory::kParams, nullptr);
      // read master, m, v (12) and the half gradient (2); write master, m, v (12) and the half
      // parameters (2): 28 bytes per parameter, as in fp32
      r.memory("adamw mixed", "update", (24.0 + 2 * s) * n, [&] {
        adamw_update_mixed(params.data(), master.data(), grads.data(), m.data(), v.data(), n, 1.0f / 1024, k, st);
      });
      r.memory("cast fp32->" + std::string(DType<F>::name), "update", (4.0 + s) * n,
               [&] { cast(params.data(), master.data(), n, st); });
    }
  }
  r.memory("scale_inplace", "update", 2.0 * n * s, [&] { scale_inplace(grads.data(), 1.0f, n, st); });
  DeviceBuffer<double> partials(kSumSquaresBlocks, MemCategory::kWorkspace, nullptr);
  DeviceBuffer<double> sum(1, MemCategory::kWorkspace, nullptr);
  r.memory("sum_squares", "update", n * s, [&] { sum_squares(sum.data(), partials.data(), grads.data(), n, st); });
  return r.take();
}

template std::vector<KernelRow> bench_optimizer<float>(const BenchShape&, const BenchOptions&, const Ceilings&);
template std::vector<KernelRow> bench_optimizer<bf16>(const BenchShape&, const BenchOptions&, const Ceilings&);

}  // namespace scalelab::cuda
