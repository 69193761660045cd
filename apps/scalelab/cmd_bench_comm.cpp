// `scalelab bench comm`: collective bandwidth in nccl-tests' format, our ring next to the
// backend's built-in collective, on every message size of a sweep (stage 04).
//
//   mpirun --oversubscribe -np 4 scalelab bench comm --op all --json out/comm.json
//   scalelab bench comm --backend local      (one rank, no MPI: a smoke test, busbw is 0)
//
// Columns: size (B), count (elements), type, redop, then per implementation time (us), algbw
// and busbw (GB/s) and #wrong, and the busbw ratio ring/builtin. Definitions in comm_bench.hpp
// and docs/stages/04-collectives.md. Only rank 0 prints and writes; a wrong element anywhere
// makes the command fail after the table is out.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <memory>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/local_rank.hpp"
#include "comm/runtime.hpp"
#include "comm_bench.hpp"
#include "commands.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"

namespace scalelab::cli {

namespace {

struct BenchCommFlags {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t(256) << 20;
  double step_factor = 2;
  int iters = 20;
  int warmup = 5;
  std::string op = "all_reduce";
  std::string impl = "both";
  std::string dtype = "float";
  std::string backend = "auto";
  std::size_t chunk_bytes = RingOptions{}.chunk_bytes;
  int window = RingOptions{}.window;
  std::string json;
};

// Everything checked before any communicator exists, so a bad flag gives one message per rank
// and exit status 2 instead of an aborted job.
struct BenchPlan {
  std::vector<BenchOp> ops;
  std::vector<BenchImpl> impls;  // ring first: its columns come first
  std::vector<std::size_t> counts;
  BenchSettings settings;
};

std::vector<BenchOp> parse_ops(const std::string& s) {
  if (s == "all_reduce") return {BenchOp::kAllReduce};
  if (s == "reduce_scatter") return {BenchOp::kReduceScatter};
  if (s == "all_gather") return {BenchOp::kAllGather};
  if (s == "all") return {BenchOp::kAllReduce, BenchOp::kReduceScatter, BenchOp::kAllGather};
  throw ConfigError("--op: unknown collective '" + s + "'; choose all_reduce, reduce_scatter, all_gather or all");
}

std::vector<BenchImpl> parse_impls(const std::string& s) {
  if (s == "ring") return {BenchImpl::kRing};
  if (s == "builtin") return {BenchImpl::kBuiltin};
  if (s == "both") return {BenchImpl::kRing, BenchImpl::kBuiltin};
  throw ConfigError("--impl: unknown implementation '" + s + "'; choose ring, builtin or both");
}

// min, min*f, min*f^2, ... up to max, in whole elements; sizes that round to the same count
// (a factor close to 1 on small sizes) appear once.
std::vector<std::size_t> sweep_counts(std::size_t min_bytes, std::size_t max_bytes, double factor) {
  std::vector<std::size_t> counts;
  for (double bytes = static_cast<double>(min_bytes); bytes <= static_cast<double>(max_bytes); bytes *= factor) {
    const std::size_t count = static_cast<std::size_t>(bytes) / sizeof(float);
    if (counts.empty() || counts.back() != count) counts.push_back(count);
  }
  return counts;
}

BenchPlan make_plan(const BenchCommFlags& f) {
  require(f.dtype == "float", "--dtype", "'" + f.dtype + "' is not measured (the #wrong check is written for float)",
          "use --dtype float");
  require(f.min_bytes >= sizeof(float), "--min-bytes", std::to_string(f.min_bytes) + " B is less than one float",
          "pass at least 4, e.g. --min-bytes 8");
  require(f.min_bytes <= f.max_bytes, "--min-bytes",
          std::to_string(f.min_bytes) + " B is larger than --max-bytes " + std::to_string(f.max_bytes) + " B",
          "make --min-bytes <= --max-bytes");
  require(f.step_factor > 1, "--step-factor", "must be larger than 1 to reach --max-bytes",
          "pass e.g. --step-factor 2 (nccl-tests' -f 2)");
  require(f.iters >= 1, "--iters", "needs at least one timed iteration", "pass e.g. --iters 20");
  require(f.warmup >= 0, "--warmup", "cannot be negative", "pass e.g. --warmup 5, or 0 for none");
  require(f.chunk_bytes >= sizeof(float), "--chunk-bytes", "a ring piece must hold at least one float",
          "pass e.g. --chunk-bytes 256K");
  require(f.window >= 1, "--window", "the ring needs at least one receive in flight", "pass e.g. --window 4");
  BenchPlan plan;
  plan.ops = parse_ops(f.op);
  plan.impls = parse_impls(f.impl);
  plan.counts = sweep_counts(f.min_bytes, f.max_bytes, f.step_factor);
  plan.settings.iters = f.iters;
  plan.settings.warmup = f.warmup;
  plan.settings.ring = RingOptions{f.chunk_bytes, f.window};
  return plan;
}

// One size of one collective: a row per implementation, ring first.
struct SizeResult {
  std::vector<BenchRow> rows;
  // busbw ring / builtin; empty unless both ran and builtin moved bytes (it does not on 1 rank).
  std::optional<double> ratio() const {
    if (rows.size() != 2 || rows[1].busbw <= 0) return std::nullopt;
    return rows[0].busbw / rows[1].busbw;
  }
};

void print_header(BenchOp op, const std::vector<BenchImpl>& impls, const Communicator& world, const BenchSettings& s) {
  std::printf(
      "#\n# %s, %d ranks (%s), float, in place, %d iterations after %d warm-up; ring pieces of %zu B, "
      "window %d\n",
      bench_op_name(op), world.size(), world.backend(), s.iters, s.warmup, s.ring.chunk_bytes, s.ring.window);
  std::printf("# time: max over ranks of the mean per iteration; algbw = size/time; busbw = algbw * %s\n#\n",
              op == BenchOp::kAllReduce ? "2(n-1)/n" : "(n-1)/n");
  std::printf("# %12s %12s %6s %6s", "", "", "", "");
  for (BenchImpl impl : impls) std::printf("   %-32s", impl == BenchImpl::kRing ? "ring (ours)" : "builtin");
  std::printf("\n# %12s %12s %6s %6s", "size", "count", "type", "redop");
  for (std::size_t i = 0; i < impls.size(); ++i) std::printf("   %9s %7s %7s %6s", "time", "algbw", "busbw", "#wrong");
  if (impls.size() == 2) std::printf("   %7s", "busbw");
  std::printf("\n# %12s %12s %6s %6s", "(B)", "(elements)", "", "");
  for (std::size_t i = 0; i < impls.size(); ++i) std::printf("   %9s %7s %7s %6s", "(us)", "(GB/s)", "(GB/s)", "");
  if (impls.size() == 2) std::printf("   %7s", "ring/bi");
  std::printf("\n");
}

void print_row(const SizeResult& r) {
  const BenchRow& first = r.rows.front();
  std::printf("  %12zu %12zu %6s %6s", first.bytes, first.count, "float", bench_redop_name(first.op));
  for (const BenchRow& row : r.rows)
    std::printf("   %9.2f %7.2f %7.2f %6llu", row.seconds * 1e6, row.algbw, row.busbw,
                static_cast<unsigned long long>(row.wrong));
  if (r.rows.size() == 2) {
    if (const auto ratio = r.ratio())
      std::printf("   %6.2fx", *ratio);
    else
      std::printf("   %7s", "n/a");
  }
  std::printf("\n");
  std::fflush(stdout);
}

constexpr std::size_t kSummaryMinBytes = std::size_t(1) << 20;

// The ring/builtin busbw ratios at sizes >= 1 MiB, where bandwidth rather than latency decides:
// min and median. Null when there are none (one implementation, one rank, or only small sizes).
nlohmann::json summarise(BenchOp op, const std::vector<SizeResult>& results) {
  std::vector<double> ratios;
  for (const SizeResult& r : results)
    if (r.rows.front().bytes >= kSummaryMinBytes && r.ratio()) ratios.push_back(*r.ratio());
  if (ratios.empty()) return nullptr;
  std::sort(ratios.begin(), ratios.end());
  const std::size_t m = ratios.size();
  const double median = m % 2 ? ratios[m / 2] : (ratios[m / 2 - 1] + ratios[m / 2]) / 2;
  std::printf("# %s: busbw ring/builtin at sizes >= 1 MiB: min %.2fx, median %.2fx (%zu sizes)\n", bench_op_name(op),
              ratios.front(), median, m);
  return {{"op", bench_op_name(op)},
          {"min_bytes", kSummaryMinBytes},
          {"sizes", m},
          {"min", ratios.front()},
          {"median", median}};
}

nlohmann::json row_json(const BenchRow& r) {
  return {{"op", bench_op_name(r.op)},
          {"impl", bench_impl_name(r.impl)},
          {"size_bytes", r.bytes},
          {"count", r.count},
          {"type", "float"},
          {"redop", bench_redop_name(r.op)},
          {"time_us", r.seconds * 1e6},
          {"algbw_gbs", r.algbw},
          {"busbw_gbs", r.busbw},
          {"wrong", r.wrong}};
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// The whole sweep on every rank; returns the number of wrong elements (the same on every rank).
std::uint64_t run_sweep(Communicator& world, const BenchPlan& plan, const std::string& json_path) {
  const bool printer = world.rank() == 0;
  std::ofstream json_file;
  if (printer && !json_path.empty()) {
    json_file.open(json_path);  // opened first, so a bad path fails before minutes of measuring
    require(json_file.good(), "--json", "cannot write '" + json_path + "'",
            "pass a path in an existing, writable directory");
  }
  Buffer<float> buffer(plan.counts.back(), MemCategory::kComm, nullptr);
  nlohmann::json rows = nlohmann::json::array(), summary = nlohmann::json::array();
  std::uint64_t wrong = 0;
  for (BenchOp op : plan.ops) {
    if (printer) print_header(op, plan.impls, world, plan.settings);
    std::vector<SizeResult> results;
    for (std::size_t count : plan.counts) {
      SizeResult& r = results.emplace_back();
      for (BenchImpl impl : plan.impls) {
        r.rows.push_back(bench_collective(world, op, impl, {buffer.data(), buffer.size()}, count, plan.settings));
        wrong += r.rows.back().wrong;
        rows.push_back(row_json(r.rows.back()));
      }
      if (printer) print_row(r);
    }
    if (printer) {
      const nlohmann::json s = summarise(op, results);
      if (!s.is_null()) summary.push_back(s);
    }
  }
  if (printer) {
    std::printf("# wrong elements: %llu%s\n", static_cast<unsigned long long>(wrong), wrong ? "  FAILED" : "  OK");
    if (json_file.is_open()) {
      const nlohmann::json out = {{"ranks", world.size()},
                                  {"backend", world.backend()},
                                  {"host", this_host_name()},
                                  {"date_utc", utc_now()},
                                  {"dtype", "float"},
                                  {"in_place", true},
                                  {"iters", plan.settings.iters},
                                  {"warmup", plan.settings.warmup},
                                  {"ring_chunk_bytes", plan.settings.ring.chunk_bytes},
                                  {"ring_window", plan.settings.ring.window},
                                  {"rows", rows},
                                  {"summary", summary}};
      json_file << out.dump(1) << "\n";
      require(json_file.good(), "--json", "writing '" + json_path + "' failed", "check the disk and the path");
      std::printf("# wrote %s\n", json_path.c_str());
    }
  }
  return wrong;
}

}  // namespace

void add_bench_comm_command(CLI::App& bench) {
  auto f = std::make_shared<BenchCommFlags>();
  CLI::App* cmd = bench.add_subcommand(
      "comm", "Collective bandwidth, nccl-tests style: our ring vs the built-in (run under mpirun -np N)");
  const auto sizes = CLI::AsSizeValue(false);  // 8, 64K, 256M: K, M, G are powers of 1024
  cmd->add_option("--min-bytes", f->min_bytes, "Smallest message, whole buffer (B; K/M/G suffixes)")
      ->transform(sizes)
      ->capture_default_str();
  cmd->add_option("--max-bytes", f->max_bytes, "Largest message, whole buffer (B; K/M/G suffixes)")
      ->transform(sizes)
      ->capture_default_str();
  cmd->add_option("--step-factor", f->step_factor, "Each size is the previous times this")->capture_default_str();
  cmd->add_option("--iters", f->iters, "Timed iterations per size")->capture_default_str();
  cmd->add_option("--warmup", f->warmup, "Untimed iterations before them")->capture_default_str();
  cmd->add_option("--op", f->op, "all_reduce, reduce_scatter, all_gather or all")->capture_default_str();
  cmd->add_option("--impl", f->impl, "ring (ours), builtin (the backend's) or both")->capture_default_str();
  cmd->add_option("--dtype", f->dtype, "Element type (float)")->capture_default_str();
  cmd->add_option("--backend", f->backend, "auto, local or mpi")->capture_default_str();
  cmd->add_option("--chunk-bytes", f->chunk_bytes, "Ring: largest message (piece) in bytes")
      ->transform(sizes)
      ->capture_default_str();
  cmd->add_option("--window", f->window, "Ring: receives in flight ahead")->capture_default_str();
  cmd->add_option("--json", f->json, "Write every row and the run's metadata here (rank 0)");
  cmd->callback([f] {
    const BenchPlan plan = make_plan(*f);
    CommRuntime runtime(parse_backend(f->backend), CommOptions{});
    std::uint64_t wrong = 0;
    bool printer = false;
    runtime.run([&](Communicator& world) {
      wrong = run_sweep(world, plan, f->json);
      printer = world.rank() == 0;
      return 0;
    });
    // Every rank knows the count; one message (rank 0's) and mpirun's status are enough.
    if (wrong > 0 && printer)
      throw Error("bench comm: " + std::to_string(wrong) +
                  " elements differed from the exact result (see #wrong); a collective is broken");
  });
}

}  // namespace scalelab::cli
